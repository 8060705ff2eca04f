#include "common/stack_tool.h"

#include "common/tool_config.h"

namespace bpfdiag {

Result<ParsedCli> parse_stack_tool_cli(const ToolSpec& spec, int argc, char** argv, StackToolConfig& c) {
  auto r = parse_tool_cli(spec, argc, argv);
  if (!r) return Error{r.error()};
  const CommonOptions& co = r->common;
  copy_common(co, c);
  c.user_stacks_only = co.user_stacks_only;
  c.kernel_stacks_only = co.kernel_stacks_only;
  c.delimiter = r->raw.count("delimited");
  if (c.help) return r;
  auto cg = resolve_cgroup_options(co, c.pids);
  if (!cg) return Error{cg.error()};
  c.cgroup = *cg;
  return r;
}

namespace {
std::string id_list(const std::vector<uint32_t>& v) {
  std::string s;
  for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}
}  // namespace

std::string stack_targets_text(const StackToolConfig& c) {
  if (!c.tids.empty()) return "TID " + id_list(c.tids) + cgroup_banner(c.cgroup);
  if (!c.pids.empty()) return "PID " + id_list(c.pids) + cgroup_banner(c.cgroup);
  return (c.cgroup ? "threads" : "all threads") + cgroup_banner(c.cgroup);
}

std::string stack_parts_text(const StackToolConfig& c) {
  return c.user_stacks_only ? "user" : c.kernel_stacks_only ? "kernel" : "user + kernel";
}

void add_symbolizer_dq(DataQuality& dq, const Symbolizer::Stats& before, const Symbolizer::Stats& after) {
  dq.add("unknown_frames", (after.user_unknown + after.kernel_unknown) - (before.user_unknown + before.kernel_unknown));
  dq.add("processes_gone_before_seen", after.pids_unreadable - before.pids_unreadable);
  dq.add("symbolize_skipped", after.symbolize_skipped - before.symbolize_skipped);
  dq.add("debuginfod_files", after.debuginfod_files - before.debuginfod_files);
  dq.add("debuginfod_failed", after.debuginfod_failed - before.debuginfod_failed);
}

void write_folded_report(std::ostream& os, std::ostream& err, const std::vector<std::string>& lines,
                         const DataQuality& dq) {
  for (auto& l : lines) os << l << "\n";
  os.flush();
  err << dq.to_text() << "\n";
}

nlohmann::json stack_summary_fields(nlohmann::json totals, size_t stacks, const nlohmann::json& threads) {
  totals["stack_count"] = stacks;
  totals["thread_count"] = threads.size();
  totals["threads"] = threads;
  return totals;
}

}  // namespace bpfdiag
