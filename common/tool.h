// The skeleton every tool's run() follows, so the order and the policies live once:
//
//   build plan -> --ebpf (print and stop) -> preflight -> load -> [tool attaches]
//   -> attach_phase_done (stop signals now ask for the report)
//   -> announce_attached (banner / "<tool>.start") -> run loop (interval reports,
//   target exit / exec via TargetWatch) -> final report
//
//   auto bpf = bpf_plan(c);                   // Result<BpfPlan>: text, defines, filters
//   auto s = load_tool(ToolPlan{"naptime", *bpf, c.ebpf});
//   if (!s) return Error{s.error()};
//   if (!*s) return std::nullopt;             // --ebpf: the listing was printed
//   BpfSession& session = **s;
//   ... attach ...
//   attach_phase_done();
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
  BpfPlan bpf;        // the program, its defines and filters, the tracepoints it needs
  bool ebpf = false;  // print the program with its defines and stop
};

// --ebpf -> preflight -> load. A null session (with success) means --ebpf
// printed the listing on stdout and there is nothing to run; so it does with
// BPFDIAG_COMPILE_CHECK=1 in the environment once the program has compiled and its maps
// exist (scripts/check-bpf-variants; with BPFDIAG_CACHE=0 it always compiles).
[[nodiscard]] Result<std::unique_ptr<BpfSession>> load_tool(const ToolPlan& plan);

// Runs the loop with the -p policy wired in (`targets` may watch nothing: system-wide)
// and returns once the final report has been made.
// The end of the tool's attach phase: from here a stop signal asks for the final
// report instead of ending the process (exit 128+signal) as it does while compiling
// and attaching. Call once, after the last attach and before announce_attached; the
// attach calls themselves set no signal policy.
void attach_phase_done();

Status run_tool_loop(const Schedule& s, RunHooks& hooks, TargetWatch& targets);

}  // namespace bpfdiag
