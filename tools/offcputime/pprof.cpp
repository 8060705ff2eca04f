// offcputime --pprof: each stack's off-CPU time and periods as pprof's
// off_cpu/nanoseconds and off_cpu_periods/count, per thread (pid, tid, comm) and wait
// class (as the JSON's wait_class).
#include "common/pprof.h"

#include "tools/offcputime/offcputime.h"

namespace offcputime {
using namespace bpfdiag;

RunPprof pprof_output(const Config& c) {
  return RunPprof(c.pprof, {{"off_cpu", "nanoseconds"}, {"off_cpu_periods", "count"}}, 0);
}

void add_pprof(PprofProfile& p, const std::vector<Entry>& entries, const Symbolizer& sym) {
  for (const auto& e : entries) {
    std::vector<PprofLabel> labels = thread_labels(e.pid, e.tid, e.comm);
    labels.push_back(PprofLabel::text("wait_class", wait_kind_name(e.wait.kind)));
    p.add({pprof_frames(e.stack, e.pid, sym),
           {static_cast<int64_t>(e.total_ns), static_cast<int64_t>(e.count)},
           std::move(labels)});
  }
}

}  // namespace offcputime
