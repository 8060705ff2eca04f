// naptime's metrics (--prometheus / --listen, common/metrics.h): per command (of the
// sleeping thread) the sleeps, their time slept and requested (the JSON's sleep_count,
// sleep_total_ns, requested_total_ns, interrupted_count), and a histogram of the time
// slept; counted as each sleep arrives, published at each report.
#include "common/metrics.h"

#include "tools/naptime/naptime.h"

namespace naptime {
using namespace bpfdiag;

void add_sleep_metrics(MetricSet& m, const Sleep& s) {
  // by the sleeping thread's command (a process's threads may have names of their own)
  m.counter("bpfdiag_sleeps_total", "Sleeps that ended, by command (sleep_count).", {"comm"}).add({s.comm}, 1);
  m.counter("bpfdiag_sleep_seconds_total", "Time slept, by command (sleep_total_ns).", {"comm"})
      .add({s.comm}, double(s.slept_ns) / 1e9);
  m.counter("bpfdiag_sleep_requested_seconds_total", "Time the sleeps asked for, by command (requested_total_ns).",
            {"comm"})
      .add({s.comm}, double(s.requested_ns.value_or(0)) / 1e9);
  m.counter("bpfdiag_sleeps_interrupted_total",
            "Sleeps ended early by a signal or an error, by command (interrupted_count).", {"comm"})
      .add({s.comm}, s.interrupted ? 1 : 0);
  m.histogram("bpfdiag_sleep_duration_seconds", "Time slept by one call (nanosleep, clock_nanosleep).", {},
              {1e-5, 1e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60})
      .observe({}, double(s.slept_ns) / 1e9);
}

}  // namespace naptime
