// profile's run(): the suite's skeleton (load_tool -> attach -> announce_attached ->
// run_tool_loop) around reading the in-kernel sample counts into a Report.
#include <bcc/BPF.h>
#include <linux/perf_event.h>
#include <linux/types.h>

#include <time.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <set>

#include "common/announce.h"
#include "common/bpf_counters.h"
#include "common/bpf_maps.h"
#include "common/bpf_session.h"
#include "common/flamegraph.h"
#include "common/pprof.h"
#include "common/jvm_attach.h"
#include "common/proc.h"
#include "common/stack_reader.h"
#include "common/stacks.h"
#include "common/symbolize.h"
#include "common/target.h"
#include "common/tool.h"
#include "common/unwind_maps.h"
#include "tools/profile/profile.h"

extern "C" {
#include "profile_shared.h"
}
static_assert(sizeof(profile_key) == 40, "profile_key layout shared with BPF");

namespace profile {
using namespace bpfdiag;

namespace {

const std::vector<CounterSlot> kCounters = {{PROFILE_CNT_COUNTS_FULL, "lost_samples"},
                                            {PROFILE_CNT_COUNTS_FULL, "map_full"},
                                            {PROFILE_CNT_USER_MISSING, "user_stack_missing"},
                                            {PROFILE_CNT_USER_MISSING, "lost_stacks"},
                                            {PROFILE_CNT_KERNEL_MISSING, "kernel_stack_missing"},
                                            {PROFILE_CNT_KERNEL_MISSING, "lost_stacks"},
                                            {PROFILE_CNT_STORAGE_FULL, "stack_storage_full"},
                                            {PROFILE_CNT_IDLE, "idle_samples"},
                                            {PROFILE_CNT_STACK_OVERFLOW, "overflow_stacks"},
                                            {PROFILE_CNT_SEEN_FULL, "seen_full"}};

// Processes that appear in the counts are remembered (their mappings read) while they
// are alive, so a process that exits before the report still gets its names.
void remember_sampled(BpfSession& bpf, Symbolizer& sym) {
  std::set<uint32_t> tgids;
  auto counts = bpf.get_hash_table<profile_key, uint64_t>("counts");
  // keys only, and a report asked for (Ctrl-C, runbook's window boundary) comes first:
  // at 999 Hz the table holds thousands of stacks (a CI run: a boundary seen 0.36 s late)
  for_each_key<profile_key>(counts, [&](const profile_key& k) { if (k.tgid) tgids.insert(k.tgid); },
                            [] { return !report_pending(); });
  for (auto t : tgids) {
    if (report_pending()) return;
    if (!sym.remembered(t)) sym.remember(t);
  }
}

// The counts drained from BPF into rep.entries, their stacks read and symbolized.
void read_entries(BpfSession& session, const Config& c, const UnwoundStacks& unwound, Symbolizer& sym,
                  Report& rep) {
  StackReader stacks = StackReader::from_session(session);
  auto counts = session.get_hash_table<profile_key, uint64_t>("counts");
  StackParts parts = c.parts();
  for (auto& [k, v] : drain_hash<profile_key, uint64_t>(counts)) {
    Entry e;
    e.pid = k.tgid;
    e.tid = k.tid;
    e.comm = std::string(k.comm, strnlen(k.comm, sizeof k.comm));
    e.samples = v;
    e.stack = stacks.resolve(sym, k.tgid, k.user_stack_id, k.kernel_stack_id, parts, &rep.dq);
    if (c.unwind_dwarf && parts.user && k.user_hash) {  // 0: no user context (kernel thread)
      bool found = false;
      e.stack.user = symbolize_unwound(unwound, k.user_hash, sym, k.tgid, &found);
      e.stack.user_missing = !found;  // UW_HASH_LOST (uw_stacks full, counted in lost_stacks)
    }
    rep.entries.push_back(std::move(e));
  }
}

// Bounded memory on long runs (issue 19): after an interval report the stacks and
// exited processes it printed go; those of samples counted since the drain stay.
void forget_reported(BpfSession& session, Symbolizer& sym) {
  std::set<int32_t> keep_stacks;
  std::set<uint32_t> keep_pids;
  for (auto& kv : session.get_hash_table<profile_key, uint64_t>("counts").get_table_offline()) {
    keep_stacks.insert(kv.first.user_stack_id);
    keep_stacks.insert(kv.first.kernel_stack_id);
    keep_pids.insert(kv.first.tgid);
  }
  clear_stacks(session, keep_stacks);
  sym.forget_exited_every(0, [&] { return keep_pids; });
}

}  // namespace

Status run(const Config& c) {
  if (c.jvm_perfmap && !c.ebpf) request_jvm_perfmaps("profile", c.pids);  // before the symbolizer reads the maps
  BpfPlan plan = bpf_plan(c);
  UnwindMaps uw;  // the unwinder is tail-called by the sample handler
  auto loaded = load_unwinding_tool(ToolPlan{"profile", plan, c.ebpf}, c.unwind_dwarf ? &uw : nullptr,
                                    {c.pids, c.tids, "uw_profile_tail", BPF_PROG_TYPE_PERF_EVENT, ""});
  if (!loaded) return Error{loaded.error()};
  if (!*loaded) return std::nullopt;  // --ebpf
  BpfSession& session = **loaded;
  Symbolizer sym;
  Announced announced(sym);  // system-wide: processes read as first sampled
  if (c.announce())
    if (auto st = announced.open(session)) return st;
  if (!c.pprof.empty()) sym.keep_origins();  // --pprof: frames with their modules
  for (auto p : c.pids) sym.remember(p);
  // System-wide, kernel names are needed by every report and Ctrl-C's budget bounds
  // the final one: /proc/kallsyms (~120k lines, 0.1-0.4 s of CPU) is read before the
  // probes attach (not between attach and start record: a peer arms on that record).
  // With -p/-t on demand, as before: a short-lived target must not wait for it.
  if (c.pids.empty() && c.tids.empty()) (void)sym.kernel_symbols_available();
  if (c.announce())
  {
    for (const char* tp : {"sched_process_exec", "sched_process_exit"})
      if (auto st = session.attach_raw_tracepoint(tp, std::string("raw_tracepoint__") + tp)) return st;
    if (auto st = session.attach_tracepoint("syscalls:sys_enter_mmap", "tracepoint__syscalls__sys_enter_mmap"))
      return st;
  }
  if (auto st = session.attach_perf_event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, "do_perf_event", c.freq_hz))
    return Error{st->message + "; is perf_event_paranoid too strict, or are perf events disabled?"};
  attach_phase_done();
  DataQuality dq0 = DataQuality::with_keys(dq_keys());
  nlohmann::json fields = start_fields(c, static_cast<uint64_t>(online_cpus()));
  if (c.unwind_dwarf) fields["unwind_tables"] = uw.start_fields();  // what the tables cost
  announce_attached(std::cout, "profile", c.json, banner(c), fields, dq0);
  uint64_t window_start = monotonic_ns(), last_remember = 0, lost_reported = 0;
  Symbolizer::Stats sym_mark = sym.stats();  // the symbolizer's counts at the last report
  CounterDeltas deltas, uw_deltas;
  RunFlameGraph flame(c.svg, {"On-CPU Flame Graph", "profile: samples at " + traced_text(c), "samples",
                              FlamePalette::OnCpu});  // --svg
  RunPprof pprof = pprof_output(c);                      // --pprof: the same window
  Status failure;
  ToolMetrics metrics("profile");  // --prometheus/--listen
  if (metrics.enabled()) metrics.publish_start(dq0);
  RunHooks hooks;
  hooks.poll = [&](int timeout_ms) {
    uint64_t now = monotonic_ns();
    if (c.pids.empty() && now - last_remember >= 1000000000ULL) {  // -p targets are remembered already
      remember_sampled(session, sym);
      last_remember = now;
    }
    int ms = std::min(timeout_ms, 200);
    if (c.announce()) {
      announced.poll(session, ms);  // wakes for each announcement; a stop signal ends it early
      return;
    }
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, nullptr);  // a stop signal ends it early (EINTR)
  };
  hooks.report = [&](bool final) {
    if (final) session.disable_perf_events();  // the last report is a consistent snapshot
    uint64_t now = monotonic_ns();
    if (c.announce()) announced.poll(session, 0);  // announcements still queued
    if (c.pids.empty()) remember_sampled(session, sym);
    Report rep;
    rep.freq_hz = c.freq_hz;
    rep.window = window_ending_now(now - window_start, final);
    window_start = now;
    rep.dq = DataQuality::with_keys(dq_keys());
    if (auto st = add_bpf_counters(session, kCounters, rep.dq, &deltas))
      std::cerr << "profile: " << st->message << "\n";
    UnwoundStacks unwound;
    if (c.unwind_dwarf) {
      if (auto st = uw.add_dq(session, rep.dq, &uw_deltas)) std::cerr << "profile: " << st->message << "\n";
      unwound = read_unwound_stacks(session);
    }
    rep.dq.lost_events = announced.lost() - lost_reported;
    lost_reported = announced.lost();
    auto before = sym_mark;  // since the last report: processes gone before read meanwhile too
    read_entries(session, c, unwound, sym, rep);
    merge_identical(rep.entries);
    add_symbolizer_dq(rep.dq, before, sym.stats());
    sym_mark = sym.stats();
    render(std::cout, std::cerr, c, rep);
    if (flame.enabled()) add_folded(flame.stacks(), c, rep.entries);
    if (pprof.enabled()) add_pprof(pprof.profile(), c, rep.entries, sym);
    if (metrics.enabled()) {
      add_report_metrics(metrics.set(), rep);
      metrics.add_data_quality(rep.dq);
      metrics.publish(final);
    }
    if (!final) {
      forget_reported(session, sym);
      return;
    }
    for (auto& w : warnings(c, rep.dq)) std::cerr << w << "\n";
    failure = flame.write();
    if (Status st = pprof.write(); st && !failure) failure = st;
  };
  TargetWatch watch(c.pids);  // -p: stop with "PID N exited" when every target is gone
  if (auto st = run_tool_loop(c.schedule, hooks, watch)) return st;
  return failure;
}

}  // namespace profile
