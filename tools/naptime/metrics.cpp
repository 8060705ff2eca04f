// naptime's metrics (--prometheus / --listen, common/metrics.h): per command the
// sleeps, their time slept and requested (the JSON's sleep_count, sleep_total_ns,
// requested_total_ns, interrupted_count), and a histogram of the time slept.
#include "common/metrics.h"

#include "tools/naptime/naptime.h"

namespace naptime {
using namespace bpfdiag;

void add_sleep_metrics(MetricSet& m, const Sleep& s) {
  m.histogram("bpfdiag_sleep_duration_seconds", "Time slept by one call (nanosleep, clock_nanosleep).", {},
              {1e-5, 1e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60})
      .observe({}, double(s.slept_ns) / 1e9);
}

void add_report_metrics(MetricSet& m, const Summary& sum) {
  auto& sleeps = m.counter("bpfdiag_sleeps_total", "Sleeps that ended, by command (sleep_count).", {"comm"});
  auto& slept = m.counter("bpfdiag_sleep_seconds_total", "Time slept, by command (sleep_total_ns).", {"comm"});
  auto& requested = m.counter("bpfdiag_sleep_requested_seconds_total",
                              "Time the sleeps asked for, by command (requested_total_ns).", {"comm"});
  auto& interrupted =
      m.counter("bpfdiag_sleeps_interrupted_total",
                "Sleeps ended early by a signal or an error, by command (interrupted_count).", {"comm"});
  for (const auto& [pid, p] : sum.procs()) {
    sleeps.add({p.comm}, double(p.count));
    slept.add({p.comm}, double(p.slept_ns) / 1e9);
    requested.add({p.comm}, double(p.requested_ns) / 1e9);
    interrupted.add({p.comm}, double(p.interrupted));
  }
}

}  // namespace naptime
