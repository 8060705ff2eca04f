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
#include "common/pprof.h"
#include "common/proc.h"
#include "common/pthread_probes.h"
#include "common/stacks.h"
#include "common/stack_reader.h"
#include "common/symbolize.h"
#include "common/target.h"
#include "common/tool.h"
#include "common/unwind_maps.h"
#include "common/declared_waits.h"
#include "common/elf_file.h"
#include "common/untrusted_file.h"
#include "common/jvm_state.h"
#include "common/go_runtime.h"
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

// Once per binary: a Go program's goroutines wait in the Go runtime (gopark), without a
// futex each; lockstat sees only its OS threads' waits (docs/design/go-waits.md).
// With -p, Go targets' goroutine waits are traced (common/go_runtime.h) unless refused
// (said at startup); system-wide they are not: said once.
void hint_go(uint32_t pid, const std::string& path, bool& said) {
  if (said || !is_go_binary("/proc/" + std::to_string(pid) + "/exe")) return;
  said = true;
  std::string base = path.substr(path.rfind('/') + 1);
  std::fprintf(stderr,
               "lockstat: %s is a Go program: its goroutines' waits (sync.Mutex, channels, sync.Cond) park in "
               "the Go runtime, not on a futex each, and are traced only with -p PID; its rows here are the "
               "runtime's own OS threads (idle Ms, runtime locks)\n",
               base.c_str());
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
  if (c.cgroup) j["cgroup"] = cgroup_json(c.cgroup);
  return j;
}

using PthreadTargets = std::vector<std::pair<PthreadLib, std::vector<ProbePoint>>>;

// Before anything is loaded: root/BTF first (so an unprivileged user hears about root
// first), -L names, map sizes, and with --uprobes every target's pthread functions.
Result<PthreadTargets> prepare(Config& c, const std::vector<std::string>& tps) {
  PthreadTargets libs;
  if (c.ebpf) return libs;
  if (auto st = preflight(tps)) return Error{st->message};
  if (auto st = resolve_lock_names(c)) return Error{st->message};
  if (!c.map_entries) {
    uint64_t threads = traced_threads(c);
    c.map_entries = map_entries_for_threads(threads);
    if (c.uprobes) c.user_map_entries = uprobe_map_entries_for_threads(threads);
  }
  std::vector<uint32_t> targets = c.pids.empty() ? std::vector<uint32_t>{0} : c.pids;
  for (uint32_t pid : c.uprobes ? targets : std::vector<uint32_t>{}) {
    auto lib = find_pthread_lib(pid);
    if (!lib) return Error{lib.error()};
    auto pts =
        resolve_pthread_probes(*lib, {PthreadFn::MutexLock, PthreadFn::MutexTimedlock, PthreadFn::MutexClocklock}, {});
    if (!pts) return Error{pts.error()};
    libs.emplace_back(*lib, *pts);
  }
  return libs;
}

// --unwind=dwarf: the declared waits' begins are uprobes, and a tail call stays within
// one program type: they reach a copy of the unwinder of their own (decl_progs).
Status install_declared_unwinder(BpfSession& s, UnwindMaps& uw) {
  auto fd = s.load_program("uw_lockstat_declared_tail", BPF_PROG_TYPE_KPROBE);
  if (!fd) return Error{fd.error()};
  if (!s.get_prog_table("decl_progs").update_value(UW_PROG_TOOL, *fd).ok())
    return Error{"cannot install the unwinder program for declared waits"};
  return uw.install_walk(s, "decl_progs", "decl_walk_begin", "decl_walk_step", BPF_PROG_TYPE_KPROBE);
}

// What was attached: probe count and the banner's "futex waits + kernel locks".
struct Attached {
  uint64_t probes = 0;
  std::string what;
  uint64_t calibrated_cost = 0;  // --uprobes: the probes' own cost, measured
};

