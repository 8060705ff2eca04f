// pmheld's runtime: find the targets' pthread functions, load and attach, collect
// the holds from the BPF maps, report.
#include <bcc/BPF.h>
#include <linux/types.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "common/bpf_counters.h"
#include "common/bpf_maps.h"
#include "common/bpf_session.h"
#include "common/flamegraph.h"
#include "common/pprof.h"
#include "common/proc.h"
#include "common/pthread_probes.h"
#include "common/stack_reader.h"
#include "common/stacks.h"
#include "common/symbolize.h"
#include "common/target.h"
#include "common/tool.h"
#include "common/unwind_maps.h"
#include "tools/pmheld/pmheld.h"

extern "C" {
#include "pmheld_shared.h"
}
// the layouts pmheld.bpf.c writes: held_key 16, held 32, stat_key 24, stat 24, hist_key 16
static_assert(sizeof(pmheld_held_key) == 16 && sizeof(pmheld_held) == 32 && sizeof(pmheld_stat_key) == 24 &&
                  sizeof(pmheld_stat) == 24 && sizeof(pmheld_hist_key) == 16,
              "pmheld map layouts shared with BPF");
static_assert(sizeof(pmheld_contv) == 24 && sizeof(pmheld_word) == 32 && sizeof(pmheld_release) == 48,
              "pmheld --contended map layouts shared with BPF");

namespace pmheld {
using namespace bpfdiag;

// --- tracing ----------------------------------------------------------------------------

namespace {

std::string pid_list_text(const std::vector<uint32_t>& pids) {
  std::string s;
  for (auto p : pids) s += (s.empty() ? "" : ", ") + std::to_string(p) + " (" + proc_comm(p) + ")";
  return s;
}

// BPF counters -> data-quality keys.
const std::vector<CounterSlot> kCounters = {{PMHELD_C_UNMATCHED_END, "unmatched_end"},
                                            {PMHELD_C_LOST_STACKS, "lost_stacks"},
                                            {PMHELD_C_MAP_FULL, "map_full"},
                                            {PMHELD_C_REACQUIRED, "reacquired_without_unlock"},
                                            {PMHELD_C_COND_WAITS, "cond_waits"},
                                            {PMHELD_C_FAILED_LOCKS, "failed_locks"},
                                            {PMHELD_C_OVERFLOW_STACKS, "overflow_stacks"}};
// --contended: what the futex tracing saw but did not time as a mutex hold
const std::vector<CounterSlot> kContendedCounters = {{PMHELD_C_UNMATCHED_END, "unmatched_end"},
                                                     {PMHELD_C_LOST_STACKS, "lost_stacks"},
                                                     {PMHELD_C_MAP_FULL, "map_full"},
                                                     {PMHELD_C_OVERFLOW_STACKS, "overflow_stacks"},
                                                     {PMHELD_C_OTHER_WAITS, "other_futex_waits"},
                                                     {PMHELD_C_OTHER_WAKES, "other_futex_wakes"},
                                                     {PMHELD_C_UNCONTENDED_WAKES, "uncontended_wakes"},
                                                     {PMHELD_C_UNTIMED, "untimed_holds"},
                                                     {PMHELD_C_PI_OPS, "pi_futex_ops"}};

class Collector {
 public:
  Collector(BpfSession& s, const Config& c, UnwindMaps* uw) : s_(s), c_(c), uw_(uw) {
    if (!c.pprof.empty()) sym_.keep_origins();  // --pprof: frames with their modules
  }
  const Symbolizer& sym() const { return sym_; }

  void remember(uint32_t pid) {
    if (comms_.count(pid)) return;
    comms_[pid] = proc_comm(pid);
    sym_.remember(pid);
  }

  // The target exec'd: a new program, new name and symbols.
  void refresh(uint32_t pid) {
    comms_[pid] = proc_comm(pid);
    if (sym_.remembered(pid)) sym_.refresh(pid);
    else sym_.remember(pid);
    if (uw_) (void)uw_->refresh(s_, pid);  // the new image's unwind tables
  }

