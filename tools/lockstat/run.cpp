// lockstat's runtime: resolve lock filters, load and attach, poll, report.
#include <bcc/BPF.h>
#include <bcc/libbpf.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <set>
#include <tuple>

#include "common/bpf_maps.h"
#include "common/bpf_session.h"
#include "common/cli.h"
#include "common/data_symbols.h"
#include "common/proc.h"
#include "common/pthread_probes.h"
#include "common/stacks.h"
#include "common/symbolize.h"
#include "tools/lockstat/lockstat.h"

namespace lockstat {
using namespace bpfdiag;

namespace {

// Names for the report, from the symbolizer and the BPF stack table.
class Resolver {
 public:
  explicit Resolver(ebpf::BPFStackTable table) : table_(std::move(table)) {}
  Symbolizer& sym() { return sym_; }

  // Futex mode's user-stack scans (stack id -> words at the user sp), per report.
  void set_scans(std::map<int32_t, std::vector<uint64_t>> scans) { scans_ = std::move(scans); }

  Names names() {
    Names n;
    n.lock_symbol = [this](uint32_t pid, uint64_t addr) -> std::string {
      if (pid == 0) return kernel_data_symbol_at(addr);
      SymbolInfo s = sym_.lookup_data(pid, addr);
      return s.found ? format_data_symbol(s) : "";
    };
    n.frames = [this](const lockstat_key& k) {
      std::vector<std::string> out;
      if (k.kind == LS_KIND_KERNEL) {
        for (uint64_t a : addrs(k)) out.push_back(sym_.kernel(a));
        return out;
      }
      // user: the frame-pointer walk, with the lock call's caller found by the stack
      // scan put back in front of the first frame outside the C library
      SymbolInfo caller = k.kind == LS_KIND_FUTEX ? scanned_caller(k) : SymbolInfo{};
      bool inserted = !caller.found;
      for (uint64_t a : addrs(k)) {
        SymbolInfo s = sym_.lookup_user(k.pid, a);
        if (!inserted && !in_libc(s)) {
          if (s.name != caller.name) out.push_back(format_symbol(caller, false));
          inserted = true;
        }
        out.push_back(format_symbol(s, false));
      }
      if (!inserted) out.push_back(format_symbol(caller, false));
      return out;
    };
    n.site = [this](const lockstat_key& k, const std::vector<std::string>& frames) -> std::string {
      if (k.kind == LS_KIND_PTHREAD && k.caller) return sym_.user(k.pid, k.caller, true);
      if (k.kind == LS_KIND_KERNEL) {
        for (const auto& f : frames)
          if (!is_kernel_lock_frame(f)) return f;
        return frames.empty() ? "" : frames.front();
      }
      // futex: the caller of the lock function, else the first frame outside libc
      SymbolInfo caller = scanned_caller(k);
      if (caller.found) return format_symbol(caller, true);
      for (uint64_t a : addrs(k)) {
        SymbolInfo s = sym_.lookup_user(k.pid, a);
        if (!in_libc(s)) return format_symbol(s, false);
      }
      return frames.empty() ? "" : frames.front();
    };
    return n;
  }

 private:
  static bool in_libc(const SymbolInfo& s) {
    const std::string& m = s.module;
    return m.find("libc.so") != std::string::npos || m.find("libpthread") != std::string::npos ||
           m.find("ld-linux") != std::string::npos;
  }
  // The innermost word of the scanned user stack that looks like a return address
  // into code outside the C library: inside a known function but not at its first
  // byte, and not a pointer to a global (the mutex's own address is usually saved on
  // the stack too; the code lookup alone would attribute it to the sizeless _fini
  // that precedes the data segments).
  SymbolInfo scanned_caller(const lockstat_key& k) {
    auto it = scans_.find(k.stack_id);
    if (k.stack_id < 0 || it == scans_.end()) return {};
    for (uint64_t w : it->second) {
      if (w < 4096) continue;
      SymbolInfo s = sym_.lookup_user(k.pid, w);
      if (!s.found || s.offset == 0 || in_libc(s) || s.name == "_fini" || s.name == "_init") continue;
      if (sym_.lookup_data(k.pid, w).found) continue;
      return s;
    }
    return {};
  }
  const std::vector<uint64_t>& addrs(const lockstat_key& k) {
    auto key = std::make_tuple(k.kind == LS_KIND_KERNEL ? 0u : k.pid, k.stack_id);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    return cache_[key] = stack_addrs(table_, k.stack_id);
  }
  Symbolizer sym_;
  ebpf::BPFStackTable table_;
  std::map<std::tuple<uint32_t, int32_t>, std::vector<uint64_t>> cache_;
  std::map<int32_t, std::vector<uint64_t>> scans_;
};

bool is_kernel_identity(const std::string& name) { return name == "mmap_lock" || name == "siglock"; }

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
Status fill_addr_filter(ebpf::BPF& bpf, const std::vector<uint64_t>& addrs) {
  auto t = bpf.get_hash_table<uint64_t, uint8_t>("addr_filter");
  for (uint64_t a : addrs) {
    auto st = t.update_value(a, 1);
    if (st.code() != 0) {
      char b[24];
      std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(a));
      return Error{"cannot add lock " + std::string(b) + " to the BPF address filter: " + st.msg()};
    }
  }
  return std::nullopt;
}

}  // namespace