// Attaches in lockstat's order: futex syscalls, (calibration), pthread uprobes, kernel
// lock ends before begins, sched_waking for wakers.
Result<Attached> attach_all(BpfSession& session, Config& c, const PthreadTargets& libs,
                            std::unique_ptr<CalibChild>& calib, bool wakers) {
  Attached a;
  auto attach_tp = [&](const std::string& tp, const std::string& fn) -> Status {
    if (auto st = session.attach_tracepoint(tp, fn)) return st;
    ++a.probes;
    return std::nullopt;
  };
  if (!c.kernel_only) {
    std::vector<std::string> calls = {"futex"};
    if (tracepoint_exists("syscalls:sys_enter_futex_wait")) calls.push_back("futex_wait");
    if (tracepoint_exists("syscalls:sys_enter_futex_waitv")) calls.push_back("futex_waitv");
    for (const auto& sc : calls)
      for (const std::string dir : {"enter", "exit"}) {
        if (c.uprobes && dir == "exit") continue;  // only marks blocked calls
        // futex, futex_wait and futex_waitv share one program per direction
        // (bpf_sources/lockstat.bpf.c: the same layout, told apart by syscall number)
        const std::string fn = "tracepoint__syscalls__sys_" + dir + "_futex";
        if (auto st = attach_tp("syscalls:sys_" + dir + "_" + sc, fn))
          return Error{st->message};
      }
    a.what = c.uprobes ? "pthread_mutex_lock calls" : "futex waits";
  }
  if (calib) {
    auto cost = calibrate_probe_cost(session, *calib);
    if (!cost) return Error{cost.error()};
    c.probe_cost_ns = a.calibrated_cost = *cost;
    calib.reset();
    if (c.verbose)
      std::fprintf(stderr, "lockstat: probe cost %llu ns per call, taken off each timed call\n",
                   static_cast<unsigned long long>(c.probe_cost_ns));
  }
  for (auto& [lib, pts] : libs) {
    if (auto st = attach_pthread_probes(session, lib, pts,
                                        {{PthreadFn::MutexLock, "on_lock", "on_lock_ret"},
                                         {PthreadFn::MutexTimedlock, "on_lock", "on_lock_ret"},
                                         {PthreadFn::MutexClocklock, "on_lock", "on_lock_ret"}}))
      return Error{st->message};
    a.probes += 2 * pts.size();  // uprobe + uretprobe each
    if (c.verbose)
      for (const auto& p : pts)
        std::fprintf(stderr, "lockstat: uprobe on %s:%s\n", lib.display.c_str(), describe_probe_point(p).c_str());
  }
  if (!c.user_only) {
    // ends first: a wait that began before its end was traced would stay open and
    // stretch a later wait on the same lock (an end without a begin is only counted)
    if (auto st = attach_tp("lock:contention_end", "tracepoint__lock__contention_end")) return Error{st->message};
    if (auto st = attach_tp("lock:contention_begin", "tracepoint__lock__contention_begin"))
      return Error{st->message};
    a.what += std::string(a.what.empty() ? "" : " + ") + "kernel locks";
  }
  if (wakers)
    if (auto st = attach_tp("sched:sched_waking", "tracepoint__sched__sched_waking")) return Error{st->message};
  return a;
}