  // System-wide mode: snapshot the names and symbols of processes as soon as they hold
  // a lock, so short-lived ones are still named after they exit.
  void remember_new_pids() {
    auto stats = s_.get_hash_table<pmheld_stat_key, pmheld_stat>("stats");
    for (const auto& [k, v] : stats.get_table_offline()) remember(k.tgid);
  }

  // Bounded memory on long runs (issue 19), after a report: stacks, names and symbols
  // only the printed holds needed go, and so do the entries of holds and lock calls
  // whose process or thread exited before they ended (counted in unmatched_begin).
  void forget_reported() {
    std::set<int32_t> keep_stacks;
    std::set<uint32_t> keep_pids;
    for (const auto& [k, v] : s_.get_hash_table<pmheld_stat_key, pmheld_stat>("stats").get_table_offline()) {
      keep_stacks.insert(k.stack_id);
      keep_pids.insert(k.tgid);
    }
    if (!c_.contended) {  // --contended: LRU maps, and holds are recorded whole at the unlock
      auto held = s_.get_hash_table<pmheld_held_key, pmheld_held>("held");
      for (const auto& [k, v] : held.get_table_offline()) {
        if (pid_exists(k.tgid)) {
          keep_stacks.insert(v.stack_id);
          keep_pids.insert(k.tgid);
        } else {
          held.remove_value(k);
        }
      }
      auto pending = s_.get_hash_table<uint32_t, uint64_t>("pending");
      for (const auto& [tid, m] : pending.get_table_offline())
        if (!pid_exists(tid)) pending.remove_value(tid);
    }
    if (c_.stacks && !uw_) clear_stacks(s_, keep_stacks);
    sym_.forget_exited_every(0, [&] { return keep_pids; });
    for (auto it = comms_.begin(); it != comms_.end();)
      it = sym_.remembered(it->first) ? std::next(it) : comms_.erase(it);
    if (c_.verbose)
      std::cerr << "pmheld: tracking " << sym_.remembered_count() << " processes, "
                << sym_.symbol_tables_count() << " symbol tables\n";
  }

  // A failure to read the BPF counters (reported at the end of the run).
  const Status& failed() const { return failed_; }

  // Moves the interval's holds out of the maps into per-lock reports. Each stats/hist
  // entry is taken with an atomic lookup-and-delete, so a hold that ends while the
  // report is built lands in this report or the next, never in neither. Counters are
  // cumulative in BPF (never reset from here); a report shows their deltas.

