// Folded stacks and flame graphs from the stack tools' NDJSON: each stack record
// (user_stack/kernel_stack) becomes the folded line the tool's own -f prints
// (common/stacks folded_line), and the SVG comes from common/flamegraph.
#include <fstream>
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

void write_stacks(Run& run) {
  for (auto& t : run.tools) {
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
    std::ofstream(run.dir + "/" + t.name + ".folded", std::ios::trunc) << folded;
    t.files.push_back(t.name + ".folded");
    if (!t.own_svg) {
      FlameOptions o;
      o.title = t.name + (k.palette == FlamePalette::OffCpu ? ": off-CPU time" : ": on-CPU samples");
      o.subtitle = "runbook " + run.book.name + (run.cfg.pid_arg.empty() ? "" : ", PID " + run.cfg.pid_arg) + ", " +
                   fmt_ms(run.window_end_ns - run.window_start_ns);
      o.unit = k.unit;
      o.palette = k.palette;
      std::ofstream(run.dir + "/" + t.name + ".svg", std::ios::trunc) << render_flamegraph(lines, o);
    }
    t.files.push_back(t.name + ".svg");
  }
  // a tool given --svg wrote its own SVG even if its records carry no stacks
  for (auto& t : run.tools) {
    if (!t.own_svg) continue;
    bool listed = false;
    for (auto& f : t.files) listed = listed || f == t.name + ".svg";
    if (!listed && std::ifstream(run.dir + "/" + t.name + ".svg")) t.files.push_back(t.name + ".svg");
  }
}

}  // namespace runbook