// The run loop's state and hooks: new processes remembered while the run goes on, each
// report's snapshot drained from the maps, and what a report no longer needs dropped.
class Reporter {
 public:
  Reporter(BpfSession& session, Config& c, UnwindMaps& uw, Resolver& res, DeclaredWaits& decl, JvmWaits& jvm,
           GoWaits& go, const BpfPlan& plan, uint64_t calibrated_cost, uint64_t attached)
      : session_(session), c_(c), uw_(uw), res_(res), decl_(decl), jvm_(jvm), go_(go), calibrated_cost_(calibrated_cost),
        last_(attached),
        stats_{session.get_hash_table<lockstat_key, lockstat_val>("stats")},
        hist_{session.get_hash_table<lockstat_hkey, uint64_t>("hist")},
        comms_(session.get_hash_table<uint32_t, lockstat_comm>("comms")),
        wakers_(plan.has("WAKERS")),
        has_scans_(!c.unwind_dwarf && plan.has("OFF_TASK_STACK")),  // fp mode only
        has_rq_locks_(plan.has("RQ_CPUS")),
        flame_(c.svg, {"Lock Wait Flame Graph", "lockstat: wait time (us) at the contended locks' call sites",
                       "us", FlamePalette::OffCpu}),  // --svg: the waits of every report
        pprof_(pprof_output(c)) {                // --pprof: the same window
    if (pprof_.enabled()) res_.sym().keep_origins();  // frames with their modules
    if (!c.kernel_only) start_maps_.push_back(c.uprobes ? "plock_start" : "futex_start");
    if (!c.user_only) start_maps_.push_back("klock_start");
    if (plan.has("USTATS_ENTRIES")) {  // user-space waits in maps of their own
      stats_.push_back(session.get_hash_table<lockstat_key, lockstat_val>("ustats"));
      hist_.push_back(session.get_hash_table<lockstat_hkey, uint64_t>("uhist"));
    }
  }

  void set_names(Names n) {
    names_ = std::move(n);
    names_.declared = [this](uint64_t addr) { return decl_.name(addr); };
    names_.java_class = [this](uint32_t pid, uint64_t klass) { return jvm_.class_chain(pid, klass); };
    names_.go_reason = [this](uint32_t pid, uint32_t v) { return go_.reason(pid, v); };
  }
  Status failed() const { return failed_; }

  void poll(int timeout_ms) {
    if (timeout_ms > 0) usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    uint64_t now = monotonic_ns();
    if (now - last_scan_ > 250 * 1000000ULL) {
      remember_new();
      last_scan_ = now;
    }
    if (jvm_on_) jvm_.refresh(session_);  // Java threads and (system-wide) JVMs started since
    if (!go_.empty()) go_.check_rate(session_, now);  // the goroutine probes' rate guard
  }

  // --prometheus/--listen: the snapshot once attached (every counter at 0)
  void start_metrics() {
    if (metrics_.enabled()) metrics_.publish_start(empty_dq());
  }

  void report(bool final) {
    remember_new();
    res_.new_report();
    ++report_no_;
    if (final) timing_mark("report: new processes");
    if (final) session_.begin_detach();  // the probes close while the report is built
    Snapshot s;
    drain(s);
    if (final) timing_mark("report: drain " + std::to_string(s.waits.size()) + " waits, " +
                           std::to_string(s.hist.size()) + " buckets");
    read_state(s);
    if (final) timing_mark("report: counters, open waits");
    uint64_t now = monotonic_ns();
    s.window_ns = now - last_;
    if (c_.uprobes) c_.probe_cost_ns = tracked_probe_cost(session_, calibrated_cost_);
    render(std::cout, std::cerr, c_, s, names_, window_ending_now(now - last_, final));
    if (final) timing_mark("report: build and print");
    if (s.dq.map_full)
      std::fprintf(stderr,
                   "lockstat: WARNING: %llu waits or details were not recorded because BPF maps were "
                   "full (%llu entries); rerun with --map-entries %llu\n",
                   static_cast<unsigned long long>(s.dq.map_full), static_cast<unsigned long long>(c_.map_entries),
                   static_cast<unsigned long long>(std::min<uint64_t>(c_.map_entries * 4, 1u << 22)));
    if (flame_.enabled() || pprof_.enabled() || metrics_.enabled()) {
      Report r = build_report(s, names_, c_);
      if (flame_.enabled()) add_folded_waits(r, flame_.stacks());
      if (pprof_.enabled()) add_pprof(pprof_.profile(), r, res_.sym());
      if (metrics_.enabled()) {
        add_report_metrics(metrics_.set(), r);
        metrics_.add_data_quality(s.dq);
        metrics_.publish(final);
      }
    }
    if (Status st = final ? flame_.write() : std::nullopt; st && !failed_) failed_ = st;
    if (Status st = final ? pprof_.write() : std::nullopt; st && !failed_) failed_ = st;
    if (final) {
      bool go_said = false;
      for (const auto& [exe, pid] : exes_) {
        hint_debuginfo(pid, exe);
        if (c_.pids.empty()) hint_go(pid, exe, go_said);
      }
      if (!go_.empty() && !go_.stopped()) open_go_waits();
    }
    if (!c_.json && !c_.csv && !final) std::cout << "\n";
    last_ = now;
    if (!final) forget_reported();
  }

