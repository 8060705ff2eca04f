// lockstat's runtime: resolve lock filters, load and attach, poll, report.
#include <bcc/BPF.h>
#include <bcc/libbpf.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <set>
#include <tuple>

#include "common/bpf_counters.h"
#include "common/bpf_maps.h"
#include "common/bpf_session.h"
#include "common/cli.h"
#include "common/data_symbols.h"
#include "common/debuginfo_hint.h"
#include "common/flamegraph.h"
#include "common/proc.h"
#include "common/pthread_probes.h"
#include "common/stacks.h"
#include "common/stack_reader.h"
#include "common/symbolize.h"
#include "common/target.h"
#include "common/tool.h"
#include "common/unwind_maps.h"
#include "tools/lockstat/internal.h"
#include "tools/lockstat/resolver.h"

namespace lockstat {
using namespace bpfdiag;

namespace {

bool is_kernel_identity(const std::string& name) {
  return name == "mmap_lock" || name == "siglock" || name == "rq_lock";
}

// Turns -L symbol names into addresses where possible; identity names stay names.
Status resolve_lock_names(Config& c) {
  std::vector<std::string> keep;
  for (const auto& name : c.lock_names) {
    if (is_kernel_identity(name)) {
      keep.push_back(name);
      continue;
    }
    std::vector<uint64_t> found = c.user_only ? std::vector<uint64_t>{} : find_kernel_data_symbol(name);
    if (!c.kernel_only)
      for (uint32_t pid : c.pids)
        for (uint64_t a : find_user_data_symbol(pid, name)) found.push_back(a);
    if (found.empty()) {
      if (c.pids.empty())
        return Error{"lock symbol '" + name + "' is not a kernel data symbol; user-space lock symbols "
                     "need -p PID (or give the lock's address, e.g. -L 0x55d0c3a0b040)"};
      std::string who;
      for (uint32_t pid : c.pids) who += (who.empty() ? "" : ", ") + std::to_string(pid);
      return Error{"unknown lock symbol '" + name + "': no data symbol of that name in PID " + who +
                   (c.user_only ? "" : " or the kernel") + " (is the binary stripped? give the address instead)"};
    }
    for (uint64_t a : found) c.lock_addrs.push_back(a);
  }
  c.lock_names = keep;
  return std::nullopt;
}

uint64_t count_entries(int fd) {
  uint64_t n = 0;
  std::vector<uint8_t> key(64), next(64);
  void* cur = nullptr;
  while (bpf_get_next_key(fd, cur, next.data()) == 0 && n < (1u << 24)) {
    ++n;
    key = next;
    cur = key.data();
  }
  return n;
}

// The map is sized from the list (ADDR_FILTER_ENTRIES), so a failure here is a real
// error, never a silently shorter filter.
Status fill_addr_filter(BpfSession& bpf, const std::vector<uint64_t>& addrs) {
  auto t = bpf.get_hash_table<uint64_t, uint8_t>("addr_filter");
  for (uint64_t a : addrs) {
    auto st = t.update_value(a, 1);
    if (st.code() != 0)
      return Error{"cannot add lock " + hex_addr(a) + " to the BPF address filter: " + st.msg()};
  }
  return std::nullopt;
}

// Threads the maps must hold: the targets' threads, or every thread on the system.
uint64_t traced_threads(const Config& c) {
  uint64_t n = 0;
  if (c.pids.empty()) {
    FILE* f = std::fopen("/proc/loadavg", "re");  // "0.1 0.2 0.3 running/total last"
    unsigned long run = 0, total = 0;
    if (f) {
      if (std::fscanf(f, "%*s %*s %*s %lu/%lu", &run, &total) != 2) total = 0;
      std::fclose(f);
    }
    return total;
  }
  for (uint32_t pid : c.pids) {
    std::string dir = "/proc/" + std::to_string(pid) + "/task";
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* e = readdir(d))
        if (e->d_name[0] != '.') ++n;
      closedir(d);
    }
  }
  return n;
}

// The binary a process runs ("" when it is gone).
std::string exe_path(uint32_t pid) {
  char buf[4096];
  std::string exe = "/proc/" + std::to_string(pid) + "/exe";
  ssize_t n = readlink(exe.c_str(), buf, sizeof buf - 1);
  return n <= 0 ? std::string() : std::string(buf, size_t(n));
}

// Once per binary: how to get function names when the target's binary is stripped.
void hint_debuginfo(uint32_t pid, const std::string& path) {
  std::string h = debuginfo_hint("/proc/" + std::to_string(pid) + "/exe", path);
  if (!h.empty()) std::fprintf(stderr, "lockstat: %s\n", h.c_str());
}

