// pmheld --pprof: each lock's holds by acquiring stack as pprof's holds/count and
// hold/nanoseconds, labelled with the process (pid, comm) and the lock (its symbol or
// address). A lock without stacks (-s 0) is one sample without frames, so the
// profile's totals are the report's.
#include "common/pprof.h"

#include "tools/pmheld/pmheld.h"

namespace pmheld {
using namespace bpfdiag;

RunPprof pprof_output(const Config& c) { return RunPprof(c.pprof, {{"holds", "count"}, {"hold", "nanoseconds"}}, 1); }

void add_pprof(PprofProfile& p, const std::vector<LockHold>& locks, const Symbolizer& sym) {
  for (const auto& l : locks) {
    std::vector<PprofLabel> labels = {PprofLabel::number("pid", l.pid), PprofLabel::text("comm", l.comm),
                                      PprofLabel::text("lock", lock_name(l))};
    uint64_t count = 0, total = 0;
    for (const auto& s : l.stacks) {
      std::vector<PprofFrame> frames;
      if (s.missing) frames.push_back({"[Missed User Stack]", false, {}});
      else append_pprof_frames(frames, s.frames, false, l.pid, sym);
      p.add({std::move(frames), {static_cast<int64_t>(s.count), static_cast<int64_t>(s.total_ns)}, labels});
      count += s.count, total += s.total_ns;
    }
    if (count < l.count || total < l.total_ns)  // holds no stack was kept for
      p.add({{},
             {static_cast<int64_t>(l.count - std::min(count, l.count)),
              static_cast<int64_t>(l.total_ns - std::min(total, l.total_ns))},
             labels});
  }
}

}  // namespace pmheld
