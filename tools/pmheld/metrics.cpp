// pmheld's metrics (--prometheus / --listen, common/metrics.h): hold time and holds per
// mutex (the JSON's lock, comm, hold_total_ns, hold_count).
#include "common/metrics.h"

#include <cstdio>

#include "tools/pmheld/pmheld.h"

namespace pmheld {
using namespace bpfdiag;

void add_report_metrics(MetricSet& m, const std::vector<LockHold>& locks) {
  auto& secs = m.counter("bpfdiag_mutex_hold_seconds_total",
                         "Time pthread mutexes were held, by command and mutex (hold_total_ns).", {"comm", "lock"});
  auto& holds = m.counter("bpfdiag_mutex_holds_total", "pthread mutex holds, by command and mutex (hold_count).",
                          {"comm", "lock"});
  for (const auto& l : locks) {
    std::string name = l.symbol;
    if (name.empty()) {
      char b[32];
      std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(l.addr));
      name = b;
    }
    secs.add({l.comm, name}, double(l.total_ns) / 1e9);
    holds.add({l.comm, name}, double(l.count));
  }
}

}  // namespace pmheld
