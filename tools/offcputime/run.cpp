// offcputime's run(): the suite's skeleton (load_tool -> attach -> announce_attached
// -> run_tool_loop) around reading the in-kernel aggregation into a Report.
#include <algorithm>
#include <bcc/BPF.h>
#include <linux/types.h>

#include <cstring>
#include <iostream>
#include <set>

#include "common/announce.h"
#include "common/bpf_counters.h"
#include "common/bpf_maps.h"
#include "common/bpf_session.h"
#include "common/flamegraph.h"
#include "common/jvm_attach.h"
#include "common/jvm_state.h"
#include "common/pprof.h"
#include "common/runloop.h"
#include "common/stack_reader.h"
#include "common/symbolize.h"
#include "common/target.h"
#include "common/timing.h"
#include "common/tool.h"
#include "common/proc.h"
#include "common/unwind_maps.h"
#include "tools/offcputime/offcputime.h"

extern "C" {
#include "offcputime_shared.h"
}
static_assert(sizeof(offcpu_key) == 56, "offcpu_key layout shared with BPF");
static_assert(sizeof(offcpu_val) == 24, "offcpu_val layout shared with BPF");
static_assert(sizeof(offcpu_start) == 64, "offcpu_start layout shared with BPF");
static_assert(sizeof(offcpu_waker) == 48, "offcpu_waker layout shared with BPF");
static_assert(sizeof(offcpu_wkey) == 104, "offcpu_wkey layout shared with BPF");

