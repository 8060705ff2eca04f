#include "common/tool.h"

#include <iostream>

#include "common/timing.h"

namespace bpfdiag {

Result<std::unique_ptr<BpfSession>> load_tool(const ToolPlan& plan) {
  if (plan.ebpf) {
    std::cout << ebpf_listing(plan.bpf);
    return std::unique_ptr<BpfSession>();
  }
  timing_mark("tool setup + build plan");
  if (auto st = preflight(plan.bpf.tracepoints)) return Error{st->message};
  timing_mark("preflight");
  auto s = BpfSession::load(plan.bpf);
  if (!s) return Error{s.error()};
  return std::move(s.value());
}

void attach_phase_done() { enter_reporting(); }

Status run_tool_loop(const Schedule& s, RunHooks& hooks, TargetWatch& targets) {
  if (!targets.empty()) targets.attach(hooks);
  run_loop(s, hooks);
  return std::nullopt;
}

}  // namespace bpfdiag
