// naptime's run(): the suite's skeleton (load_tool -> attach -> announce_attached ->
// run_tool_loop) around the perf buffer of finished sleeps.
#include <bcc/BPF.h>

#include <cstring>
#include <iostream>

#include "common/bpf_counters.h"
#include "common/bpf_maps.h"
#include "common/bpf_session.h"
#include "common/target.h"
#include "common/tool.h"
#include "tools/naptime/naptime.h"

namespace naptime {
using namespace bpfdiag;

namespace {

const std::vector<CounterSlot> kCounters = {{NAPTIME_CNT_UNMATCHED_END, "unmatched_end"},
                                            {NAPTIME_CNT_MAP_FULL, "map_full"},
                                            {NAPTIME_CNT_RESTARTED, "restarted_after_signal"}};

const std::vector<std::string> kTracepoints = {
    "syscalls:sys_enter_nanosleep",       "syscalls:sys_exit_nanosleep",
    "syscalls:sys_enter_clock_nanosleep", "syscalls:sys_exit_clock_nanosleep",
    "syscalls:sys_enter_restart_syscall", "syscalls:sys_exit_restart_syscall",
    "signal:signal_deliver"};

// Counted in user space, cumulative since the start.
struct UserCounts {
  uint64_t lost = 0;
  uint64_t short_records = 0;
  uint64_t unreadable = 0;  // requests whose timespec could not be read
};

struct Tracer {
  const Config& c;
  ClockOffsets off;
  Summary sum;        // this report's window
  UserCounts counts;
  DataQuality so_far;  // carried by sleep records: counted since the start
  ToolMetrics* metrics = nullptr;  // --prometheus/--listen
};

void on_event(void* cookie, void* data, int size) {
  auto* t = static_cast<Tracer*>(cookie);
  if (size < static_cast<int>(sizeof(naptime_event))) {
    t->counts.short_records++;
    return;
  }
  naptime_event ev;
  std::memcpy(&ev, data, sizeof ev);
  if (ev.start.flags & NAPTIME_F_BAD_REQUEST) t->counts.unreadable++;
  Sleep s = decode(ev, t->off);
  t->sum.add(s);
  if (t->metrics) add_sleep_metrics(t->metrics->set(), s);
  if (!t->c.summary) render_sleep(std::cout, t->c, s, t->so_far);
}

void on_lost(void* cookie, uint64_t lost) { static_cast<Tracer*>(cookie)->counts.lost += lost; }

Status write_config(BpfSession& session, const Config& c, const ClockOffsets& off) {
  naptime_config cfg = {};
  cfg.realtime_off_ns = off.realtime_ns;
  cfg.tai_off_ns = off.tai_ns;
  std::strncpy(cfg.comm, c.comm.c_str(), sizeof cfg.comm - 1);
  auto table = session.get_array_table<naptime_config>("config");
  auto st = table.update_value(0, cfg);
  if (!st.ok()) return Error{"cannot write the config map: " + st.msg()};
  return std::nullopt;
}

// The user-space counters into `dq` (deltas against `prev` when given).
void add_user_counts(DataQuality& dq, const UserCounts& now, UserCounts* prev) {
  UserCounts base = prev ? *prev : UserCounts{};
  dq.add("lost_events", now.lost - base.lost);
  dq.add("short_records", now.short_records - base.short_records);
  dq.add("unreadable_requests", now.unreadable - base.unreadable);
  if (prev) *prev = now;
}

// Sleeps in progress (those the -m filter would keep): just started, or interrupted
// and not decided yet (e.g. a thread still stopped by SIGSTOP).
uint64_t in_progress(BpfSession& session, const Config& c, const ClockOffsets& off) {
  uint64_t n = 0;
  auto wanted = [&](const naptime_start& st) {
    __s64 req = 0;
    return !naptime_requested_ns(&st, off.realtime_ns, off.tai_ns, &req) || static_cast<uint64_t>(req) >= c.min_ns;
  };
  for (auto& kv : session.get_hash_table<uint32_t, naptime_start>("start").get_table_offline())
    n += wanted(kv.second);
  for (auto& kv : session.get_hash_table<uint32_t, naptime_event>("pending").get_table_offline())
    n += wanted(kv.second.start);
  return n;
}

}  // namespace

Status run(const Config& c) {
  auto plan = bpf_plan(c);
  if (!plan) return Error{plan.error()};
  plan.value().tracepoints = kTracepoints;
  auto loaded = load_tool(ToolPlan{"naptime", *plan, c.ebpf});
  if (!loaded) return Error{loaded.error()};
  if (!*loaded) return std::nullopt;  // --ebpf
  BpfSession& session = **loaded;
  Tracer t{c, measure_clock_offsets(), {}, {}, DataQuality::with_keys(dq_keys()), nullptr};
  if (auto st = write_config(session, c, t.off)) return st;
  if (auto st = session.open_perf_buffer("events", on_event, on_lost, &t, 64)) return st;
  const std::vector<std::pair<std::string, std::string>> probes = {
      {kTracepoints[0], "tracepoint__syscalls__sys_enter_nanosleep"},
      {kTracepoints[1], "tracepoint__syscalls__sys_exit_nanosleep"},
      {kTracepoints[2], "tracepoint__syscalls__sys_enter_clock_nanosleep"},
      {kTracepoints[3], "tracepoint__syscalls__sys_exit_clock_nanosleep"},
      {kTracepoints[4], "tracepoint__syscalls__sys_enter_restart_syscall"},
      {kTracepoints[5], "tracepoint__syscalls__sys_exit_restart_syscall"},
      {kTracepoints[6], "tracepoint__signal__signal_deliver"}};
  // resolvers of parked (interrupted) sleeps first, then exits before enters: a sleep
  // that starts before its exit probe exists cannot be matched
  if (auto st = session.attach_raw_tracepoint("sched_process_exit", "raw_tracepoint__sched_process_exit"))
    return st;  // one line: a verifier rejection, or the attach failure with its hint
  for (auto it = probes.rbegin(); it != probes.rend(); ++it)
    if (auto st = session.attach_tracepoint(it->first, it->second))
      return Error{st->message + "; are syscall tracepoints enabled (CONFIG_FTRACE_SYSCALLS)?"};
  attach_phase_done();
  announce_attached(std::cout, "naptime", c.json, "Tracing sleeps" + cgroup_banner(c.cgroup) + banner_until(c.schedule),
                    start_fields(c, probes.size() + 1), t.so_far);
  if (!c.json && !c.summary) render_header(std::cout);
  ToolMetrics metrics("naptime");
  if (metrics.enabled()) {
    t.metrics = &metrics;
    metrics.publish_start(DataQuality::with_keys(dq_keys()));
  }

  uint64_t window_start = monotonic_ns(), last_offsets = window_start;
  CounterDeltas deltas;
  UserCounts reported;
  auto refresh_so_far = [&] {
    DataQuality dq = DataQuality::with_keys(dq_keys());
    add_bpf_counters(session, kCounters, dq);  // cumulative: no deltas
    add_user_counts(dq, t.counts, nullptr);
    t.so_far = dq;
  };
  RunHooks hooks;
  hooks.poll = [&](int timeout_ms) {
    if (c.json && !c.summary) refresh_so_far();
    session.poll_perf_buffer("events", timeout_ms);
    std::cout.flush();
    uint64_t now = monotonic_ns();
    if (now - last_offsets > 1000000000ULL) {  // follow clock adjustments (NTP, settime)
      t.off = measure_clock_offsets();
      write_config(session, c, t.off);
      last_offsets = now;
    }
  };
  hooks.report = [&](bool final) {
    if (c.json && !c.summary) refresh_so_far();
    while (session.poll_perf_buffer("events", 0) > 0) {
    }
    uint64_t now = monotonic_ns();
    DataQuality dq = DataQuality::with_keys(dq_keys());
    if (auto st = add_bpf_counters(session, kCounters, dq, &deltas))
      std::cerr << "naptime: " << st->message << "\n";
    add_user_counts(dq, t.counts, &reported);
    dq.unmatched_begin = in_progress(session, c, t.off);
    if (!c.json && !c.summary) std::cout << "\n";
    render_report(std::cout, c, t.sum, dq, window_ending_now(now - window_start, final));
    if (metrics.enabled()) {
      metrics.add_data_quality(dq);
      metrics.publish(final);
    }
    window_start = now;
    t.sum = Summary{};
  };
  TargetWatch targets(c.pids);  // -p: stop when every target has exited
  return run_tool_loop(c.schedule, hooks, targets);
}

}  // namespace naptime
