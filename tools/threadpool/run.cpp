// threadpool: the tool skeleton (load, attach, announce, run loop, report).
#include <time.h>

#include <cstring>
#include <iostream>

#include "common/proc.h"
#include "common/tool.h"
#include "tools/threadpool/tracer.h"

namespace threadpool {
using namespace bpfdiag;

namespace {

void on_event(void* cookie, void* data, int size) {
  if (size < static_cast<int>(sizeof(tp_req_event))) return;
  tp_req_event e;
  std::memcpy(&e, data, sizeof e);
  static_cast<Requests*>(cookie)->on_event(e);
}

void on_lost(void* cookie, uint64_t n) { static_cast<Requests*>(cookie)->on_lost(n); }

const char* const kTracepoints[] = {"sched_switch", "sched_waking", "sched_wakeup_new",
                                    "sched_process_fork", "sys_enter", "sys_exit"};

}  // namespace

Status run(const Config& c) {
  size_t nthreads = 0;
  if (!c.ebpf) {
    if (!pid_exists(c.pid)) return Error{"no process with PID " + std::to_string(c.pid)};
    nthreads = proc_threads(c.pid).size();
    if (nthreads < 2)
      return Error{"PID " + std::to_string(c.pid) + " (" + proc_comm(c.pid) +
                   ") has a single thread; threadpool needs a multi-threaded process"};
  }
  auto plan = bpf_plan(c, nthreads);
  if (!plan) return Error{plan.error()};
  auto loaded = load_tool(ToolPlan{"threadpool", *plan, c.ebpf});
  if (!loaded) return Error{loaded.error()};
  if (!*loaded) return std::nullopt;  // --ebpf
  BpfSession& session = **loaded;
  for (const char* tp : kTracepoints)
    if (auto st = session.attach_raw_tracepoint(tp, std::string("raw_tracepoint__") + tp)) return st;
  attach_phase_done();
  Tracer tracer(c, session, map_sizes(c, nthreads));
  if (auto st = session.open_perf_buffer("reqs", on_event, on_lost, &tracer.requests(), 256)) return st;
  if (auto st = tracer.init()) return st;
  announce_attached(std::cout, "threadpool", c.json,
                    "Tracing thread pool of PID " + std::to_string(c.pid) + " (" + proc_comm(c.pid) +
                        ")... Hit Ctrl-C to end.",
                    tracer.start_fields(), empty_quality());

  Status failure;
  RunHooks hooks;
  hooks.poll = [&](int timeout_ms) {
    const uint64_t end = monotonic_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ULL;
    while (true) {
      session.poll_perf_buffer("reqs", 0);
      tracer.tick();
      uint64_t now = monotonic_ns();
      if (now >= end) break;
      uint64_t nap = std::min<uint64_t>(end - now, 10000000ULL);
      struct timespec ts = {0, static_cast<long>(nap)};
      nanosleep(&ts, nullptr);
    }
  };
  hooks.report = [&](bool final) {
    if (auto st = tracer.report(final)) failure = st;
  };
  hooks.should_stop = [&]() { return tracer.target_gone(); };
  // the target's exit is watched by the tracer (its report says so), not by a TargetWatch
  TargetWatch none({});
  if (auto st = run_tool_loop(c.schedule, hooks, none)) return st;
  tracer.warn_loss(std::cerr);
  return failure;
}

}  // namespace threadpool
