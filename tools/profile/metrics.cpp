// profile's metrics (--prometheus / --listen, common/metrics.h): CPU samples per
// command (the JSON's samples), and the sampling frequency to turn them into time.
#include "common/metrics.h"

#include <map>

#include "tools/profile/profile.h"

namespace profile {
using namespace bpfdiag;

void add_report_metrics(MetricSet& m, const Report& rep) {
  m.gauge("bpfdiag_cpu_sampling_frequency_hertz", "Samples per second and CPU (-F); samples / this = CPU time.")
      .set({}, double(rep.freq_hz));
  auto& samples = m.counter("bpfdiag_cpu_samples_total", "CPU samples taken, by command (samples).", {"comm"});
  std::map<std::string, uint64_t> by;
  for (const auto& e : rep.entries) by[e.comm] += e.samples;
  for (const auto& [comm, n] : by) samples.add({comm}, double(n));
}

}  // namespace profile
