#include "common/tool.h"

#include <cstdlib>
#include <iostream>
#include <string>

#include "common/metrics.h"
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
  // scripts/check-bpf-variants: the program of this command line compiled and its maps
  // made; nothing is attached, and the tool ends as after --ebpf (exit 0)
  if (const char* check = std::getenv("BPFDIAG_COMPILE_CHECK"); check && std::string(check) == "1") {
    std::cerr << plan.tool << ": compiled (" << (s.value()->from_cache() ? "from cache" : "compiled now") << ")\n";
    return std::unique_ptr<BpfSession>();
  }
  return std::move(s.value());
}

void attach_phase_done() { enter_reporting(); }

Status run_tool_loop(const Schedule& s, RunHooks& hooks, TargetWatch& targets) {
  if (!targets.empty()) targets.attach(hooks);
  if (MetricsOutput* m = metrics_output(); m && m->listening()) {
    // --listen: the endpoint is served from the loop, between the tool's own waits
    // (a scrape waits at most one poll, <= 100 ms)
    if (hooks.poll) {
      hooks.poll = [m, inner = std::move(hooks.poll)](int timeout_ms) {
        inner(timeout_ms);
        m->serve(0);
      };
    } else {
      hooks.poll = [m](int timeout_ms) { m->serve(timeout_ms); };
    }
  }
  run_loop(s, hooks);
  return std::nullopt;
}

}  // namespace bpfdiag
