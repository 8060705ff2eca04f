// lockstat --pprof: every lock row's waits by call site (the site's stack, as --svg
// draws them) as pprof's contentions/count and delay/nanoseconds (Go's mutex profile
// names), labelled with the process (pid, comm, when one owns the lock), the lock
// (name and kind) and the row's wait_class. Rows of every class are in it (the JSON's
// wait_total_ns plus other_wait_total_ns); a row's waits without a sampled stack (-P,
// -s 0, or kernel waits whose stacks were not sampled) are a sample without frames.
#include "common/pprof.h"

#include "tools/lockstat/lockstat.h"

namespace lockstat {
using namespace bpfdiag;

RunPprof pprof_output(const Config& c) {
  return RunPprof(c.pprof, {{"contentions", "count"}, {"delay", "nanoseconds"}}, 1);
}

namespace {

void add_row(PprofProfile& p, const LockRow& r, const Symbolizer& sym) {
  const bool kernel = r.layer == "kernel";
  std::vector<PprofLabel> labels;
  if (r.pid) labels.push_back(PprofLabel::number("pid", r.pid));
  if (!r.comm.empty()) labels.push_back(PprofLabel::text("comm", r.comm));
  labels.push_back(PprofLabel::text("lock", r.name()));
  if (!r.kind.empty()) labels.push_back(PprofLabel::text("lock_kind", r.kind));
  labels.push_back(PprofLabel::text("wait_class", wait_class_name(r.cls)));
  uint64_t count = 0, total = 0;
  for (const auto& s : r.sites) {
    std::vector<PprofFrame> frames;
    append_pprof_frames(frames, s.stack, kernel, kernel ? 0 : r.pid, sym);
    p.add({std::move(frames), {static_cast<int64_t>(s.contended), static_cast<int64_t>(s.total_ns)}, labels});
    count += s.contended, total += s.total_ns;
  }
  if (count < r.contended || total < r.total_ns)
    p.add({{},
           {static_cast<int64_t>(r.contended - std::min(count, r.contended)),
            static_cast<int64_t>(r.total_ns - std::min(total, r.total_ns))},
           labels});
}

}  // namespace

void add_pprof(PprofProfile& p, const Report& rep, const Symbolizer& sym) {
  for (const auto& r : rep.locks) add_row(p, r, sym);
  for (const auto& r : rep.other) add_row(p, r, sym);
}

}  // namespace lockstat
