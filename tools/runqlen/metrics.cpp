// runqlen's metrics (--prometheus / --listen, common/metrics.h): the run queue length
// samples of each report (time-weighted, as the JSON's sample_count and runqlen_avg)
// as a histogram per CPU.
#include "common/metrics.h"

#include "tools/runqlen/runqlen.h"

namespace runqlen {
using namespace bpfdiag;

void add_report_metrics(MetricSet& m, const PerCpu& samples) {
  auto& h = m.histogram("bpfdiag_runqueue_length",
                        "Tasks waiting on a CPU's run queue, sampled (time-weighted: idle time counts as 0), by CPU.",
                        {"cpu"}, {0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64});
  for (const auto& [cpu, hist] : samples) {
    h.observe({std::to_string(cpu)}, 0, 0);  // every CPU has its series, idle or not
    for (const auto& [len, n] : hist) h.observe({std::to_string(cpu)}, double(len), n);
  }
}

}  // namespace runqlen
