#include "tools/pmheld/pmheld.h"

#include <bcc/BPF.h>
#include <linux/types.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>

#include "common/bpf_maps.h"
#include "common/bpf_session.h"
#include "common/cli.h"
#include "common/embedded.h"
#include "common/proc.h"
#include "common/pthread_probes.h"
#include "common/stacks.h"
#include "common/symbolize.h"
#include "common/table.h"

extern "C" {
#include "pmheld_shared.h"
}
static_assert(sizeof(pmheld_held_key) == 16, "pmheld_held_key layout shared with BPF");
static_assert(sizeof(pmheld_held) == 24, "pmheld_held layout shared with BPF");
static_assert(sizeof(pmheld_stat_key) == 16, "pmheld_stat_key layout shared with BPF");
static_assert(sizeof(pmheld_stat) == 24, "pmheld_stat layout shared with BPF");
static_assert(sizeof(pmheld_hist_key) == 16, "pmheld_hist_key layout shared with BPF");

namespace bpfdiag {
extern const EmbeddedFile kBpf_pmheld[];
}

namespace pmheld {
using namespace bpfdiag;

const char kHelp[] = R"(pmheld - summarize pthread mutex hold times per lock and acquiring stack.

USAGE: pmheld [-hTvj] [-p PID[,PID]] [-i SECS] [-s N] [-n N] [--sort KEY] [--fields LIST] [duration]

A hold lasts from the successful return of pthread_mutex_lock, _trylock,
_timedlock or _clocklock to pthread_mutex_unlock. pthread_cond_wait and
_timedwait release the mutex while waiting, so a wait ends the hold and its
return starts a new one: condition-variable waits never count as holding.
Locks are named by their data symbol when they have one (static mutexes).

OPTIONS:
  -p, --pid PID[,PID]   trace only these processes (default: every process
                        using this machine's libc)
  -i, --interval SECS   print a report every interval (default: at the end)
  -T, --timestamp       include a timestamp on each report
  -s, --stacks N        acquiring stacks shown per lock (default 3; 0: do not
                        record stacks, which is cheaper)
      --stack-storage-size N  distinct acquiring stacks kept for the whole
                        run (default 16384, 1-262144)
  -n, --entries N       locks shown (default 10; 0: all)
      --sort KEY        order locks by a column (default total): pid, comm,
                        lock, addr, count, total, avg, p50, p95, p99, max
      --fields LIST     summary table columns, e.g. lock,count,p99 or +comm
      --no-hist         do not print a histogram per lock
      --probe-at-symbol probe each function's first instruction (slower: it
                        is single-stepped) instead of the first emulated one
  -v, --verbose         print where each probe was placed
  -j, --json            NDJSON output: one record per lock and a summary
      --ebpf            print the BPF program and exit
  -h, --help            show this help

EXAMPLES:
  pmheld -p 181             # hold times of PID 181's mutexes, until Ctrl-C
  pmheld -p 181 10          # trace PID 181 for 10 seconds
  pmheld -p 181 -i 5        # a report every 5 seconds
  pmheld -p 181 -s 0 -n 3   # top 3 locks, no stacks (lower overhead)
  pmheld --sort p99 5       # all processes for 5 s, worst p99 hold first
  pmheld -p 181 -j 10       # JSON records per lock after 10 seconds
)";