// Bounded memory on long runs (issue 19): after a report, whatever only served the
// waits it printed goes. Waits in flight keep their stacks; entries of threads that
// exited in the middle of a wait (exit_group kills a thread blocked in a futex: its
// sys_exit never comes) are deleted, having been counted in unmatched_begin.
template <class V>
void prune_starts(BpfSession& session, const std::string& map, std::set<int32_t>& keep_stacks,
                  int32_t (*stack_of)(const V&, int)) {
  int fd = session.get_table(map).get_fd();
  std::vector<uint32_t> gone;
  uint32_t cur = 0, next = 0;
  bool first = true;
  V v;
  while (bpf_get_next_key(fd, first ? nullptr : &cur, &next) == 0 && gone.size() < (1u << 20)) {
    cur = next;
    first = false;
    if (bpf_lookup_elem(fd, &cur, &v) != 0) continue;
    if (!pid_exists(cur)) {  // /proc/TID exists for every thread
      gone.push_back(cur);
      continue;
    }
    for (int i = 0; i < LS_KNEST; ++i)
      if (int32_t id = stack_of(v, i); id >= 0) keep_stacks.insert(id);
  }
  for (uint32_t tid : gone) bpf_delete_elem(fd, &tid);
}
int32_t futex_stack(const futex_start& s, int i) { return i == 0 ? s.stack_id : -1; }
int32_t klock_stack(const klock_task& t, int i) {
  return uint32_t(i) < t.depth && i < LS_KNEST ? t.f[i].stack_id : -1;
}
int32_t plock_stack(const plock_start&, int) { return -1; }

// BPF counters -> data-quality keys (both lost-stack slots count as lost_stacks).
const std::vector<CounterSlot> kCounters = {
    {LS_CNT_LOST_USTACK, "lost_stacks"},    {LS_CNT_LOST_KSTACK, "lost_stacks"},
    {LS_CNT_MAP_FULL, "map_full"},          {LS_CNT_UNMATCHED_END, "unmatched_end"},
    {LS_CNT_BELOW_MIN, "below_min"},        {LS_CNT_SCAN_FAILED, "stack_scans_failed"},
    {LS_CNT_STALE_BEGIN, "stale_begins"},   {LS_CNT_NEST_OVERFLOW, "nest_overflow"},
    {LS_CNT_OVERFLOW_STACKS, "overflow_stacks"}};

// The start record's fields: targets, probes attached and the effective options.
nlohmann::json start_fields(const Config& c, uint64_t probes) {
  nlohmann::json locks = nlohmann::json::array();
  for (uint64_t a : c.lock_addrs) locks.push_back(hex_addr(a));
  for (const auto& n : c.lock_names) locks.push_back(n);
  nlohmann::json j = {{"probes", probes},
                      {"probe_cost_ns", c.probe_cost_ns},
                      {"options",
                       {{"view", c.per_thread ? "threads" : "locks"},
                        {"user_locks", !c.kernel_only},
                        {"kernel_locks", !c.user_only},
                        {"uprobes", c.uprobes},
                        {"locks", locks},
                        {"min_ns", c.min_wait_ns},
                        {"sort", c.sort},
                        {"entries", c.entries},
                        {"stacks", c.stacks},
                        {"hist", c.hist},
                        {"unwind", c.unwind_dwarf ? "dwarf" : "fp"},
                        {"map_entries", c.map_entries}}}};
  if (!c.pids.empty()) j["pid"] = c.pids;
  if (!c.tids.empty()) j["tid"] = c.tids;
  return j;
}

}  // namespace

