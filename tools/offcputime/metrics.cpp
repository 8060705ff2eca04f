// offcputime's metrics (--prometheus / --listen, common/metrics.h): off-CPU time and
// periods per process, command and wait class (the JSON's offcpu_total_ns,
// offcpu_count and wait_class), summed over each report's stacks.
#include "common/metrics.h"

#include <map>
#include <tuple>

#include "tools/offcputime/offcputime.h"

namespace offcputime {
using namespace bpfdiag;

void add_report_metrics(MetricSet& m, const std::vector<Entry>& entries) {
  auto& secs = m.counter("bpfdiag_offcpu_seconds_total",
                         "Time threads spent off-CPU, by process, command and wait class (offcpu_total_ns).",
                         {"pid", "comm", "wait_class"});
  auto& periods = m.counter("bpfdiag_offcpu_periods_total",
                            "Off-CPU periods that ended, by process, command and wait class (offcpu_count).",
                            {"pid", "comm", "wait_class"});
  std::map<std::tuple<uint32_t, std::string, std::string>, std::pair<uint64_t, uint64_t>> by;
  for (const auto& e : entries) {
    auto& v = by[{e.pid, e.comm, wait_kind_name(e.wait.kind)}];
    v.first += e.total_ns;
    v.second += e.count;
  }
  for (const auto& [k, v] : by) {
    const std::vector<std::string> labels = {std::to_string(std::get<0>(k)), std::get<1>(k), std::get<2>(k)};
    secs.add(labels, double(v.first) / 1e9);
    periods.add(labels, double(v.second));
  }
}

}  // namespace offcputime