namespace {

std::vector<Column<LockHold>> summary_columns() {
  auto ns = [](uint64_t LockHold::*f) {
    return [f](const LockHold& l) { return std::string(fmt_ns(l.*f)); };
  };
  return {
      {"pid", "PID", 7, [](const LockHold& l) { return Cell(uint64_t(l.pid)); }},
      {"comm", "COMM", -15, [](const LockHold& l) { return Cell(l.comm); }, {}, false},
      {"lock", "LOCK", -20, [](const LockHold& l) { return Cell(lock_name(l)); }},
      {"addr", "ADDR", -14, [](const LockHold& l) { return Cell(hex_addr(l.addr)); }, {}, false},
      {"count", "COUNT", 9, [](const LockHold& l) { return Cell(l.count); }},
      {"total", "TOTAL", 7, [](const LockHold& l) { return Cell(l.total_ns); }, ns(&LockHold::total_ns)},
      {"avg", "AVG", 7, [](const LockHold& l) { return Cell(l.hist.mean()); },
       [](const LockHold& l) { return fmt_ns(l.hist.mean()); }},
      {"p50", "P50", 7, [](const LockHold& l) { return Cell(l.hist.percentile(50)); },
       [](const LockHold& l) { return fmt_ns(l.hist.percentile(50)); }},
      {"p95", "P95", 7, [](const LockHold& l) { return Cell(l.hist.percentile(95)); },
       [](const LockHold& l) { return fmt_ns(l.hist.percentile(95)); }, false},
      {"p99", "P99", 7, [](const LockHold& l) { return Cell(l.hist.percentile(99)); },
       [](const LockHold& l) { return fmt_ns(l.hist.percentile(99)); }},
      {"max", "MAX", 7, [](const LockHold& l) { return Cell(l.max_ns); }, ns(&LockHold::max_ns)},
  };
}

Status parse_pid_list(const std::string& s, std::vector<uint32_t>& out) {
  auto v = parse_id_list(s, "PID");
  if (!v) return Error{v.error()};
  out = *v;
  return std::nullopt;
}

}  // namespace

std::string hex_addr(uint64_t a) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(a));
  return b;
}

std::string lock_name(const LockHold& l) { return l.symbol.empty() ? hex_addr(l.addr) : l.symbol; }

Status check_sort_key(const std::string& key) {
  Table<LockHold> t(summary_columns());
  return t.set_sort(key);
}

Result<Config> parse_args(int argc, char** argv) {
  cxxopts::Options opts("pmheld");
  opts.add_options()("h,help", "")("p,pid", "", cxxopts::value<std::string>())(
      "i,interval", "", cxxopts::value<std::string>())("T,timestamp", "")(
      "s,stacks", "", cxxopts::value<std::string>())("n,entries", "", cxxopts::value<std::string>())(
      "sort", "", cxxopts::value<std::string>())("fields", "", cxxopts::value<std::string>())(
      "stack-storage-size", "", cxxopts::value<std::string>())("no-hist", "")("probe-at-symbol", "")("v,verbose", "")("j,json", "")("ebpf", "");
  add_positionals(opts);
  auto r = parse_cli(opts, argc, argv);
  if (!r) return Error{r.error()};
  Config c;
  c.help = r->count("help");
  c.timestamp = r->count("timestamp");
  c.no_hist = r->count("no-hist");
  c.at_symbol = r->count("probe-at-symbol");
  c.verbose = r->count("verbose");
  c.json = r->count("json");
  c.ebpf = r->count("ebpf");
  if (auto p = opt_str(*r, "pid"))
    if (auto st = parse_pid_list(*p, c.pids)) return *st;
  if (auto st = check_pids_exist(c.pids)) return *st;
  if (auto i = opt_str(*r, "interval")) {
    auto v = parse_duration_ns(*i, "interval", 1000000000ULL, 1000000ULL, 86400ULL * 1000000000ULL);
    if (!v) return Error{v.error()};
    c.schedule.interval_ns = *v;
  }
  if (auto s = opt_str(*r, "stacks")) {
    auto v = parse_uint(*s, "stacks", 0, 1000);
    if (!v) return Error{v.error()};
    c.stacks = *v;
  }
  if (auto s = opt_str(*r, "stack-storage-size")) {
    auto v = parse_uint(*s, "stack storage size", 1, 262144);
    if (!v) return Error{v.error()};
    c.stack_storage_size = *v;
  }
  if (auto n = opt_str(*r, "entries")) {
    auto v = parse_uint(*n, "entries", 0, 1000000);
    if (!v) return Error{v.error()};
    c.entries = *v;
  }
  Table<LockHold> t(summary_columns());
  if (auto s = opt_str(*r, "sort")) {
    if (auto st = t.set_sort(*s)) return *st;
    c.sort = *s;
  }
  if (auto f = opt_str(*r, "fields")) {
    if (auto st = t.set_fields(*f)) return *st;
    c.fields = *f;
  }
  if (auto st = parse_duration_positional(positionals(*r), c.schedule)) return *st;
  return c;
}

std::string bpf_text() { return kBpf_pmheld[0].text; }

std::vector<std::string> bpf_cflags(const Config& c) {
  std::vector<std::string> f;
  if (c.stacks == 0) f.push_back("-DNO_STACKS");
  else f.push_back("-DSTACK_ENTRIES=" + std::to_string(c.stack_storage_size));
  return f;
}