  std::vector<LockHold> collect(DataQuality& dq) {
    auto stats = s_.get_hash_table<pmheld_stat_key, pmheld_stat>("stats");
    auto hist = s_.get_hash_table<pmheld_hist_key, uint64_t>("hist");
    auto st = drain_hash<pmheld_stat_key, pmheld_stat>(stats);
    auto hs = drain_hash<pmheld_hist_key, uint64_t>(hist);
    std::vector<std::pair<pmheld_held_key, pmheld_contv>> cv;
    if (c_.contended) {
      auto contv = s_.get_hash_table<pmheld_held_key, pmheld_contv>("contv");
      cv = drain_hash<pmheld_held_key, pmheld_contv>(contv);
    }
    // Acquisitions whose stack id failed in BPF count as lost stacks there; stacks
    // found gone from the maps while resolving are added below by the StackReader.
    if (auto e = add_bpf_counters(s_, c_.contended ? kContendedCounters : kCounters, dq, &deltas_)) failed_ = e;
    UnwoundStacks unwound;
    if (uw_) {
      if (auto e = uw_->add_dq(s_, dq, &uw_deltas_)) failed_ = e;
      unwound = read_unwound_stacks(s_);
    }
    if (!c_.contended)  // holds still in progress
      dq.unmatched_begin = s_.get_hash_table<pmheld_held_key, pmheld_held>("held").get_table_offline().size();

    std::map<std::pair<uint32_t, uint64_t>, LockHold> locks;
    for (const auto& [k, v] : cv) {
      auto& l = locks[{k.tgid, k.lock}];
      l.waiters_max = std::max<uint64_t>(l.waiters_max, v.waiters_max);
      l.waiters_sum += v.waiters_sum;
      l.exact += v.exact;
    }
    for (const auto& [k, v] : hs) {
      auto& l = locks[{k.tgid, k.lock}];
      l.hist.add_bucket(k.bucket, v);
    }
    std::optional<StackReader> stacks;
    if (c_.stacks && !uw_) stacks = StackReader::from_session(s_);
    for (const auto& [k, v] : st) {
      auto& l = locks[{k.tgid, k.lock}];
      l.count += v.count;
      l.total_ns += v.total_ns;
      l.max_ns = std::max<uint64_t>(l.max_ns, v.max_ns);
      if (!c_.stacks) continue;
      remember(k.tgid);
      StackHold sh;
      sh.count = v.count, sh.total_ns = v.total_ns, sh.max_ns = v.max_ns;
      if (uw_) {  // --unwind=dwarf: a lost hash (uw_stacks full) was counted by BPF
        bool found = false;
        sh.frames = symbolize_unwound(unwound, k.user_hash, sym_, k.tgid, &found);
        sh.missing = !found;
        l.stacks.push_back(std::move(sh));
        continue;
      }
      Stack stk = stacks->resolve(sym_, k.tgid, k.stack_id, -1, StackParts{true, false}, &dq);
      sh.missing = stk.user_missing;
      sh.frames = stk.user;
      l.stacks.push_back(std::move(sh));
    }
    std::vector<LockHold> out;
    for (auto& [key, l] : locks) {
      // --contended: waiter figures drained just after their hold's stats went into the
      // previous report (a hold ending between the two drains): no hold here to show
      if (!l.count && l.hist.count() == 0) continue;
      l.pid = key.first;
      l.addr = key.second;
      remember(l.pid);
      l.comm = comms_[l.pid];
      SymbolInfo si = sym_.lookup_data(l.pid, l.addr);
      if (si.found) l.symbol = format_data_symbol(si);
      l.hist.set_exact_sum(l.total_ns);
      l.hist.set_exact_max(l.max_ns);
      std::sort(l.stacks.begin(), l.stacks.end(),
                [](const StackHold& a, const StackHold& b) { return a.total_ns > b.total_ns; });
      out.push_back(std::move(l));
    }

    return out;
  }

