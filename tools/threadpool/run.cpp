// threadpool: the tool skeleton (load, attach, announce, run loop, report).
#include <time.h>

#include <cstring>
#include <iostream>

#include "common/proc.h"
#include "common/tool.h"
#include "common/unwind_maps.h"
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

// The pool's threads now (for the map sizes); a pool of one single-threaded process
// (without --children) is refused.
static Result<size_t> pool_threads(const Config& c) {
  size_t n = 0, procs = 0;
  for (uint32_t p : c.pids) {
    size_t k = proc_threads(p).size();
    n += k;
    procs += k > 0;
    if (c.children)
      for (uint32_t child : proc_descendants(p, 4096)) n += proc_threads(child).size(), ++procs;
  }
  const uint32_t p = c.pids.front();
  if (!procs) return Error{"no process with PID " + std::to_string(p)};
  if (n < 2 && procs == 1 && !c.children)
    return Error{"PID " + std::to_string(p) + " (" + proc_comm(p) +
                 ") has a single thread; threadpool needs a multi-threaded process or several "
                 "processes (-p PID,PID or -p PID --children)"};
  return n;
}

static std::string banner(const Pool& pool, const Config& c) {
  const auto& pids = pool.pids();
  const uint32_t first = pids.empty() ? c.pids.front() : pids.front();
  const std::string who = "PID " + std::to_string(first) + " (" + proc_comm(first) + ")";
  const std::string where = cgroup_banner(c.cgroup);
  if (pids.size() <= 1) return "Tracing thread pool of " + who + where + banner_until(c.schedule);
  return "Tracing a pool of " + std::to_string(pids.size()) + " processes (" + who +
         (c.children ? " and its children" : " and others") + ")" + where + banner_until(c.schedule);
}

Status run(const Config& c) {
  size_t nthreads = 0;
  if (!c.ebpf) {
    auto n = pool_threads(c);
    if (!n) return Error{n.error()};
    nthreads = *n;
  }
  auto plan = bpf_plan(c, nthreads);
  if (!plan) return Error{plan.error()};
  // Wait sites: each futex wait key's user stack, unwound once from the targets' DWARF
  // tables (bpf_sources/unwind.h, tail-called from sys_enter). Without them (a
  // cgroup target: no process list; a load that fails) the waits are judged without
  // sites.
  UnwindMaps uw;
  const bool want_sites = !c.cgroup;
  auto loaded = load_unwinding_tool(ToolPlan{"threadpool", *plan, c.ebpf}, want_sites ? &uw : nullptr,
                                    UnwinderPlan{c.pids, {}, "uw_threadpool_tail", BPF_PROG_TYPE_RAW_TRACEPOINT, ""});
  bool sites = want_sites && loaded;
  if (!loaded && want_sites) {
    std::cerr << "threadpool: wait sites unavailable (" << loaded.error() << "); waits judged without them\n";
    plan = bpf_plan(c, nthreads);
    if (!plan) return Error{plan.error()};
    loaded = load_tool(ToolPlan{"threadpool", *plan, c.ebpf});
  }
  if (!loaded) return Error{loaded.error()};
  if (!*loaded) return std::nullopt;  // --ebpf
  BpfSession& session = **loaded;
  Pool pool(c, session);
  if (auto st = pool.fill()) return st;  // before attaching: every event is filtered by it
  for (const char* tp : kTracepoints)
    if (auto st = session.attach_raw_tracepoint(tp, std::string("raw_tracepoint__") + tp)) return st;
  attach_phase_done();
  Tracer tracer(c, session, pool, map_sizes(c, nthreads), sites);
  if (auto st = session.open_perf_buffer("reqs", on_event, on_lost, &tracer.requests(), 256)) return st;
  if (auto st = tracer.init()) return st;
  announce_attached(std::cout, "threadpool", c.json, banner(pool, c), tracer.start_fields(), empty_quality());

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
