// Folded stacks and flame graphs from the stack tools' NDJSON: each stack record
// (user_stack/kernel_stack) becomes the folded line the tool's own -f prints
// (common/stacks folded_line), and the SVG comes from common/flamegraph.
#include <sys/stat.h>
#include <unistd.h>

#include <map>

#include "common/flamegraph.h"
#include "common/output.h"
#include "common/stacks.h"
#include "tools/runbook/runbook.h"

namespace runbook {
using namespace bpfdiag;
using json = nlohmann::json;

namespace {

struct StackKind {
  const char* value_key;
  uint64_t divisor;
  const char* unit;
  FlamePalette palette;
};

// Which field is a stack's weight: off-CPU time (us, as offcputime -f), else samples.
StackKind kind_of(const json& r) {
  if (r.contains("offcpu_total_ns")) return {"offcpu_total_ns", 1000, "us", FlamePalette::OffCpu};
  for (auto* k : {"sample_count", "samples", "count"})
    if (r.contains(k)) return {k, 1, "samples", FlamePalette::OnCpu};
  return {nullptr, 1, "", FlamePalette::OnCpu};
}

}  // namespace

namespace {

// Bytes the tool wrote to the SVG runbook created for its --svg.
off_t own_svg_size(const ToolRun& t) {
  struct stat st;
  return t.svg_fd >= 0 && fstat(t.svg_fd, &st) == 0 ? st.st_size : 0;
}

}  // namespace

void write_stacks(Run& run) {
  for (auto& t : run.tools) {
    const std::string base = t.base.empty() ? t.name : t.base;
    std::vector<const json*> stacks;
    for (auto* r : t.final_records("stack"))
      if (r->contains("user_stack") || r->contains("kernel_stack")) stacks.push_back(r);
    if (stacks.empty()) continue;
    StackKind k = kind_of(*stacks[0]);
    if (!k.value_key) continue;
    // identical folded lines merge (as offcputime -f merges them)
    std::map<std::string, uint64_t> sums;
    std::vector<std::string> order;
    for (auto* r : stacks) {
      std::string l = folded_line(r->value("comm", std::string("?")), stack_from_json(*r), 0);
      l.resize(l.size() - 2);  // " 0"
      if (!sums.count(l)) order.push_back(l);
      sums[l] += (*r)[k.value_key].get<uint64_t>();
    }
    std::string folded;
    std::vector<FoldedLine> lines;
    for (auto& l : order) {
      uint64_t v = sums[l] / k.divisor;
      folded += l + " " + std::to_string(v) + "\n";
      if (auto fl = parse_folded(l + " " + std::to_string(v))) lines.push_back(*fl);
    }
    if (!write_report_file(run, base + ".folded", folded)) t.files.push_back(base + ".folded");
    if (!t.own_svg || own_svg_size(t) == 0) {  // the tool wrote none: ours, from its records
      FlameOptions o;
      o.title = k.palette == FlamePalette::OffCpu ? "Off-CPU Time Flame Graph" : "On-CPU Flame Graph";
      o.subtitle = t.name + ", runbook " + run.book.name + (run.cfg.pid_arg.empty() ? "" : ", PID " + run.cfg.pid_arg) + ", " +
                   fmt_ms(run.window_end_ns - run.window_start_ns);
      o.unit = k.unit;
      o.palette = k.palette;
      const std::string svg = render_flamegraph(lines, o);
      bool ok = t.svg_fd >= 0 ? ftruncate(t.svg_fd, 0) == 0 && lseek(t.svg_fd, 0, SEEK_SET) == 0 &&
                                    write_all(t.svg_fd, svg)
                              : !write_report_file(run, base + ".svg", svg);
      if (!ok) continue;
    }
    t.files.push_back(base + ".svg");
  }
  // a tool given --svg wrote its own SVG even if its records carry no stacks; the file
  // runbook created for one it did not write is removed
  for (auto& t : run.tools) {
    if (t.svg_fd < 0) continue;
    const std::string svg = (t.base.empty() ? t.name : t.base) + ".svg";
    bool listed = false;
    for (auto& f : t.files) listed = listed || f == svg;
    if (!listed && own_svg_size(t) > 0) t.files.push_back(svg);
    if (own_svg_size(t) == 0) unlinkat(run.dir_fd, svg.c_str(), 0);
    close(t.svg_fd);
    t.svg_fd = -1;
  }
  // the pprof profile a tool given --pprof wrote (TOOL.pb.gz), listed next to its flame
  // graph; the file runbook created for one it did not write is removed
  for (auto& t : run.tools) {
    if (t.pprof_fd < 0) continue;
    const std::string pb = (t.base.empty() ? t.name : t.base) + ".pb.gz";
    struct stat st;
    if (fstat(t.pprof_fd, &st) == 0 && st.st_size > 0) t.files.push_back(pb);
    else unlinkat(run.dir_fd, pb.c_str(), 0);
    close(t.pprof_fd);
    t.pprof_fd = -1;
  }
}

}  // namespace runbook