 private:
  // pids are remembered (mappings read) while they run; exited ones are forgotten after
  // the report that printed their waits. Processes whose binary was looked up are
  // bounded (past it, new binaries get no hint).
  void remember_new() {
    for (auto& t : stats_)  // keys only (--uprobes: 32,000 rows for 1000 mutexes x 16 threads)
      for_each_key<lockstat_key>(
          t,
          [&](const lockstat_key& k) {
            if (k.kind == LS_KIND_KERNEL) return;
            if (!res_.sym().remembered(k.pid)) res_.sym().remember(k.pid);
            if (exes_.size() < 4096 && exe_checked_.size() < 16384 && exe_checked_.insert(k.pid).second)
              if (std::string exe = exe_path(k.pid); !exe.empty()) exes_.emplace(exe, k.pid);
          },
          [] { return true; });
  }

  // Drained (atomic lookup-and-delete per key): a wait recorded while this report is
  // built is either in it or stays in the map for the next one. Comms are drained after
  // stats (BPF writes a wait's comm right after its stats) and kept here across
  // intervals; draining keeps the BPF map from filling up.
  void drain(Snapshot& s) {
    for (auto& t : stats_)
      for (auto& [k, v] : drain_hash<lockstat_key, lockstat_val>(t)) s.waits.push_back({k, v});
    for (auto& t : hist_)
      for (auto& kv : drain_hash<lockstat_hkey, uint64_t>(t)) s.hist.push_back(kv);
    for (auto& w : s.waits)  // declared waits: one id per name, the same in every process
      if (w.key.kind == LS_KIND_DECLARED) w.key.addr = decl_.id_of(w.key.pid, w.key.addr, session_);
    for (auto& [hk, n] : s.hist)
      if (hk.kind == LS_KIND_DECLARED) hk.addr = decl_.id_of(hk.pid, hk.addr, session_);
    if (wakers_) {
      auto wt = session_.get_hash_table<lockstat_wkey, uint64_t>("wakers");
      for (auto& kv : drain_hash<lockstat_wkey, uint64_t>(wt)) s.wakers.push_back(kv);
    }
    for (auto& [tid, cm] : drain_hash<uint32_t, lockstat_comm>(comms_))
      comm_of_[tid] = {std::string(cm.comm, strnlen(cm.comm, sizeof cm.comm)), report_no_};
    auto use_comm = [&](uint32_t tid) {
      if (auto it = comm_of_.find(tid); it != comm_of_.end()) {
        s.comms[tid] = it->second.first;
        it->second.second = report_no_;
      }
    };
    for (const auto& w : s.waits) {
      use_comm(w.key.tid);
      use_comm(w.key.pid);  // a process is named after its main thread
    }
    for (const auto& [wk, n] : s.wakers) use_comm(wk.waker);
  }