Status run(const Config& c0) {
  Config c = c0;
  std::vector<std::string> tps;
  if (!c.kernel_only) tps.push_back("syscalls:sys_enter_futex");
  if (!c.user_only) tps.push_back("lock:contention_begin");
  // --uprobes: find every target's pthread functions before loading anything
  std::vector<std::pair<PthreadLib, std::vector<ProbePoint>>> libs;
  if (!c.ebpf) {
    // the root/BTF check first, so an unprivileged user hears about root first
    if (auto st = preflight(tps)) return st;
    if (auto st = resolve_lock_names(c)) return st;
    if (!c.map_entries) c.map_entries = map_entries_for_threads(traced_threads(c));
    std::vector<uint32_t> targets = c.pids.empty() ? std::vector<uint32_t>{0} : c.pids;
    for (uint32_t pid : c.uprobes ? targets : std::vector<uint32_t>{}) {
      auto lib = find_pthread_lib(pid);
      if (!lib) return Error{lib.error()};
      auto pts = resolve_pthread_probes(
          *lib, {PthreadFn::MutexLock, PthreadFn::MutexTimedlock, PthreadFn::MutexClocklock}, {});
      if (!pts) return Error{pts.error()};
      libs.emplace_back(*lib, *pts);
    }
  }
  std::unique_ptr<CalibChild> calib;  // --uprobes: times the probes' own cost
  if (c.uprobes && !c.ebpf) {
    auto ch = start_calibration_child();
    if (!ch) return Error{ch.error()};
    calib = std::move(ch.value());
  }
  auto plan = bpf_plan(c);
  if (!plan) return Error{plan.error()};
  plan.value().tracepoints = tps;
  if (calib) plan.value().flag("CALIB");
  UnwindMaps uw;
  if (c.unwind_dwarf)  // tables of every target process, before load (sizes)
    if (auto st = uw.prepare(c.pids, c.tids, c.ebpf, plan.value())) return st;
  auto loaded = load_tool(ToolPlan{"lockstat", *plan, c.ebpf});
  if (!loaded) return Error{loaded.error()};
  if (!*loaded) return std::nullopt;  // --ebpf
  auto& session = **loaded;
  if (c.unwind_dwarf)  // the unwinder, tail-called by the user-space handlers
    if (auto st = c.uprobes ? uw.start(session, "uw_lockstat_pthread_tail", BPF_PROG_TYPE_KPROBE, "ls_pthread_record")
                            : uw.start(session, "uw_lockstat_futex_tail", BPF_PROG_TYPE_TRACEPOINT))
      return st;
  if (!c.lock_addrs.empty() && c.lock_names.empty())
    if (auto st = fill_addr_filter(session, c.lock_addrs)) return st;
  if (!session.get_array_table<uint32_t>("self_pid").update_value(0, static_cast<uint32_t>(getpid())).ok())
    return Error{"cannot write lockstat's own PID to the BPF map self_pid"};  // never trace ourselves

  // attach
  uint64_t probes = 0;
  auto attach_tp = [&](const std::string& tp, const std::string& fn) -> Status {
    if (auto st = session.attach_tracepoint(tp, fn)) return st;
    ++probes;
    return std::nullopt;
  };
  std::string what;
  if (!c.kernel_only) {
    std::vector<std::string> calls = {"futex"};
    if (tracepoint_exists("syscalls:sys_enter_futex_wait")) calls.push_back("futex_wait");
    if (tracepoint_exists("syscalls:sys_enter_futex_waitv")) calls.push_back("futex_waitv");
    for (const auto& sc : calls) {
      for (const char* dir : {"enter", "exit"}) {
        if (c.uprobes && std::string(dir) == "exit") continue;  // only marks blocked calls
        std::string tp = "syscalls:sys_" + std::string(dir) + "_" + sc;
        if (auto st = attach_tp(tp, "tracepoint__syscalls__sys_" + std::string(dir) + "_" + sc)) return st;
      }
    }
    what = c.uprobes ? "pthread_mutex_lock calls" : "futex waits";
  }
  uint64_t calibrated_cost = 0;
  if (calib) {
    auto cost = calibrate_probe_cost(session, *calib);
    if (!cost) return Error{cost.error()};
    c.probe_cost_ns = calibrated_cost = *cost;
    calib.reset();
    if (c.verbose)
      std::fprintf(stderr, "lockstat: probe cost %llu ns per call, taken off each timed call\n",
                   static_cast<unsigned long long>(c.probe_cost_ns));
  }
  for (auto& [lib, pts] : libs) {
    if (auto st = attach_pthread_probes(
            session, lib, pts,
            {{PthreadFn::MutexLock, "on_lock", "on_lock_ret"},
             {PthreadFn::MutexTimedlock, "on_lock", "on_lock_ret"},
             {PthreadFn::MutexClocklock, "on_lock", "on_lock_ret"}}))
      return st;
    probes += 2 * pts.size();  // uprobe + uretprobe each
    if (c.verbose)
      for (const auto& p : pts)
        std::fprintf(stderr, "lockstat: uprobe on %s:%s\n", lib.display.c_str(), describe_probe_point(p).c_str());
  }
  if (!c.user_only) {
    // ends first: a wait that began before its end was traced would stay open and
    // stretch a later wait on the same lock (an end without a begin is only counted)
    if (auto st = attach_tp("lock:contention_end", "tracepoint__lock__contention_end")) return st;
    if (auto st = attach_tp("lock:contention_begin", "tracepoint__lock__contention_begin")) return st;
    what += std::string(what.empty() ? "" : " + ") + "kernel locks";
  }
  const bool wakers = plan->has("WAKERS");
  if (wakers)
    if (auto st = attach_tp("sched:sched_waking", "tracepoint__sched__sched_waking")) return st;
  attach_phase_done();
  // the window opens here: waits that end while the symbols are read are counted, so
  // their time is inside the first interval (thread wait shares stay <= 100%)
  const uint64_t attached = monotonic_ns();
  // names and symbols of the targets, and their identity for the exec/exit policy, are
  // read before the start record: an exec after it is then always seen as one
  Resolver res(session);
  for (uint32_t pid : c.pids) res.sym().remember(pid);
  TargetWatch watch(c.pids, [&](uint32_t pid) {  // common/target.h: exec, new image
    res.sym().refresh(pid);
    if (c.unwind_dwarf) (void)uw.refresh(session, pid);
  });
  nlohmann::json fields = start_fields(c, probes);
  if (c.unwind_dwarf) fields["unwind_tables"] = uw.start_fields();  // what the tables cost
  announce_attached(std::cout, "lockstat", c.json, "Tracing " + what + banner_until(c.schedule), fields,
                    empty_dq());
  Names names = res.names();

  auto stats = session.get_hash_table<lockstat_key, lockstat_val>("stats");
  auto hist = session.get_hash_table<lockstat_hkey, uint64_t>("hist");
  auto comms = session.get_hash_table<uint32_t, lockstat_comm>("comms");
  std::vector<std::string> start_maps;
  if (!c.kernel_only) start_maps.push_back(c.uprobes ? "plock_start" : "futex_start");
  if (!c.user_only) start_maps.push_back("klock_start");
  std::map<std::string, uint32_t> exes;  // binary -> a process that runs it (debuginfo hints)

  const bool has_scans = !c.unwind_dwarf && plan->has("OFF_TASK_STACK");  // fp mode only
  const bool has_rq_locks = plan->has("RQ_CPUS");
  // pids are remembered (mappings read) while they run; exited ones are forgotten after
  // the report that printed their waits
  // processes whose binary was looked up (bounded: past it, new binaries get no hint);
  // apart from the symbolizer's own set, which already holds the -p targets
  std::set<uint32_t> exe_checked;
  auto remember_new = [&]() {
    for (auto& [k, v] : stats.get_table_offline()) {
      if (k.kind == LS_KIND_KERNEL) continue;
      if (!res.sym().remembered(k.pid)) res.sym().remember(k.pid);
      if (exes.size() < 4096 && exe_checked.size() < 16384 && exe_checked.insert(k.pid).second)
        if (std::string exe = exe_path(k.pid); !exe.empty()) exes.emplace(exe, k.pid);
    }
  };
  uint64_t last = attached, last_scan = 0;
  CounterDeltas counter_deltas, uw_deltas;   // counters are cumulative in BPF
  // tid -> {comm, last report that drained or used it}: kept across one report
  // boundary (a wait's comm may be drained a report before its stats), then dropped
  std::map<uint32_t, std::pair<std::string, uint64_t>> comm_of;
  uint64_t report_no = 0;
  Status failed;
  RunFlameGraph flame(c.svg, {"Off-CPU Flame Graph: lock waits",
                              "lockstat: wait time at the contended locks' call sites", "us",
                              FlamePalette::OffCpu});  // --svg: the waits of every report

  // After a report: drop what only its waits needed (see prune_starts).
  auto forget_reported = [&]() {
    std::set<int32_t> keep_stacks;
    std::set<uint32_t> keep_pids;
    for (auto& [k, v] : stats.get_table_offline()) {  // recorded since the drain
      if (k.stack_id >= 0) keep_stacks.insert(k.stack_id);
      if (k.kind != LS_KIND_KERNEL) keep_pids.insert(k.pid);
    }
    if (!c.kernel_only) {
      if (c.uprobes) prune_starts<plock_start>(session, "plock_start", keep_stacks, plock_stack);
      else prune_starts<futex_start>(session, "futex_start", keep_stacks, futex_stack);
    }
    if (!c.user_only) prune_starts<klock_task>(session, "klock_start", keep_stacks, klock_stack);
    clear_stacks(session, keep_stacks);
    if (has_scans) clear_stack_ids(session.get_table("scans").get_fd(), keep_stacks);
    res.sym().forget_exited_every(0, [&] { return keep_pids; });
    for (auto it = comm_of.begin(); it != comm_of.end();)
      it = it->second.second + 1 < report_no ? comm_of.erase(it) : std::next(it);
    for (auto it = exes.begin(); it != exes.end();)  // binaries no running process runs
      it = exe_path(it->second) != it->first ? exes.erase(it) : std::next(it);
    if (c.verbose)
      std::fprintf(stderr, "lockstat: tracking %zu processes, %zu symbol tables, %zu thread names\n",
                   res.sym().remembered_count(), res.sym().symbol_tables_count(), comm_of.size());
  };
  RunHooks hooks;
  hooks.poll = [&](int timeout_ms) {
    if (timeout_ms > 0) usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    uint64_t now = monotonic_ns();
    if (now - last_scan > 250 * 1000000ULL) {
      remember_new();
      last_scan = now;
    }
  };
  hooks.report = [&](bool final) {
    remember_new();
    res.new_report();
    ++report_no;
    Snapshot s;
    // Drained (atomic lookup-and-delete per key): a wait recorded while this report
    // is built is either in it or stays in the map for the next one. Comms are
    // drained after stats (BPF writes a wait's comm right after its stats) and
    // kept here across intervals; draining keeps the BPF map from filling up.
    for (auto& [k, v] : drain_hash<lockstat_key, lockstat_val>(stats)) s.waits.push_back({k, v});
    for (auto& kv : drain_hash<lockstat_hkey, uint64_t>(hist)) s.hist.push_back(kv);
    if (wakers) {
      auto wt = session.get_hash_table<lockstat_wkey, uint64_t>("wakers");
      for (auto& kv : drain_hash<lockstat_wkey, uint64_t>(wt)) s.wakers.push_back(kv);
    }
    for (auto& [tid, cm] : drain_hash<uint32_t, lockstat_comm>(comms))
      comm_of[tid] = {std::string(cm.comm, strnlen(cm.comm, sizeof cm.comm)), report_no};
    auto use_comm = [&](uint32_t tid) {
      if (auto it = comm_of.find(tid); it != comm_of.end()) {
        s.comms[tid] = it->second.first;
        it->second.second = report_no;
      }
    };
    for (const auto& w : s.waits) {
      use_comm(w.key.tid);
      use_comm(w.key.pid);  // a process is named after its main thread
    }
    for (const auto& [wk, n] : s.wakers) use_comm(wk.waker);
    if (auto st = add_bpf_counters(session, kCounters, s.dq, &counter_deltas)) failed = st;
    if (c.unwind_dwarf) {
      if (auto st = uw.add_dq(session, s.dq, &uw_deltas)) failed = st;
      res.set_unwound(read_unwound_stacks(session));
    }
    // waits still in progress (or whose end was never seen)
    for (const auto& m : start_maps) s.dq.unmatched_begin += count_entries(session.get_table(m).get_fd());
    if (has_rq_locks) {
      std::set<uint64_t> rq;
      for (uint64_t a : session.get_array_table<uint64_t>("rq_locks").get_table_offline())
        if (a) rq.insert(a);
      res.set_rq_locks(std::move(rq));
    }
    if (has_scans) {
      std::map<int32_t, std::vector<uint64_t>> sc;
      for (auto& [id, words] : session.get_hash_table<int32_t, lockstat_scan>("scans").get_table_offline())
        sc[id] = std::vector<uint64_t>(words.words, words.words + LS_SCAN_WORDS);
      res.set_scans(std::move(sc));
    }
    uint64_t now = monotonic_ns();
    s.window_ns = now - last;
    if (c.uprobes) c.probe_cost_ns = tracked_probe_cost(session, calibrated_cost);
    render(std::cout, std::cerr, c, s, names, window_ending_now(now - last, final));
    if (s.dq.map_full)
      std::fprintf(stderr,
                   "lockstat: WARNING: %llu waits or details were not recorded because BPF maps were "
                   "full (%llu entries); rerun with --map-entries %llu\n",
                   static_cast<unsigned long long>(s.dq.map_full), static_cast<unsigned long long>(c.map_entries),
                   static_cast<unsigned long long>(std::min<uint64_t>(c.map_entries * 4, 1u << 22)));
    if (flame.enabled()) add_folded_waits(build_report(s, names, c), flame.stacks());
    if (Status st = final ? flame.write() : std::nullopt; st && !failed) failed = st;
    if (final)
      for (const auto& [exe, pid] : exes) hint_debuginfo(pid, exe);
    if (!c.json && !c.csv && !final) std::cout << "\n";
    last = now;
    if (!final) forget_reported();
  };
  if (auto st = run_tool_loop(c.schedule, hooks, watch)) return st;
  return failed;
}

}  // namespace lockstat
