// lockstat's metrics (--prometheus / --listen, common/metrics.h): wait time and waits
// per lock, kind and class (the JSON's lock, kind, class, wait_total_ns, wait_count),
// every class (contention and the waits ranked apart).
#include "common/metrics.h"

#include "tools/lockstat/lockstat.h"

namespace lockstat {
using namespace bpfdiag;

void add_report_metrics(MetricSet& m, const Report& rep) {
  auto& secs =
      m.counter("bpfdiag_lock_wait_seconds_total",
                "Time threads waited for locks, by lock, kind and class (wait_total_ns).", {"lock", "kind", "class"});
  auto& waits = m.counter("bpfdiag_lock_contentions_total",
                          "Waits for locks (calls that blocked), by lock, kind and class (wait_count).",
                          {"lock", "kind", "class"});
  for (const auto* rows : {&rep.locks, &rep.other})
    for (const auto& r : *rows) {
      const std::vector<std::string> labels = {r.name(), r.kind, wait_class_name(r.cls)};
      secs.add(labels, double(r.total_ns) / 1e9);
      waits.add(labels, double(r.contended));
    }
}

}  // namespace lockstat