  // Counters, unwound stacks, waits still open, run-queue locks and stack scans.
  void read_state(Snapshot& s) {
    if (auto st = add_bpf_counters(session_, kCounters, s.dq, &counter_deltas_)) failed_ = st;
    if (c_.unwind_dwarf) {
      if (auto st = uw_.add_dq(session_, s.dq, &uw_deltas_)) failed_ = st;
      res_.set_unwound(read_unwound_stacks(session_));
    }
    // waits still in progress (or whose end was never seen)
    for (const auto& m : start_maps_) s.dq.unmatched_begin += count_entries(session_.get_table(m).get_fd());
    if (!go_.empty()) {  // goroutines parked now; the rate guard's state and what it dropped
      if (!go_.stopped()) s.dq.unmatched_begin += count_entries(session_.get_table("go_start").get_fd());
      s.dq.add("go_rate_guard", go_.stopped() ? 1 : 0);
      s.dq.add("go_waits_dropped", go_.take_dropped());
    }
    if (has_rq_locks_) {
      std::set<uint64_t> rq;
      for (uint64_t a : session_.get_array_table<uint64_t>("rq_locks").get_table_offline())
        if (a) rq.insert(a);
      res_.set_rq_locks(std::move(rq));
    }
    if (has_scans_) {
      std::map<int32_t, std::vector<uint64_t>> sc;
      for (auto& [id, words] : session_.get_hash_table<int32_t, lockstat_scan>("scans").get_table_offline())
        sc[id] = std::vector<uint64_t>(words.words, words.words + LS_SCAN_WORDS);
      res_.set_scans(std::move(sc));
    }
  }

  // After a report: drop what only its waits needed (see prune_starts).
  void forget_reported() {
    std::set<int32_t> keep_stacks;
    std::set<uint32_t> keep_pids;
    for (auto& t : stats_)  // recorded since the drain
      for_each_key<lockstat_key>(
          t,
          [&](const lockstat_key& k) {
            if (k.stack_id >= 0) keep_stacks.insert(k.stack_id);
            if (k.kind != LS_KIND_KERNEL) keep_pids.insert(k.pid);
          },
          [] { return true; });
    if (!c_.kernel_only) {
      if (c_.uprobes) prune_starts<plock_start>(session_, "plock_start", keep_stacks, plock_stack);
      else {
        prune_starts<futex_start>(session_, "futex_start", keep_stacks, futex_stack);
        prune_starts<futex_start>(session_, "decl_outer", keep_stacks, futex_stack);  // set-aside declared waits
      }
    }
    if (!c_.user_only) prune_starts<klock_task>(session_, "klock_start", keep_stacks, klock_stack);
    if (!go_.empty()) prune_go_starts(keep_stacks);
    clear_stacks(session_, keep_stacks);
    if (has_scans_) clear_stack_ids(session_.get_table("scans").get_fd(), keep_stacks);
    res_.sym().forget_exited_every(0, [&] { return keep_pids; });
    for (auto it = comm_of_.begin(); it != comm_of_.end();)
      it = it->second.second + 1 < report_no_ ? comm_of_.erase(it) : std::next(it);
    for (auto it = exes_.begin(); it != exes_.end();)  // binaries no running process runs
      it = exe_path(it->second) != it->first ? exes_.erase(it) : std::next(it);
    if (c_.verbose)
      std::fprintf(stderr, "lockstat: tracking %zu processes, %zu symbol tables, %zu thread names\n",
                   res_.sym().remembered_count(), res_.sym().symbol_tables_count(), comm_of_.size());
  }

  // Goroutine waits in flight: their stacks stay; those of processes gone are deleted.
  void prune_go_starts(std::set<int32_t>& keep_stacks) {
    int fd = session_.get_table("go_start").get_fd();
    go_key k{}, next{};
    go_start v{};
    std::vector<go_key> gone;
    bool first = true;
    while (bpf_get_next_key(fd, first ? nullptr : &k, &next) == 0 && gone.size() < (1u << 20)) {
      k = next;
      first = false;
      if (bpf_lookup_elem(fd, &k, &v) != 0) continue;
      if (!pid_exists(k.pid)) gone.push_back(k);
      else if (v.stack_id >= 0) keep_stacks.insert(v.stack_id);
    }
    for (auto& g : gone) bpf_delete_elem(fd, &g);
  }