 private:
  BpfSession& s_;
  const Config& c_;
  Symbolizer sym_;
  std::map<uint32_t, std::string> comms_;
  UnwindMaps* uw_;  // --unwind=dwarf, else null
  CounterDeltas deltas_, uw_deltas_;
  Status failed_;
};

// The BPF handlers of each pthread function (entry, return).
const std::vector<PthreadHandler> kHandlers = {
    {PthreadFn::MutexLock, "lock_entry", "lock_return"},
    {PthreadFn::MutexTrylock, "lock_entry", "lock_return"},
    {PthreadFn::MutexTimedlock, "lock_entry", "lock_return"},
    {PthreadFn::MutexClocklock, "lock_entry", "lock_return"},
    {PthreadFn::MutexUnlock, "unlock_entry", ""},
    {PthreadFn::CondWait, "cond_entry", "cond_return"},
    {PthreadFn::CondTimedwait, "cond_entry", "cond_return"},
    {PthreadFn::CondClockwait, "cond_entry", "cond_return"},
};

struct Target {
  PthreadLib lib;
  std::vector<ProbePoint> points;
};

// Every target's libc with its pthread functions resolved (none with --ebpf).
Result<std::vector<Target>> find_targets(const Config& c) {
  const std::vector<PthreadFn> fns = {PthreadFn::MutexLock,     PthreadFn::MutexTrylock,
                                      PthreadFn::MutexTimedlock, PthreadFn::MutexClocklock,
                                      PthreadFn::MutexUnlock,   PthreadFn::CondWait,
                                      PthreadFn::CondTimedwait, PthreadFn::CondClockwait};
  std::vector<Target> targets;
  if (c.contended) {  // no uprobes: nothing to resolve, but the targets must exist
    for (uint32_t pid : c.ebpf ? std::vector<uint32_t>{} : c.pids)
      if (!pid_exists(pid)) return Error{"no process with PID " + std::to_string(pid)};
    return targets;
  }
  std::vector<uint32_t> pids = c.pids.empty() ? std::vector<uint32_t>{0} : c.pids;
  // --cgroup without -p: the libc files the cgroup's processes map (a container's own
  // libc is not this machine's), each probed once for every process mapping it; the
  // BPF side keeps the cgroup's threads
  const bool by_cgroup = c.pids.empty() && c.cgroup;
  if (by_cgroup) pids = cgroup_pids(*c.cgroup, 4096);
  std::set<std::string> libs_seen;
  for (uint32_t pid : c.ebpf ? std::vector<uint32_t>{} : pids) {
    auto lib = find_pthread_lib(pid);
    if (by_cgroup) {
      if (!lib || !lib->file || !libs_seen.insert(lib->file->identity()).second) continue;  // kernel thread, gone, static
      lib.value().pid = -1;
    }
    if (!lib) return Error{lib.error()};
    auto pts = resolve_pthread_probes(*lib, fns, ProbeOptions{c.at_symbol});
    if (!pts) return Error{pts.error()};
    targets.push_back({*lib, *pts});
  }
  if (by_cgroup && targets.empty() && !c.ebpf)
    return Error{"no process in cgroup " + c.cgroup->path + " maps libc.so.6 (or it is empty); name one with -p"};
  return targets;
}

// The start record's fields: probes attached and the effective options.
nlohmann::json start_fields(const Config& c, uint64_t probes) {
  nlohmann::json start = {{"probes", probes},
                          {"options",
                           {{"stacks", c.stacks},
                            {"stack_storage_size", c.stack_storage_size},
                            {"entries", c.entries},
                            {"sort", c.sort},
                            {"probe_at_symbol", c.at_symbol},
                            {"contended", c.contended},
                            {"unwind", c.unwind_dwarf ? "dwarf" : "fp"}}}};
  if (!c.pids.empty()) start["pid"] = c.pids;
  if (c.cgroup) start["cgroup"] = cgroup_json(c.cgroup);
  if (c.contended) start["mode"] = "contended", start["sees"] = std::string(kContendedSees);
  return start;
}

}  // namespace

Status run(const Config& c) {
  // Locate and resolve everything before loading BPF, so bad targets fail fast (after
  // the root/BTF check, so an unprivileged user hears about root first).
  if (!c.ebpf)
    if (auto st = preflight({})) return st;
  auto targets = find_targets(c);
  if (!targets) return Error{targets.error()};

  BpfPlan plan = bpf_plan(c);
  UnwindMaps uw;  // the unwinder is tail-called by the lock and cond-wait return probes
  UnwinderPlan unwinder =
      c.contended ? UnwinderPlan{c.pids, {}, "uw_pmheld_wake_tail", BPF_PROG_TYPE_TRACEPOINT, "pmheld_wake_record"}
                  : UnwinderPlan{c.pids, {}, "uw_pmheld_tail", BPF_PROG_TYPE_KPROBE, ""};
  auto loaded = load_unwinding_tool(ToolPlan{"pmheld", plan, c.ebpf}, c.unwind_dwarf ? &uw : nullptr, unwinder);
  if (!loaded) return Error{loaded.error()};
  if (!*loaded) return std::nullopt;  // --ebpf
  auto& session = **loaded;
  Collector col(session, c, c.unwind_dwarf ? &uw : nullptr);
  uint64_t probes = 0;
  if (c.contended) {
    // pmheld's own futexes are never traced; the exit before the entry, so no wait is
    // seen beginning without its end
    uint32_t self = static_cast<uint32_t>(getpid());
    if (!session.get_array_table<uint32_t>("self_pid").update_value(0, self).ok())
      return Error{"cannot set pmheld's own PID in the BPF map self_pid"};
    for (const std::string dir : {"exit", "enter"})
      if (auto st = session.attach_tracepoint("syscalls:sys_" + dir + "_futex",
                                              "tracepoint__syscalls__sys_" + dir + "_futex"))
        return st;
    probes = 2;
    for (uint32_t pid : c.pids) col.remember(pid);  // named even if they exit before a report
  }
  for (const auto& t : *targets) {
    if (auto st = attach_pthread_probes(session, t.lib, t.points, kHandlers)) return st;
    for (const auto& p : t.points)
      for (const auto& h : kHandlers)
        if (h.fn == p.fn) probes += h.return_fn.empty() ? 1 : 2;
    if (t.lib.pid > 0) col.remember(static_cast<uint32_t>(t.lib.pid));
    if (c.verbose)
      for (const auto& p : t.points)
        std::cerr << "pmheld: probe " << t.lib.display << ":" << describe_probe_point(p) << "\n";
  }
  attach_phase_done();
  // the targets' identity for the exec/exit policy is read before the start record,
  // with their names and symbols: an exec after it is then always seen as one
  TargetWatch watch(c.pids, [&](uint32_t pid) { col.refresh(pid); });
  nlohmann::json start = start_fields(c, probes);
  if (c.unwind_dwarf) start["unwind_tables"] = uw.start_fields();  // what the tables cost
  announce_attached(std::cout, "pmheld", c.json,
                    std::string(c.contended ? "Tracing contended pthread mutex holds (futex hand-offs) in "
                                            : "Tracing pthread mutex hold times in ") +
                        (c.pids.empty() ? std::string("every process") : "PID " + pid_list_text(c.pids)) +
                        cgroup_banner(c.cgroup) + (c.contended ? std::string(": ") + kContendedSees : "") +
                        banner_until(c.schedule),
                    start, empty_dq(c.contended));

  uint64_t last = monotonic_ns();
  RunFlameGraph flame(c.svg, {"Mutex Hold Time Flame Graph",
                              "pmheld: time (us) each pthread mutex was held, by acquiring stack", "us",
                              FlamePalette::OffCpu});  // --svg: the holds of every report
  RunPprof pprof = pprof_output(c);  // --pprof: the same window
  Status svg_failed;
  ToolMetrics metrics("pmheld");  // --prometheus/--listen
  if (metrics.enabled()) metrics.publish_start(empty_dq(c.contended));
  RunHooks hooks;
  hooks.report = [&](bool final) {
    DataQuality dq = empty_dq(c.contended);
    auto locks = col.collect(dq);
    if (metrics.enabled()) {
      add_report_metrics(metrics.set(), locks);
      metrics.add_data_quality(dq);
      metrics.publish(final);
    }
    if (flame.enabled()) add_folded_holds(locks, flame.stacks());
    if (pprof.enabled()) add_pprof(pprof.profile(), locks, col.sym());
    if (final) svg_failed = flame.write();
    if (Status st = final ? pprof.write() : std::nullopt; st && !svg_failed) svg_failed = st;
    uint64_t now = monotonic_ns();
    if (!c.json && !c.csv) std::cout << "\n";
    render(std::cout, std::cerr, c, std::move(locks), dq, window_ending_now(now - last, final));
    last = now;
    if (!final) col.forget_reported();
  };
  uint64_t last_scan = 0;
  hooks.poll = [&](int timeout_ms) {
    if (c.pids.empty() && monotonic_ns() - last_scan > 200000000ULL) {
      col.remember_new_pids();
      last_scan = monotonic_ns();
    }
    struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
    nanosleep(&ts, nullptr);
  };
  // -p: stop when every target has exited; after an exec, new names and symbols
  if (auto st = run_tool_loop(c.schedule, hooks, watch)) return st;
  if (auto st = col.failed()) return st;
  return svg_failed;
}

}  // namespace pmheld
