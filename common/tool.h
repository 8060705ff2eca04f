// The skeleton every tool's run() follows, so the order and the policies live once:
//
//   cflags -> --ebpf (print and stop) -> preflight -> load -> [tool attaches]
//   -> announce_attached (banner / "<tool>.start") -> run loop (interval reports,
//   target exit / exec via TargetWatch) -> final report
//
//   ToolPlan plan{"naptime", bpf_text(), *flags, c.ebpf, {"syscalls:sys_enter_nanosleep"}};
//   auto s = load_tool(plan);                 // Result<std::unique_ptr<BpfSession>>
//   if (!s) return Error{s.error()};
//   if (!*s) return std::nullopt;             // --ebpf: the listing was printed
//   BpfSession& session = **s;
//   ... attach ...
//   announce_attached(std::cout, "naptime", c.json, banner, start_fields, dq0);
//   RunHooks hooks; hooks.report = ...;
//   return run_tool_loop(c.schedule, hooks, targets);   // TargetWatch policy wired in
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/bpf_session.h"
#include "common/result.h"
#include "common/runloop.h"
#include "common/target.h"

namespace bpfdiag {

struct ToolPlan {
  std::string tool;
  std::string bpf_text;
  std::vector<std::string> cflags;
  bool ebpf = false;                     // print the program with its cflags and stop
  std::vector<std::string> tracepoints;  // checked by preflight before loading
};

// cflags -> --ebpf -> preflight -> load. A null session (with success) means --ebpf
// printed the listing on stdout and there is nothing to run.
[[nodiscard]] Result<std::unique_ptr<BpfSession>> load_tool(const ToolPlan& plan);

// Runs the loop with the -p policy wired in (`targets` may watch nothing: system-wide)
// and returns once the final report has been made.
Status run_tool_loop(const Schedule& s, RunHooks& hooks, TargetWatch& targets);

}  // namespace bpfdiag