// --- rendering --------------------------------------------------------------------------

namespace {

nlohmann::json lock_json(const LockHold& l) {
  nlohmann::json stacks = nlohmann::json::array();
  for (const auto& s : l.stacks)
    stacks.push_back({{"frames", s.missing ? nlohmann::json::array({"[Missed User Stack]"})
                                           : nlohmann::json(s.frames)},
                      {"count", s.count},
                      {"total_hold_ns", s.total_ns},
                      {"max_hold_ns", s.max_ns}});
  return {{"pid", l.pid},
          {"comm", l.comm},
          {"addr", l.addr},
          {"addr_hex", hex_addr(l.addr)},
          {"symbol", l.symbol},
          {"count", l.count},
          {"total_hold_ns", l.total_ns},
          {"avg_hold_ns", l.hist.mean()},
          {"max_hold_ns", l.max_ns},
          {"p50_ns", l.hist.percentile(50)},
          {"p95_ns", l.hist.percentile(95)},
          {"p99_ns", l.hist.percentile(99)},
          {"hist", l.hist.to_json()},
          {"stacks", stacks}};
}

}  // namespace

void render(std::ostream& os, const Config& c, std::vector<LockHold> locks, const DataQuality& dq,
            uint64_t interval_ns, bool final) {
  Table<LockHold> t(summary_columns());
  t.set_sort(c.sort);
  if (!c.fields.empty()) t.set_fields(c.fields);
  t.set_entries(c.entries);
  t.sort(locks);
  const size_t shown = t.shown_rows(locks);
  if (c.json) {
    nlohmann::json base = {{"time_ns", realtime_ns()}, {"interval_ns", interval_ns}, {"final", final}};
    for (size_t i = 0; i < shown; ++i) {
      nlohmann::json rec = {{"type", "pmheld_lock"}};
      rec.update(base);
      rec.update(lock_json(locks[i]));
      rec["data_quality"] = dq.to_json();
      emit_json(os, rec);
    }
    uint64_t holds = 0, total = 0;
    for (const auto& l : locks) holds += l.count, total += l.total_ns;
    nlohmann::json sum = {{"type", "pmheld_summary"}};
    sum.update(base);
    sum.update({{"locks", locks.size()},
                {"locks_shown", shown},
                {"holds", holds},
                {"total_hold_ns", total},
                {"data_quality", dq.to_json()}});
    emit_json(os, sum);
    return;
  }
  if (c.timestamp) os << clock_hms() << "\n";
  if (locks.empty()) {
    os << "no mutex holds ended in this interval\n";
  } else {
    t.print_text(os, locks);
    for (size_t i = 0; i < shown && (!c.no_hist || c.stacks); ++i) {
      const LockHold& l = locks[i];
      os << "\n" << lock_name(l) << (l.symbol.empty() ? "" : " (" + hex_addr(l.addr) + ")") << " in "
         << (l.comm.empty() ? "[exited]" : l.comm) << " (" << l.pid << "): " << l.count << " holds, total " << fmt_ns(l.total_ns) << ", p50 "
         << fmt_ns(l.hist.percentile(50)) << ", p99 " << fmt_ns(l.hist.percentile(99)) << ", max "
         << fmt_ns(l.max_ns) << "\n";
      if (!c.no_hist) print_log2_hist(os, l.hist.log2_slots(), "nsecs");
      for (size_t k = 0; k < l.stacks.size() && k < c.stacks; ++k) {
        const StackHold& s = l.stacks[k];
        os << "  stack " << k + 1 << ": holds " << s.count << ", total " << fmt_ns(s.total_ns)
           << ", max " << fmt_ns(s.max_ns) << "; total hold in ns below\n";
        Stack st;
        st.want_kernel = false;
        st.user_missing = s.missing;
        st.user = s.frames;
        print_stack_multiline(os, st, l.comm, l.pid, s.total_ns);
      }
      if (l.stacks.size() > c.stacks && c.stacks)
        os << "    (" << l.stacks.size() - c.stacks << " more stacks)\n";
    }
    if (shown < locks.size()) os << "\n(" << locks.size() - shown << " more locks; see -n)\n";
  }
  if (!dq.clean() || final) os << dq.to_text() << "\n";
  os << lost_stacks_warning(c, dq);
  os.flush();
}

