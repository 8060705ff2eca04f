// offcputime --pprof: each stack's off-CPU time and periods as pprof's
// off_cpu/nanoseconds and off_cpu_periods/count, per thread (pid, tid, comm) and wait
// class (as the JSON's wait_class). --waker: the sample's frames stay the wakee's (so
// pprof's top/list/peek still say where threads waited); the waker is in labels:
// waker_kind, waker_comm (as the folded view names it: comm or [interrupt], ...),
// waker_pid/waker_tid (a task's) and waker_stack (its frames as the folded view lists
// them after "--", ";"-separated), e.g. `go tool pprof -tagfocus waker_comm=B`.
#include "common/pprof.h"

#include "tools/offcputime/offcputime.h"

namespace offcputime {
using namespace bpfdiag;

RunPprof pprof_output(const Config& c) {
  return RunPprof(c.pprof, {{"off_cpu", "nanoseconds"}, {"off_cpu_periods", "count"}}, 0);
}

void add_pprof(PprofProfile& p, const std::vector<Entry>& entries, const Symbolizer& sym, bool waker) {
  for (const auto& e : entries) {
    std::vector<PprofLabel> labels = thread_labels(e.pid, e.tid, e.comm);
    labels.push_back(PprofLabel::text("wait_class", wait_kind_name(e.wait.kind)));
    if (waker) {
      const Waker& w = e.waker;
      labels.push_back(PprofLabel::text("waker_kind", waker_kind_name(w.kind)));
      labels.push_back(PprofLabel::text("waker_comm", w.name()));
      if (w.kind == WakerKind::Task) {
        labels.push_back(PprofLabel::number("waker_pid", w.pid));
        labels.push_back(PprofLabel::number("waker_tid", w.tid));
      }
      std::string frames = waker_folded_suffix(w);  // ";--;f1;...;name"
      size_t from = 4, to = frames.rfind(';');
      labels.push_back(PprofLabel::text("waker_stack", to > from ? frames.substr(from, to - from) : ""));
    }
    p.add({pprof_frames(e.stack, e.pid, sym),
           {static_cast<int64_t>(e.total_ns), static_cast<int64_t>(e.count)},
           std::move(labels)});
  }
}

}  // namespace offcputime