Status run(const Config& c0) {
  Config c = c0;
  if (c.ebpf) {
    auto flags = bpf_cflags(c);
    if (!flags) return Error{flags.error()};
    std::cout << ebpf_listing(bpf_text(), *flags);
    return std::nullopt;
  }
  std::vector<std::string> tps;
  if (!c.kernel_only) tps.push_back("syscalls:sys_enter_futex");
  if (!c.user_only) tps.push_back("lock:contention_begin");
  if (auto st = preflight(tps)) return st;
  if (auto st = check_pids_exist(c.pids)) return st;
  if (auto st = resolve_lock_names(c)) return st;

  // --uprobes: find every target's pthread functions before loading anything
  std::vector<std::pair<PthreadLib, std::vector<ProbePoint>>> libs;
  if (c.uprobes) {
    std::vector<uint32_t> targets = c.pids.empty() ? std::vector<uint32_t>{0} : c.pids;
    for (uint32_t pid : targets) {
      auto lib = find_pthread_lib(pid);
      if (!lib) return Error{lib.error()};
      auto pts = resolve_pthread_probes(
          *lib, {PthreadFn::MutexLock, PthreadFn::MutexTimedlock, PthreadFn::MutexClocklock}, {});
      if (!pts) return Error{pts.error()};
      libs.emplace_back(*lib, *pts);
    }
  }

  auto flags = bpf_cflags(c);
  if (!flags) return Error{flags.error()};
  auto loaded = BpfSession::load(bpf_text(), *flags);
  if (!loaded) return Error{loaded.error()};
  auto& session = *loaded.value();
  auto& bpf = session.bpf();
  if (!c.lock_addrs.empty() && c.lock_names.empty())
    if (auto st = fill_addr_filter(bpf, c.lock_addrs)) return st;

  // attach
  std::string what;
  if (!c.kernel_only) {
    std::vector<std::string> calls = {"futex"};
    if (tracepoint_exists("syscalls:sys_enter_futex_wait")) calls.push_back("futex_wait");
    if (tracepoint_exists("syscalls:sys_enter_futex_waitv")) calls.push_back("futex_waitv");
    for (const auto& sc : calls) {
      for (const char* dir : {"enter", "exit"}) {
        if (c.uprobes && std::string(dir) == "exit") continue;  // only marks blocked calls
        std::string tp = "syscalls:sys_" + std::string(dir) + "_" + sc;
        if (auto st = session.attach_tracepoint(tp, "tracepoint__syscalls__sys_" + std::string(dir) + "_" + sc))
          return st;
      }
    }
    what = c.uprobes ? "pthread_mutex_lock calls" : "futex waits";
  }
  for (auto& [lib, pts] : libs) {
    if (auto st = attach_pthread_probes(
            session, lib, pts,
            {{PthreadFn::MutexLock, "on_lock", "on_lock_ret"},
             {PthreadFn::MutexTimedlock, "on_lock", "on_lock_ret"},
             {PthreadFn::MutexClocklock, "on_lock", "on_lock_ret"}}))
      return st;
    if (c.verbose)
      for (const auto& p : pts)
        std::fprintf(stderr, "lockstat: uprobe on %s:%s\n", lib.display.c_str(), describe_probe_point(p).c_str());
  }
  if (!c.user_only) {
    if (auto st = session.attach_tracepoint("lock:contention_begin", "tracepoint__lock__contention_begin"))
      return st;
    if (auto st = session.attach_tracepoint("lock:contention_end", "tracepoint__lock__contention_end"))
      return st;
    what += std::string(what.empty() ? "" : " + ") + "kernel locks";
  }
  std::string banner = "Tracing " + what + "... Hit Ctrl-C to end.";
  if (c.json || c.csv) std::fprintf(stderr, "%s\n", banner.c_str());
  else std::cout << banner << std::endl;

  Resolver res(bpf.get_stack_table("stacks"));
  for (uint32_t pid : c.pids) res.sym().remember(pid);
  Names names = res.names();

  auto stats = bpf.get_hash_table<lockstat_key, lockstat_val>("stats");
  auto hist = bpf.get_hash_table<lockstat_hkey, uint64_t>("hist");
  auto comms = bpf.get_hash_table<uint32_t, lockstat_comm>("comms");
  auto counters = bpf.get_array_table<uint64_t>("counters");
  std::vector<std::string> start_maps;
  if (!c.kernel_only) start_maps.push_back(c.uprobes ? "plock_start" : "futex_start");
  if (!c.user_only) start_maps.push_back("klock_start");

  bool has_scans = false;
  for (const auto& f : *flags)
    if (f.rfind("-DOFF_TASK_STACK=", 0) == 0) has_scans = true;
  std::set<uint32_t> seen_pids;
  auto remember_new = [&]() {
    for (auto& [k, v] : stats.get_table_offline())
      if (k.kind != LS_KIND_KERNEL && seen_pids.insert(k.pid).second) res.sym().remember(k.pid);
  };
  uint64_t last = monotonic_ns(), last_scan = 0;
  CounterDeltas counter_deltas;              // counters are cumulative in BPF
  std::map<uint32_t, std::string> comm_of;   // tid -> comm, kept across intervals
  bool target_gone = false;

  RunHooks hooks;
  hooks.poll = [&](int timeout_ms) {
    if (timeout_ms > 0) usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    uint64_t now = monotonic_ns();
    if (now - last_scan > 250 * 1000000ULL) {
      remember_new();
      last_scan = now;
    }
  };
  hooks.should_stop = [&]() {
    if (c.pids.empty()) return false;
    for (uint32_t p : c.pids)
      if (proc_running(p)) return false;  // a zombie has exited
    target_gone = true;
    return true;
  };
  hooks.report = [&](bool final) {
    remember_new();
    Snapshot s;
    // Drained (atomic lookup-and-delete per key): a wait recorded while this report
    // is built is either in it or stays in the map for the next one. Comms are
    // drained after stats (BPF writes a wait's comm right after its stats) and
    // kept here across intervals; draining keeps the BPF map from filling up.
    for (auto& [k, v] : drain_hash<lockstat_key, lockstat_val>(stats)) s.waits.push_back({k, v});
    for (auto& kv : drain_hash<lockstat_hkey, uint64_t>(hist)) s.hist.push_back(kv);
    for (auto& [tid, cm] : drain_hash<uint32_t, lockstat_comm>(comms))
      comm_of[tid] = std::string(cm.comm, strnlen(cm.comm, sizeof cm.comm));
    s.comms = comm_of;
    std::vector<uint64_t> d(LS_CNT_MAX, 0);
    for (int i = 0; i < LS_CNT_MAX; ++i) {
      uint64_t v = 0;
      counters.get_value(i, v);
      d[i] = counter_deltas.delta(i, v);
    }
    auto delta = [&](int i) { return d[i]; };
    s.dq.lost_stacks = delta(LS_CNT_LOST_USTACK) + delta(LS_CNT_LOST_KSTACK);
    s.dq.map_full = delta(LS_CNT_MAP_FULL);
    s.dq.unmatched_end = delta(LS_CNT_UNMATCHED_END);
    // waits still in progress (or whose end was never seen)
    for (const auto& m : start_maps) s.dq.unmatched_begin += count_entries(bpf.get_table(m).get_fd());
    if (c.min_wait_ns) s.dq.extra["below_min_wait"] = delta(LS_CNT_BELOW_MIN);
    if (delta(LS_CNT_SCAN_FAILED)) s.dq.extra["stack_scans_failed"] = delta(LS_CNT_SCAN_FAILED);
    if (has_scans) {
      std::map<int32_t, std::vector<uint64_t>> sc;
      for (auto& [id, words] : bpf.get_hash_table<int32_t, lockstat_scan>("scans").get_table_offline())
        sc[id] = std::vector<uint64_t>(words.words, words.words + LS_SCAN_WORDS);
      res.set_scans(std::move(sc));
    }
    uint64_t now = monotonic_ns();
    render(std::cout, std::cerr, c, s, names, now - last, final);
    if (!c.json && !c.csv && !final) std::cout << "\n";
    last = now;
  };
  run_loop(c.schedule, hooks);
  if (target_gone) {
    std::string who;
    for (uint32_t p : c.pids) who += (who.empty() ? "" : ",") + std::to_string(p);
    std::fprintf(stderr, "lockstat: PID %s exited; report above covers its lifetime under tracing\n", who.c_str());
  }
  return std::nullopt;
}

}  // namespace lockstat