std::string lost_stacks_warning(const Config& c, const DataQuality& dq) {
  if (!dq.lost_stacks) return "";
  // The stack table keeps every distinct stack for the whole run (stat keys refer to
  // them across intervals), so only a larger table helps, not reporting more often.
  return "warning: " + std::to_string(dq.lost_stacks) +
         " acquiring stacks were lost (stack table full or hash collision); try "
         "--stack-storage-size " +
         std::to_string(std::min<uint64_t>(c.stack_storage_size * 4, 262144)) + "\n";
}

// --- tracing ----------------------------------------------------------------------------

namespace {

std::string pid_list_text(const std::vector<uint32_t>& pids) {
  std::string s;
  for (auto p : pids) s += (s.empty() ? "" : ", ") + std::to_string(p) + " (" + proc_comm(p) + ")";
  return s;
}

class Collector {
 public:
  Collector(BpfSession& s, const Config& c) : s_(s), c_(c) {}

  void remember(uint32_t pid) {
    if (comms_.count(pid)) return;
    comms_[pid] = proc_comm(pid);
    sym_.remember(pid);
  }

  // System-wide mode: snapshot the names and symbols of processes as soon as they hold
  // a lock, so short-lived ones are still named after they exit.
  void remember_new_pids() {
    auto stats = s_.bpf().get_hash_table<pmheld_stat_key, pmheld_stat>("stats");
    for (const auto& [k, v] : stats.get_table_offline()) remember(k.tgid);
  }