  // At exit: goroutines parked since tracing began and not resumed (idle workers,
  // deadlocks), by process and reason, as a goroutine dump would list them.
  void open_go_waits() {
    int fd = session_.get_table("go_start").get_fd();
    go_key k{}, next{};
    go_start v{};
    std::map<std::pair<uint32_t, uint32_t>, std::pair<uint64_t, uint64_t>> by;  // (pid, reason) -> n, oldest ts
    bool first = true;
    size_t seen = 0;
    while (bpf_get_next_key(fd, first ? nullptr : &k, &next) == 0 && ++seen < (1u << 20)) {
      k = next;
      first = false;
      if (bpf_lookup_elem(fd, &k, &v) != 0) continue;
      auto& [n, oldest] = by[{k.pid, v.reason}];
      ++n;
      oldest = oldest ? std::min<uint64_t>(oldest, v.ts) : v.ts;
    }
    uint64_t now = monotonic_ns();
    std::map<uint32_t, std::string> lines;
    for (const auto& [pr, acc] : by) {
      std::string& l = lines[pr.first];
      l += (l.empty() ? "" : ", ") + std::to_string(acc.first) + " " + go_.reason(pr.first, pr.second) +
           " (longest " + fmt_ns(now > acc.second ? now - acc.second : 0) + ")";
    }
    for (const auto& [pid, l] : lines)
      std::fprintf(stderr, "lockstat: PID %u: goroutines parked since tracing began and still parked: %s\n", pid,
                   l.c_str());
  }

  BpfSession& session_;
  Config& c_;
  UnwindMaps& uw_;
  Resolver& res_;
  DeclaredWaits& decl_;
  JvmWaits& jvm_;
  GoWaits& go_;
  const bool jvm_on_ = !c_.uprobes && !c_.kernel_only;  // futex mode reads Java threads' waits
  const uint64_t calibrated_cost_;
  uint64_t last_, last_scan_ = 0;
  std::vector<ebpf::BPFHashTable<lockstat_key, lockstat_val>> stats_;  // stats (+ ustats)
  std::vector<ebpf::BPFHashTable<lockstat_hkey, uint64_t>> hist_;
  ebpf::BPFHashTable<uint32_t, lockstat_comm> comms_;
  const bool wakers_, has_scans_, has_rq_locks_;
  RunFlameGraph flame_;
  RunPprof pprof_;
  ToolMetrics metrics_{"lockstat"};  // --prometheus/--listen
  std::vector<std::string> start_maps_;
  Names names_;
  std::map<std::string, uint32_t> exes_;  // binary -> a process that runs it (debuginfo hints)
  std::set<uint32_t> exe_checked_;       // apart from the symbolizer's own set (the -p targets)
  CounterDeltas counter_deltas_, uw_deltas_;  // counters are cumulative in BPF
  // tid -> {comm, last report that drained or used it}: kept across one report
  // boundary (a wait's comm may be drained a report before its stats), then dropped
  std::map<uint32_t, std::pair<std::string, uint64_t>> comm_of_;
  uint64_t report_no_ = 0;
  Status failed_;
};

}  // namespace