namespace offcputime {
using namespace bpfdiag;

namespace {

const std::vector<CounterSlot> kCounters = {{OFFCPU_CNT_STACK_LOST, "lost_stacks"},
                                            {OFFCPU_CNT_START_FULL, "map_full"},
                                            {OFFCPU_CNT_COUNTS_FULL, "map_full"},
                                            {OFFCPU_CNT_UNMATCHED_IN, "unmatched_end"},
                                            {OFFCPU_CNT_SEEN_FULL, "seen_full"},
                                            {OFFCPU_CNT_STACK_OVERFLOW, "overflow_stacks"},
                                            {OFFCPU_CNT_PERIOD_DROPPED, "dropped_periods"},
                                            {OFFCPU_CNT_PERIOD_RECOVERED, "recovered_periods"},
                                            {OFFCPU_CNT_DECL_STALE, "stale_begins"},
                                            {OFFCPU_CNT_WAKER_FULL, "map_full"},
                                            {OFFCPU_CNT_WAKER_UNSEEN, "waker_unseen"}};

const std::vector<std::pair<std::string, std::string>> kProbes = {
    {"sched_process_exec", "raw_tracepoint__sched_process_exec"},
    {"sched_process_exit", "raw_tracepoint__sched_process_exit"},
    {"sched_switch", "raw_tracepoint__sched_switch"}};
// --waker: attached before sched_switch, so every period it sees end has its wakeup seen
const std::pair<std::string, std::string> kWakingProbe = {"sched_waking", "raw_tracepoint__sched_waking"};
// -p/-t: a freed task's verdict leaves the BPF side's cache (task_verdict) before its
// address can be reused; attached before sched_switch fills that cache
const std::pair<std::string, std::string> kFreeProbe = {"sched_process_free", "raw_tracepoint__sched_process_free"};

// The counts map's key: offcpu_key, or with --waker offcpu_wkey (the key and its waker).
const offcpu_key& key_part(const offcpu_key& k) { return k; }
const offcpu_key& key_part(const offcpu_wkey& k) { return k.k; }
const offcpu_waker* waker_part(const offcpu_key&) { return nullptr; }
const offcpu_waker* waker_part(const offcpu_wkey& k) { return &k.w; }

struct Live {
  Symbolizer sym;
  Announced announced{sym};  // processes the BPF side announces (common/announce.h)
  DeclaredWaits declared;  // the software's own wait probes (common/declared_waits)
  JvmWaits jvm;            // HotSpot JVMs: what their threads wait for (common/jvm_state)
  UnwindMaps* uw = nullptr;  // --unwind=dwarf
  bool waker = false;        // --waker: counts is keyed by offcpu_wkey
  bool filtered = false;     // -p/-t: sched_process_free keeps task_verdict right
};

// Between reports: new processes announced, tables refreshed after an exec, and (bounded
// memory on long runs) exited processes no counted stack refers to forgotten.
void poll_live(BpfSession& session, Live& live, int timeout_ms) {
  live.announced.poll(session, std::min(timeout_ms, 100));
  for (auto t : live.announced.take_refreshed())  // after exec: the new image's tables and mappings
    if (live.uw) (void)live.uw->refresh(session, t);
  live.jvm.refresh(session);  // Java threads and (system-wide) JVMs started since
  live.sym.forget_exited_every(10000000000ULL, [&] {
    std::set<uint32_t> tgids;  // cut short by a stop signal: then nothing is forgotten
    auto counts = session.get_hash_table<offcpu_key, offcpu_val>("counts");
    auto go_on = [] { return !report_pending(); };
    if (live.waker)  // the wakers' processes too: their frames are named in the same report
      for_each_key<offcpu_wkey>(
          counts, [&](const offcpu_wkey& k) { tgids.insert(k.k.tgid), tgids.insert(k.w.tgid); }, go_on);
    else
      for_each_key<offcpu_key>(counts, [&](const offcpu_key& k) { tgids.insert(k.tgid); }, go_on);
    return tgids;
  });
}

// --waker: one period's waker, its stacks read and symbolized.
Waker resolve_waker(const offcpu_waker& w, const StackReader& stacks, const UnwoundStacks& unwound,
                    const Config& c, Live& live, DataQuality* dq) {
  Waker out;
  StackParts parts = c.parts();
  out.stack.want_user = parts.user;
  out.stack.want_kernel = parts.kernel;
  switch (w.kind) {
    case OFFCPU_WAKER_TASK: out.kind = WakerKind::Task; break;  // or an interrupt: classify_waker
    case OFFCPU_WAKER_PREEMPTED: out.kind = WakerKind::Preempted; return out;
    default: return out;  // unseen: no stack
  }
  if (out.kind == WakerKind::Task) {
    out.pid = w.tgid;
    out.tid = w.tid;
    out.comm = std::string(w.comm, strnlen(w.comm, sizeof w.comm));
  }
  // the kernel part with -U too: it tells an interrupt (classify_waker), then is dropped;
  // the user part only for a task (an interrupted one's frames are not named, nor counted)
  out.stack = stacks.resolve(live.sym, w.tgid, -14, w.kernel_stack_id, StackParts{false, true}, dq);
  out.stack.want_user = parts.user;
  classify_waker(out);
  if (parts.user && out.kind == WakerKind::Task) {
    if (w.user_hash) {  // unwound from the tables of a traced process
      bool found = false;
      out.stack.user = symbolize_unwound(unwound, w.user_hash, live.sym, w.tgid, &found);
      out.stack.user_missing = !found;
    } else {
      Stack u = stacks.resolve(live.sym, w.tgid, w.user_stack_id, -1, StackParts{true, false}, dq);
      out.stack.user = std::move(u.user);
      out.stack.user_missing = u.user_missing;
    }
  }
  if (!parts.kernel) {
    out.stack.want_kernel = false;
    out.stack.kernel.clear();
    out.stack.kernel_missing = false;
  }
  return out;
}

// The counts drained from BPF into rep.entries, their stacks read and symbolized.
template <class Key>
void read_entries_as(BpfSession& session, const Config& c, Live& live, Report& rep) {
  StackReader stacks = StackReader::from_session(session);
  auto counts_table = session.get_hash_table<offcpu_key, offcpu_val>("counts");
  StackParts parts = c.parts();
  UnwoundStacks unwound;
  if (c.unwind_dwarf) unwound = read_unwound_stacks(session);
  auto drained = drain_hash<Key, offcpu_val>(counts_table);
  rep.entries.reserve(rep.entries.size() + drained.size());
  for (auto& [key, v] : drained) {
    const offcpu_key& k = key_part(key);
    Entry e;
    if (const offcpu_waker* w = waker_part(key)) e.waker = resolve_waker(*w, stacks, unwound, c, live, &rep.dq);
    e.pid = k.tgid;
    e.tid = k.tid;
    e.comm = std::string(k.comm, strnlen(k.comm, sizeof k.comm));
    e.total_ns = v.total_ns;
    e.count = v.count;
    e.max_ns = v.max_ns;
    e.stack = stacks.resolve(live.sym, k.tgid, k.user_stack_id, k.kernel_stack_id, parts, &rep.dq);
    if (JvmWaits::is_java_raw(k.declared)) e.declared = live.jvm.declared_id(k.tgid, k.declared);
    else if (k.declared) e.declared = live.declared.id_of(k.tgid, k.declared, session);
    e.runnable = k.runnable != 0;
    if (c.unwind_dwarf && parts.user && k.user_hash) {  // 0: no user context (kernel thread)
      bool found = false;
      e.stack.user = symbolize_unwound(unwound, k.user_hash, live.sym, k.tgid, &found);
      e.stack.user_missing = !found;  // UW_HASH_LOST (uw_stacks full, counted in lost_stacks)
    }
    rep.entries.push_back(std::move(e));
  }
}

void read_entries(BpfSession& session, const Config& c, Live& live, Report& rep) {
  if (c.waker)
    read_entries_as<offcpu_wkey>(session, c, live, rep);
  else
    read_entries_as<offcpu_key>(session, c, live, rep);
}

// The scheduler's tracepoints, then the declared waits' probes (none in -k mode).
Status attach_probes(BpfSession& session, Live& live, uint64_t& probes) {
  if (live.filtered) {
    if (auto st = session.attach_raw_tracepoint(kFreeProbe.first, kFreeProbe.second)) return st;
    ++probes;
  }
  if (live.waker) {
    if (auto st = session.attach_raw_tracepoint(kWakingProbe.first, kWakingProbe.second)) return st;
    ++probes;
  }
  // an executable mapping announces the process again (bpf_sources/announce.h)
  if (auto st = session.attach_tracepoint("syscalls:sys_enter_mmap", "tracepoint__syscalls__sys_enter_mmap"))
    return st;
  ++probes;
  for (auto& [tp, fn] : kProbes) {
    if (auto st = session.attach_raw_tracepoint(tp, fn))
      return st;  // one line: a verifier rejection, or the attach failure with its hint
    ++probes;
  }
  return live.declared.attach(session, false, probes);
}

}  // namespace

Status run(const Config& user_config) {
  Config c = user_config;
  if (c.jvm_perfmap && !c.ebpf) request_jvm_perfmaps("offcputime", c.pids);  // before the symbolizer reads the maps
  if (!c.stack_storage_size) c.stack_storage_size = auto_stack_storage(count_traced_threads(c));
  auto plan = bpf_plan(c);
  if (!plan) return Error{plan.error()};
  Live live;  // found before loading: a short-lived target is scanned as early as possible
  if (!c.ebpf && !c.kernel_threads_only) {
    live.declared.find(c.pids, c.tids);
    std::vector<uint32_t> procs = c.pids;  // empty: every process
    for (uint32_t tid : c.tids)
      if (uint32_t p = proc_tgid(tid)) procs.push_back(p);
    live.jvm.find(procs, false);
    if (!live.declared.empty()) plan.value().flag("DECLARED_WAITS");  // else decl_now stays empty
    plan.value().integer("DECL_BEGINS", live.declared.begin_slots());  // only the begins attached
  }
  UnwindMaps uw;
  auto loaded = load_unwinding_tool(ToolPlan{"offcputime", *plan, c.ebpf}, c.unwind_dwarf ? &uw : nullptr,
                                    {c.pids, c.tids, "uw_offcpu_tail", BPF_PROG_TYPE_RAW_TRACEPOINT, ""});
  if (!loaded) return Error{loaded.error()};
  if (!*loaded) return std::nullopt;  // --ebpf
  BpfSession& session = **loaded;
  if (c.unwind_dwarf) live.uw = &uw;
  live.waker = c.waker;
  live.filtered = !c.pids.empty() || !c.tids.empty();
  if (auto st = live.announced.open(session)) return st;
  if (!c.pprof.empty()) live.sym.keep_origins();  // --pprof: frames with their modules
  for (auto p : c.pids) live.sym.remember(p);
  // System-wide, kernel names are needed by every report and Ctrl-C's budget bounds
  // the final one: /proc/kallsyms (~120k lines, 0.1-0.4 s of CPU) is read before the
  // probes attach (not between attach and start record: a peer arms on that record).
  // With -p/-t on demand, as before: a short-lived target must not wait for it.
  if (c.pids.empty() && c.tids.empty()) (void)live.sym.kernel_symbols_available();
  if (auto st = live.jvm.install(session)) return st;  // before the first switch is seen
  uint64_t probes = 0;
  if (auto st = attach_probes(session, live, probes)) return st;
  attach_phase_done();
  DataQuality dq0 = DataQuality::with_keys(dq_keys());
  nlohmann::json fields = start_fields(c, probes);
  if (!live.declared.empty()) fields["declared_waits"] = live.declared.start_fields();
  if (!live.jvm.empty()) fields["jvms"] = live.jvm.start_fields();
  if (c.unwind_dwarf) fields["unwind_tables"] = uw.start_fields();  // what the tables cost
  announce_attached(std::cout, "offcputime", c.json, banner(c), fields, dq0);
  uint64_t window_start = monotonic_ns();
  CounterDeltas deltas, uw_deltas;
  uint64_t lost_reported = 0;
  Symbolizer::Stats sym_mark = live.sym.stats();  // the symbolizer's counts at the last report
  // --svg: the stacks of every report (ns; shown in us)
  RunFlameGraph flame(c.svg, {"Off-CPU Time Flame Graph", "offcputime: " + traced_text(c), "us", FlamePalette::OffCpu},
                      1000);
  RunPprof pprof = pprof_output(c);  // --pprof: the same window
  Status svg_failed;
  ToolMetrics metrics("offcputime");  // --prometheus/--listen
  if (metrics.enabled()) metrics.publish_start(dq0);
  RunHooks hooks;
  hooks.poll = [&](int timeout_ms) { poll_live(session, live, timeout_ms); };
  hooks.report = [&](bool final) {
    if (final) {  // stop tracing first: the last report is a consistent snapshot
      StderrNoiseFilter quiet;
      for (auto& [tp, fn] : kProbes) session.detach_raw_tracepoint(tp);
      if (c.waker) session.detach_raw_tracepoint(kWakingProbe.first);
      session.detach_raw_tracepoint(kFreeProbe.first);
      timing_mark("final: detach");
    }
    uint64_t now = monotonic_ns();
    live.announced.poll(session, 0);  // announcements still queued
    if (final) timing_mark("final: announcements");
    Report rep;
    rep.window = window_ending_now(now - window_start, final);
    window_start = now;
    rep.dq = DataQuality::with_keys(dq_keys());
    if (auto st = add_bpf_counters(session, kCounters, rep.dq, &deltas))
      std::cerr << "offcputime: " << st->message << "\n";
    if (c.unwind_dwarf) {
      if (auto st = uw.add_dq(session, rep.dq, &uw_deltas))
        std::cerr << "offcputime: " << st->message << "\n";
    }
    rep.dq.lost_events = live.announced.lost() - lost_reported;
    lost_reported = live.announced.lost();
    // threads off-CPU right now: their period ends in a later window (or never)
    // (entries stay while their thread lives: those closed are threads on a CPU)
    auto starts = session.get_hash_table<uint32_t, offcpu_start>("start").get_table_offline();
    rep.dq.unmatched_begin = std::count_if(starts.begin(), starts.end(),
                                           [](const auto& e) { return e.second.skip != OFFCPU_START_CLOSED; });
    auto before = sym_mark;  // since the last report: announcements failed meanwhile too
    if (final) timing_mark("final: counters, start table");
    read_entries(session, c, live, rep);
    if (final) timing_mark("final: read + symbolize");
    merge_identical(rep.entries);
    classify_waits(rep.entries, [&](uint64_t id) {
      const DeclaredName* d = live.jvm.declared_name(id);
      return d ? d : live.declared.name(id);
    });
    add_symbolizer_dq(rep.dq, before, live.sym.stats());
    sym_mark = live.sym.stats();
    render(std::cout, std::cerr, c, rep);
    if (final) timing_mark("final: render");
    if (flame.enabled()) add_folded(flame.stacks(), c, rep.entries);
    if (pprof.enabled()) add_pprof(pprof.profile(), rep.entries, live.sym, c.waker);
    if (metrics.enabled()) {
      add_report_metrics(metrics.set(), rep.entries);
      metrics.add_data_quality(rep.dq);
      metrics.publish(final);
    }
    if (!final) return;
    for (auto& w : warnings(c, rep.dq)) std::cerr << w << "\n";
    svg_failed = flame.write();
    if (Status st = pprof.write(); st && !svg_failed) svg_failed = st;
  };
  TargetWatch watch(c.pids);  // -p: stop with "PID N exited" when every target is gone
  if (auto st = run_tool_loop(c.schedule, hooks, watch)) return st;
  return svg_failed;
}

}  // namespace offcputime
