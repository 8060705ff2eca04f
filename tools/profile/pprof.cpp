// profile --pprof: each stack's samples as pprof's samples/count and cpu/nanoseconds
// (a sample stands for 1e9/Hz ns of CPU, pprof's period), per thread: pid, tid, comm.
#include "common/pprof.h"

#include "tools/profile/profile.h"

namespace profile {
using namespace bpfdiag;

int64_t sample_period_ns(const Config& c) { return static_cast<int64_t>(1'000'000'000ULL / c.freq_hz); }

RunPprof pprof_output(const Config& c) {
  return RunPprof(c.pprof, {{"samples", "count"}, {"cpu", "nanoseconds"}}, 1, {"cpu", "nanoseconds"},
                  sample_period_ns(c));
}

void add_pprof(PprofProfile& p, const Config& c, const std::vector<Entry>& entries, const Symbolizer& sym) {
  const int64_t period = sample_period_ns(c);
  for (const auto& e : entries)
    p.add({pprof_frames(e.stack, e.pid, sym),
           {static_cast<int64_t>(e.samples), static_cast<int64_t>(e.samples) * period},
           thread_labels(e.pid, e.tid, e.comm)});
}

}  // namespace profile