Status run(const Config& c0) {
  Config c = c0;
  std::vector<std::string> tps;
  if (!c.kernel_only) tps.push_back("syscalls:sys_enter_futex");
  if (!c.user_only) tps.push_back("lock:contention_begin");
  auto libs = prepare(c, tps);
  if (!libs) return Error{libs.error()};
  std::unique_ptr<CalibChild> calib;  // --uprobes: times the probes' own cost
  if (c.uprobes && !c.ebpf) {
    auto ch = start_calibration_child();
    if (!ch) return Error{ch.error()};
    calib = std::move(ch.value());
  }
  DeclaredWaits decl;  // the software's own wait probes, found before anything is loaded
  if (!c.ebpf && !c.kernel_only && !c.uprobes) decl.find(c.pids, c.tids);
  JvmWaits jvm;  // HotSpot JVMs among the targets: what their threads wait for, as jstack says
  if (!c.ebpf && !c.kernel_only && !c.uprobes) {
    std::vector<uint32_t> procs = c.pids;  // empty: every process
    for (uint32_t tid : c.tids)
      if (uint32_t p = proc_tgid(tid)) procs.push_back(p);
    jvm.find(procs, c.verbose);
  }
  GoWaits go;  // Go programs among the targets: where their goroutines park
  if (!c.ebpf && !c.kernel_only && !c.uprobes) go.find(c.pids, "lockstat");
  auto plan = bpf_plan(c);
  if (!plan) return Error{plan.error()};
  plan.value().tracepoints = tps;
  if (!go.empty()) plan.value().flag("GO_WAITS");
  if (!c.ebpf) plan.value().integer("DECL_BEGINS", decl.begin_slots());  // only the begins attached
  if (calib) plan.value().flag("CALIB");
  UnwindMaps uw;  // the unwinder is tail-called by the user-space handlers
  UnwinderPlan unwinder = c.uprobes ? UnwinderPlan{c.pids, c.tids, "uw_lockstat_pthread_tail", BPF_PROG_TYPE_KPROBE,
                                                   "ls_pthread_record"}
                                    : UnwinderPlan{c.pids, c.tids, "uw_lockstat_futex_tail", BPF_PROG_TYPE_TRACEPOINT, ""};
  auto loaded = load_unwinding_tool(ToolPlan{"lockstat", *plan, c.ebpf}, c.unwind_dwarf ? &uw : nullptr, unwinder);
  if (!loaded) return Error{loaded.error()};
  if (!*loaded) return std::nullopt;  // --ebpf
  auto& session = **loaded;
  if (!c.lock_addrs.empty() && c.lock_names.empty())
    if (auto st = fill_addr_filter(session, c.lock_addrs)) return st;
  if (!session.get_array_table<uint32_t>("self_pid").update_value(0, static_cast<uint32_t>(getpid())).ok())
    return Error{"cannot write lockstat's own PID to the BPF map self_pid"};  // never trace ourselves
  if (auto st = jvm.install(session)) return st;  // before the first wait is seen
  auto attached_all = attach_all(session, c, *libs, calib, plan->has("WAKERS"));
  if (!attached_all) return Error{attached_all.error()};
  Attached attached = *attached_all;
  if (c.unwind_dwarf && decl.has_begins())  // the begins tail-call their own unwinder copy
    if (auto st = install_declared_unwinder(session, uw)) return st;
  if (auto st = decl.attach(session, c.verbose, attached.probes)) return st;
  if (!decl.empty()) attached.what += " + declared waits (USDT)";
  if (auto st = go.attach(session, attached.probes, c.verbose)) return st;
  if (!go.empty()) attached.what += " + goroutine waits (Go)";
  attach_phase_done();
  // the window opens here: waits that end while the symbols are read are counted, so
  // their time is inside the first interval (thread wait shares stay <= 100%)
  const uint64_t window_start = monotonic_ns();
  // names and symbols of the targets, and their identity for the exec/exit policy, are
  // read before the start record: an exec after it is then always seen as one
  Resolver res(session);
  for (uint32_t pid : c.pids) res.sym().remember(pid);
  TargetWatch watch(c.pids, [&](uint32_t pid) {  // common/target.h: exec, new image
    res.sym().refresh(pid);
    if (c.unwind_dwarf) (void)uw.refresh(session, pid);
  });
  nlohmann::json fields = start_fields(c, attached.probes);
  if (c.unwind_dwarf) fields["unwind_tables"] = uw.start_fields();  // what the tables cost
  if (!decl.empty()) fields["declared_waits"] = decl.start_fields();
  if (!jvm.empty()) fields["jvms"] = jvm.start_fields();
  if (!go.empty()) fields["go"] = go.start_fields();
  announce_attached(std::cout, "lockstat", c.json, "Tracing " + attached.what + cgroup_banner(c.cgroup) + banner_until(c.schedule), fields,
                    empty_dq());
  Reporter rep(session, c, uw, res, decl, jvm, go, *plan, attached.calibrated_cost, window_start);
  rep.set_names(res.names());
  rep.start_metrics();
  RunHooks hooks;
  hooks.poll = [&](int timeout_ms) { rep.poll(timeout_ms); };
  hooks.report = [&](bool final) { rep.report(final); };
  if (auto st = run_tool_loop(c.schedule, hooks, watch)) return st;
  return rep.failed();
}

}  // namespace lockstat