  // Moves the interval's holds out of the maps into per-lock reports. Each stats/hist
  // entry is taken with an atomic lookup-and-delete, so a hold that ends while the
  // report is built lands in this report or the next, never in neither. Counters are
  // cumulative in BPF (never reset from here); a report shows their deltas.
  std::vector<LockHold> collect(DataQuality& dq) {
    auto& bpf = s_.bpf();
    auto stats = bpf.get_hash_table<pmheld_stat_key, pmheld_stat>("stats");
    auto hist = bpf.get_hash_table<pmheld_hist_key, uint64_t>("hist");
    auto held = bpf.get_hash_table<pmheld_held_key, pmheld_held>("held");
    auto counters = bpf.get_array_table<uint64_t>("counters");
    auto st = drain_hash<pmheld_stat_key, pmheld_stat>(stats);
    auto hs = drain_hash<pmheld_hist_key, uint64_t>(hist);

    uint64_t cnt[PMHELD_NCOUNTERS] = {};
    for (int i = 0; i < PMHELD_NCOUNTERS; ++i) {
      uint64_t v = 0;
      counters.get_value(i, v);
      cnt[i] = deltas_.delta(i, v);
    }
    dq.unmatched_end = cnt[PMHELD_C_UNMATCHED_END];
    // Acquisitions whose stack id failed in BPF; stacks found missing from the table
    // while resolving are added below by resolve_stack.
    dq.lost_stacks = cnt[PMHELD_C_LOST_STACKS];
    dq.map_full = cnt[PMHELD_C_MAP_FULL];
    dq.unmatched_begin = held.get_table_offline().size();  // holds still in progress
    dq.extra["reacquired_without_unlock"] = cnt[PMHELD_C_REACQUIRED];
    dq.extra["cond_waits"] = cnt[PMHELD_C_COND_WAITS];
    dq.extra["failed_locks"] = cnt[PMHELD_C_FAILED_LOCKS];

    std::map<std::pair<uint32_t, uint64_t>, LockHold> locks;
    for (const auto& [k, v] : hs) {
      auto& l = locks[{k.tgid, k.lock}];
      l.hist.add_bucket(k.bucket, v);
    }
    std::unique_ptr<ebpf::BPFStackTable> stacks;
    if (c_.stacks) stacks = std::make_unique<ebpf::BPFStackTable>(bpf.get_stack_table("stacks"));
    for (const auto& [k, v] : st) {
      auto& l = locks[{k.tgid, k.lock}];
      l.count += v.count;
      l.total_ns += v.total_ns;
      l.max_ns = std::max<uint64_t>(l.max_ns, v.max_ns);
      if (!stacks) continue;
      remember(k.tgid);
      StackHold sh;
      sh.count = v.count, sh.total_ns = v.total_ns, sh.max_ns = v.max_ns;
      const uint64_t lost_before = dq.lost_stacks;
      Stack stk = resolve_stack(*stacks, sym_, k.tgid, k.stack_id, -1, StackParts{true, false}, &dq);
      // A failed id was already counted by BPF, once per acquisition: count only
      // ids that were valid but whose frames are gone from the table.
      if (k.stack_id < 0) dq.lost_stacks = lost_before;
      sh.missing = k.stack_id < 0 || stk.user_missing;
      sh.frames = stk.user;
      l.stacks.push_back(std::move(sh));
    }
    std::vector<LockHold> out;
    for (auto& [key, l] : locks) {
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
  CounterDeltas deltas_;
};

}  // namespace

Status run(const Config& c) {
  auto flags = bpf_cflags(c);
  if (c.ebpf) {
    std::cout << ebpf_listing(bpf_text(), flags);
    return std::nullopt;
  }
  if (auto st = preflight({})) return st;

  // Locate and resolve everything before loading BPF, so bad targets fail fast.
  const std::vector<PthreadFn> fns = {PthreadFn::MutexLock,     PthreadFn::MutexTrylock,
                                      PthreadFn::MutexTimedlock, PthreadFn::MutexClocklock,
                                      PthreadFn::MutexUnlock,   PthreadFn::CondWait,
                                      PthreadFn::CondTimedwait, PthreadFn::CondClockwait};
  struct Target {
    PthreadLib lib;
    std::vector<ProbePoint> points;
  };
  std::vector<Target> targets;
  std::vector<uint32_t> pids = c.pids.empty() ? std::vector<uint32_t>{0} : c.pids;
  for (uint32_t pid : pids) {
    auto lib = find_pthread_lib(pid);
    if (!lib) return Error{lib.error()};
    auto pts = resolve_pthread_probes(*lib, fns, ProbeOptions{c.at_symbol});
    if (!pts) return Error{pts.error()};
    targets.push_back({*lib, *pts});
  }
  const std::vector<PthreadHandler> handlers = {
      {PthreadFn::MutexLock, "lock_entry", "lock_return"},
      {PthreadFn::MutexTrylock, "lock_entry", "lock_return"},
      {PthreadFn::MutexTimedlock, "lock_entry", "lock_return"},
      {PthreadFn::MutexClocklock, "lock_entry", "lock_return"},
      {PthreadFn::MutexUnlock, "unlock_entry", ""},
      {PthreadFn::CondWait, "cond_entry", "cond_return"},
      {PthreadFn::CondTimedwait, "cond_entry", "cond_return"},
      {PthreadFn::CondClockwait, "cond_entry", "cond_return"},
  };

  auto s = BpfSession::load(bpf_text(), flags);
  if (!s) return Error{s.error()};
  auto& session = *s.value();
  Collector col(session, c);
  for (const auto& t : targets) {
    if (auto st = attach_pthread_probes(session, t.lib, t.points, handlers)) return st;
    if (t.lib.pid > 0) col.remember(static_cast<uint32_t>(t.lib.pid));
    if (c.verbose)
      for (const auto& p : t.points)
        std::cerr << "pmheld: probe " << t.lib.display << ":" << describe_probe_point(p) << "\n";
  }
  if (!c.json) {
    std::cout << "Tracing pthread mutex hold times in "
              << (c.pids.empty() ? std::string("every process") : "PID " + pid_list_text(c.pids))
              << "... Hit Ctrl-C to end." << std::endl;
  }

  uint64_t last = monotonic_ns();
  std::vector<uint32_t> exited;
  RunHooks hooks;
  hooks.report = [&](bool final) {
    DataQuality dq;
    auto locks = col.collect(dq);
    uint64_t now = monotonic_ns();
    if (!c.json) std::cout << "\n";
    render(std::cout, c, std::move(locks), dq, now - last, final);
    last = now;
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
  hooks.should_stop = [&]() {
    if (c.pids.empty()) return false;
    for (auto p : c.pids)
      if (proc_running(p)) return false;
    exited = c.pids;
    return true;
  };
  run_loop(c.schedule, hooks);
  if (!exited.empty())
    std::cerr << "pmheld: traced process" << (exited.size() > 1 ? "es" : "") << " exited; "
              << "final report printed, all probes detached" << std::endl;
  return std::nullopt;
}

}  // namespace pmheld
