#include "tools/lockstat/lockstat.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <tuple>

#include "common/bpf_session.h"
#include "common/btf.h"
#include "common/cli.h"
#include "common/embedded.h"
#include "common/filters.h"
#include "common/table.h"

static_assert(sizeof(lockstat_key) == 40, "lockstat_key layout shared with BPF");
static_assert(sizeof(lockstat_val) == 32, "lockstat_val layout shared with BPF");
static_assert(sizeof(lockstat_hkey) == 24, "lockstat_hkey layout shared with BPF");
static_assert(sizeof(lockstat_comm) == 16, "lockstat_comm layout shared with BPF");

namespace bpfdiag {
extern const EmbeddedFile kBpf_lockstat[];
}

namespace lockstat {
using namespace bpfdiag;

const char kHelp[] = R"(lockstat - lock contention in user space and the kernel, ranked per lock.

USAGE: lockstat [options] [-p PID] [-L LOCK] [-K|-U] [--uprobes] [-t] [-j] [interval [count]]

Measures how long threads wait for locks, per lock: futex waits in user space
(only contended acquisitions reach the kernel, so uncontended locks cost
nothing; works for glibc mutexes and any runtime that blocks on futexes) and
the kernel's own locks (lock:contention_begin/end: spinlocks, rwlocks, rwsems,
mutexes). Each lock is named by its symbol when it has one (static
pthread_mutex_t cache_lock -> cache_lock; mmap_lock), with its top waiting
threads, call sites and a reading.

SOURCES:
  (default)            futex waits of every process, and kernel locks
  -U, --user-only      user-space locks only
  -K, --kernel-only    kernel locks only
      --uprobes        exact pthread mode: uprobes on pthread_mutex_lock,
                       _timedlock and _clocklock (in the target's libc.so.6,
                       or libpthread.so.0 before glibc 2.34) time EVERY lock
                       call, contended or not. Overhead: ~1.5 us of CPU per
                       lock call measured here (bench/lockstat.sh; bpftrace's
                       equivalent: ~9 us) when the probe sits on an emulated
                       instruction (-v says where), ~11 us more when
                       single-stepped; a tight lock loop ran 11-13x slower.
                       Use briefly, with -p.
FILTERS:
  -p, --pid PID[,PID]  only these processes
      --tid TID[,TID]  only these threads
  -L, --lock LOCK[,LOCK]  only these locks: an address (0x...) or a data
                       symbol (cache_lock; user symbols need -p), or mmap_lock
                       / siglock
  -m, --min-wait TIME  ignore waits shorter than TIME (default unit us: 100,
                       2ms)
REPORT:
  -t, --threads        one row per waiting thread instead of per lock
  -k, --sort KEY       sort by a field (default total); -KEY sorts ascending
  -F, --fields LIST    fields to show, in order; +LIST adds to the defaults
  -E, --entries N      show the top N rows (default 10; 0: all)
  -s, --top N          waiters and call sites shown under each lock (default 3)
  -H, --hist           a wait-time histogram per lock (or thread)
      --csv            the table as CSV (raw values in ns)
  -T, --timestamp      print a timestamp with each report
  -j, --json           NDJSON: one record per lock (or thread), then a summary
  -d, --duration TIME  trace for TIME (default unit s), then report
  -v, --verbose        say where the uprobes were placed
      --ebpf           print the BPF program and exit
  -h, --help           show this help
  interval [count]     report every interval seconds, count times

FIELDS:
  locks:   kind layer pid comm lock addr contended calls total max avg p50 p95
           p99 waiters (default: kind pid contended total max p50 p99 waiters
           lock)
  threads: pid tid comm contended calls total max avg p50 p95 p99 locks top_lock
  contended: waits that blocked (futex/kernel waits; --uprobes: calls that
  blocked);
  calls: lock calls timed (--uprobes only, else = contended).

EXAMPLES:
  lockstat                       # rank lock waits (futex + kernel) until Ctrl-C
  lockstat -p 1234 -d 5          # one process for 5 seconds
  lockstat -p 1234 -L cache_lock # only the lock named cache_lock in PID 1234
  lockstat -K -s 5 10            # kernel locks, 5 call sites each, 10 s
  lockstat -t -p 1234            # which threads wait the most
  lockstat -k max -E 5           # the 5 locks with the longest single wait
  lockstat -F +avg,p95 --csv     # CSV with average and p95 added
  lockstat -m 1ms -H             # waits >= 1 ms only, with histograms
  lockstat --uprobes -p 1234 5   # exact pthread_mutex_lock timing for 5 s
  lockstat -j -d 10              # NDJSON after 10 seconds
)";

namespace {

constexpr uint64_t kUs = 1000ULL, kMs = 1000000ULL, kSec = 1000000000ULL;

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// --- columns --------------------------------------------------------------------

std::function<std::string(const LockRow&)> ns_cell(uint64_t LockRow::*f) {
  return [f](const LockRow& r) { return fmt_ns(r.*f); };
}

Table<LockRow> lock_table(bool uprobes) {
  using R = LockRow;
  std::vector<Column<R>> cols = {
      {"kind", "KIND", -11, [](const R& r) { return Cell(r.kind); }},
      {"layer", "LAYER", -6, [](const R& r) { return Cell(r.layer); }, {}, false},
      {"pid", "PID", 6, [](const R& r) { return Cell(uint64_t(r.pid)); }},
      {"comm", "COMM", -15, [](const R& r) { return Cell(r.comm); }, {}, false},
      {"addr", "ADDR", -18, [](const R& r) { return Cell(hex(r.addr)); }, {}, false},
      {"contended", "CONT", 7, [](const R& r) { return Cell(r.contended); }},
      {"calls", "CALLS", 8, [](const R& r) { return Cell(r.calls); }, {}, uprobes},
      {"total", "TOTAL", 7, [](const R& r) { return Cell(r.total_ns); }, ns_cell(&R::total_ns)},
      {"max", "MAX", 7, [](const R& r) { return Cell(r.max_ns); }, ns_cell(&R::max_ns)},
      {"avg", "AVG", 7, [](const R& r) { return Cell(r.avg_ns()); },
       [](const R& r) { return fmt_ns(r.avg_ns()); }, false},
      {"p50", "P50", 7, [](const R& r) { return Cell(r.p50_ns); }, ns_cell(&R::p50_ns)},
      {"p95", "P95", 7, [](const R& r) { return Cell(r.p95_ns); }, ns_cell(&R::p95_ns), false},
      {"p99", "P99", 7, [](const R& r) { return Cell(r.p99_ns); }, ns_cell(&R::p99_ns)},
      {"waiters", "WTR", 3, [](const R& r) { return Cell(uint64_t(r.waiters.size())); }},
      {"lock", "LOCK", 0, [](const R& r) { return Cell(r.name()); }},
  };
  return Table<R>(cols);
}

std::function<std::string(const ThreadRow&)> tns_cell(uint64_t ThreadRow::*f) {
  return [f](const ThreadRow& r) { return fmt_ns(r.*f); };
}

Table<ThreadRow> thread_table(bool uprobes) {
  using R = ThreadRow;
  std::vector<Column<R>> cols = {
      {"pid", "PID", 7, [](const R& r) { return Cell(uint64_t(r.pid)); }},
      {"tid", "TID", 7, [](const R& r) { return Cell(uint64_t(r.tid)); }},
      {"comm", "COMM", -15, [](const R& r) { return Cell(r.comm); }},
      {"contended", "CONT", 7, [](const R& r) { return Cell(r.contended); }},
      {"calls", "CALLS", 8, [](const R& r) { return Cell(r.calls); }, {}, uprobes},
      {"total", "TOTAL", 7, [](const R& r) { return Cell(r.total_ns); }, tns_cell(&R::total_ns)},
      {"max", "MAX", 7, [](const R& r) { return Cell(r.max_ns); }, tns_cell(&R::max_ns)},
      {"avg", "AVG", 7, [](const R& r) { return Cell(r.avg_ns()); },
       [](const R& r) { return fmt_ns(r.avg_ns()); }, false},
      {"p50", "P50", 7, [](const R& r) { return Cell(r.p50_ns); }, tns_cell(&R::p50_ns), false},
      {"p95", "P95", 7, [](const R& r) { return Cell(r.p95_ns); }, tns_cell(&R::p95_ns), false},
      {"p99", "P99", 7, [](const R& r) { return Cell(r.p99_ns); }, tns_cell(&R::p99_ns)},
      {"locks", "LOCKS", 5, [](const R& r) { return Cell(uint64_t(r.locks)); }},
      {"top_lock", "TOP LOCK", 0, [](const R& r) { return Cell(r.top_lock); }},
  };
  return Table<R>(cols);
}

// Table configured from -k/-F/-E.
template <typename Row>
Status configure(Table<Row>& t, const Config& c) {
  if (!c.fields.empty())
    if (auto st = t.set_fields(c.fields)) return st;
  if (auto st = t.set_sort(c.sort)) return st;
  t.set_entries(c.entries);
  return std::nullopt;
}

Status parse_locks(const std::string& s, Config& c) {
  for (const auto& item : split_list(s)) {
    if (item.rfind("0x", 0) == 0 || item.rfind("0X", 0) == 0) {
      std::string digits = item.substr(2);
      if (digits.empty() || digits.size() > 16 || digits.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        return Error{"invalid lock address '" + item + "' (expected 0x followed by 1-16 hex digits)"};
      c.lock_addrs.push_back(std::stoull(digits, nullptr, 16));
    } else {
      bool ident = !item.empty() && !std::isdigit(static_cast<unsigned char>(item[0]));
      for (char ch : item)
        if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '.' && ch != ':') ident = false;
      if (!ident)
        return Error{"invalid lock '" + item + "' (expected an address like 0x7f12a0 or a symbol name)"};
      c.lock_names.push_back(item);
    }
  }
  if (c.lock_addrs.empty() && c.lock_names.empty()) return Error{"empty lock list for -L"};
  return std::nullopt;
}

}  // namespace

std::string LockRow::name() const { return symbol.empty() ? hex(addr) : symbol; }

Result<Config> parse_args(int argc, char** argv) {
  cxxopts::Options opts("lockstat");
  opts.add_options()("h,help", "")("j,json", "")("csv", "")("ebpf", "")("t,threads", "")(
      "T,timestamp", "")("H,hist", "")("uprobes", "")("K,kernel-only", "")("U,user-only", "")(
      "v,verbose", "")("p,pid", "", cxxopts::value<std::string>())(
      "tid", "", cxxopts::value<std::string>())("L,lock", "", cxxopts::value<std::string>())(
      "m,min-wait", "", cxxopts::value<std::string>())("k,sort", "", cxxopts::value<std::string>())(
      "F,fields", "", cxxopts::value<std::string>())("E,entries", "", cxxopts::value<std::string>())(
      "s,top", "", cxxopts::value<std::string>())("d,duration", "", cxxopts::value<std::string>());
  add_positionals(opts);
  auto r = parse_cli(opts, argc, argv);
  if (!r) return Error{r.error()};
  Config c;
  c.help = r->count("help");
  c.json = r->count("json");
  c.csv = r->count("csv");
  c.ebpf = r->count("ebpf");
  c.threads_view = r->count("threads");
  c.timestamp = r->count("timestamp");
  c.hist = r->count("hist");
  c.uprobes = r->count("uprobes");
  c.kernel_only = r->count("kernel-only");
  c.user_only = r->count("user-only");
  c.verbose = r->count("verbose");
  if (c.kernel_only && c.user_only) return Error{"-K (kernel only) and -U (user only) exclude each other"};
  if (c.uprobes && c.kernel_only) return Error{"--uprobes traces user-space locks; it cannot be combined with -K"};
  if (c.json && c.csv) return Error{"--json and --csv exclude each other"};
  if (auto p = opt_str(*r, "pid")) {
    auto v = parse_id_list(*p, "PID");
    if (!v) return Error{v.error()};
    c.pids = *v;
    // a PID that does not exist is bad input, not a runtime failure
    if (auto st = check_pids_exist(c.pids)) return *st;
  }
  if (auto p = opt_str(*r, "tid")) {
    auto v = parse_id_list(*p, "TID");
    if (!v) return Error{v.error()};
    c.tids = *v;
  }
  if (auto p = opt_str(*r, "lock"))
    if (auto st = parse_locks(*p, c)) return *st;
  if (auto p = opt_str(*r, "min-wait")) {
    auto v = parse_duration_ns(*p, "minimum wait", kUs, 0, 3600 * kSec);
    if (!v) return Error{v.error()};
    c.min_wait_ns = *v;
  }
  if (auto p = opt_str(*r, "sort")) c.sort = *p;
  if (auto p = opt_str(*r, "fields")) c.fields = *p;
  if (auto p = opt_str(*r, "entries")) {
    auto v = parse_uint(*p, "entries", 0, 1000000);
    if (!v) return Error{v.error()};
    c.entries = *v;
  }
  if (auto p = opt_str(*r, "top")) {
    auto v = parse_uint(*p, "top", 0, 1000);
    if (!v) return Error{v.error()};
    c.top = *v;
  }
  if (auto p = opt_str(*r, "duration")) {
    auto v = parse_duration_ns(*p, "duration", kSec, kMs, 86400 * kSec);
    if (!v) return Error{v.error()};
    c.schedule.duration_ns = *v;
  }
  if (auto st = parse_interval_count(positionals(*r), c.schedule)) return *st;
  // validate -k/-F against the view's columns now, so typos are usage errors
  if (c.threads_view) {
    auto t = thread_table(c.uprobes);
    if (auto st = configure(t, c)) return *st;
  } else {
    auto t = lock_table(c.uprobes);
    if (auto st = configure(t, c)) return *st;
  }
  return c;
}

std::string bpf_text() { return kBpf_lockstat[0].text; }

Result<std::vector<std::string>> bpf_cflags(const Config& c, bool btf) {
  std::vector<std::string> f;
  if (!c.kernel_only) {
    f.push_back(c.uprobes ? "-DUSER_PTHREAD" : "-DUSER_FUTEX");
    if (tracepoint_exists("syscalls:sys_enter_futex_wait")) f.push_back("-DHAVE_FUTEX_WAIT");
    if (tracepoint_exists("syscalls:sys_enter_futex_waitv")) f.push_back("-DHAVE_FUTEX_WAITV");
  }
  if (!c.user_only) f.push_back("-DKERNEL_LOCKS");
  f.push_back(id_filter_cflag("TGID_OK", c.pids));
  f.push_back(id_filter_cflag("TID_OK", c.tids));
  // symbolic names that are not addresses (mmap_lock, ...) are filtered after the fact;
  // the address map holds every address given (a kernel symbol can have several)
  if (!c.lock_addrs.empty() && c.lock_names.empty()) {
    f.push_back("-DFILTER_ADDRS");
    f.push_back("-DADDR_FILTER_ENTRIES=" + std::to_string(c.lock_addrs.size()));
  }
  f.push_back("-DMIN_WAIT_NS=" + std::to_string(c.min_wait_ns) + "ULL");
  f.push_back("-DSELF_PID=" + std::to_string(getpid()));  // never trace ourselves
  f.push_back("-DSTATS_ENTRIES=16384");
  f.push_back("-DHIST_ENTRIES=65536");
  f.push_back("-DSTACK_ENTRIES=16384");
  f.push_back("-DSTART_ENTRIES=65536");
  if (btf && !c.kernel_only && !c.uprobes) {
    // futex mode's user-stack scan: the user registers at the top of the kernel stack
    auto k = kernel_btf();
    if (k) {
      auto st = (*k)->field_offset("task_struct", {"stack"});
      if (st) {
        f.push_back("-DOFF_TASK_STACK=" + std::to_string(*st));
        f.push_back("-DTHREAD_SIZE=16384");  // x86-64 default; checked in BPF via orig_ax
      }
    }
  }
  if (btf && !c.user_only) {
    auto k = kernel_btf();
    if (k) {
      // optional: without them kernel locks are still reported, just not named
      auto mm = (*k)->field_offset("task_struct", {"mm"});
      auto ml = (*k)->field_offset("mm_struct", {"mmap_lock", "mmap_sem"});
      uint32_t msz = (*k)->field_size("mm_struct", "mmap_lock");
      if (mm && ml && msz) {
        f.push_back("-DOFF_TASK_MM=" + std::to_string(*mm));
        f.push_back("-DOFF_MM_MMAP_LOCK=" + std::to_string(*ml));
        f.push_back("-DMMAP_LOCK_SIZE=" + std::to_string(std::min<uint32_t>(msz, 4095)));
      }
      auto sh = (*k)->field_offset("task_struct", {"sighand"});
      auto sl = (*k)->field_offset("sighand_struct", {"siglock"});
      if (sh && sl) {
        f.push_back("-DOFF_TASK_SIGHAND=" + std::to_string(*sh));
        f.push_back("-DOFF_SIGHAND_SIGLOCK=" + std::to_string(*sl));
      }
    }
  }
  return f;
}

// --- classification -----------------------------------------------------------------

std::string kernel_lock_kind(uint32_t flags) {
  uint32_t f = flags & 0xffff;
  bool rd = f & LS_LCB_READ, wr = f & LS_LCB_WRITE;
  std::string rw = rd && wr ? "" : rd ? ":R" : wr ? ":W" : "";
  if (f & LS_LCB_MUTEX) return "mutex";
  if (f & LS_LCB_PERCPU) return "pcpu-sem" + rw;
  if (f & LS_LCB_RT) return (rd || wr) ? "rwlock-rt" + rw : "rt-mutex";
  if (f & LS_LCB_SPIN) return (rd || wr) ? "rwlock" + rw : "spinlock";
  if (rd || wr) return "rwsem" + rw;
  return "unknown";
}

std::string user_lock_kind(uint32_t kind, uint32_t flags) {
  if (kind == LS_KIND_PTHREAD) return "pthread";
  if (flags & LS_FUTEX_PI) return "futex-pi";
  if (flags & LS_FUTEX_LOCKWORD) return "futex-mutex";
  return "futex";
}

bool is_kernel_lock_frame(const std::string& frame) {
  static const char* kPrefixes[] = {"_raw_",      "__raw_",      "do_raw_",      "queued_",
                                    "native_queued", "__pv_queued", "pv_queued",  "mutex_lock",
                                    "__mutex_lock", "mutex_spin",  "down_",       "__down",
                                    "rwsem_",     "__rwsem",     "rt_mutex",     "__rt_mutex",
                                    "rt_spin",    "rt_read",     "rt_write",     "percpu_down",
                                    "__percpu_down", "osq_lock",
                                    "rwbase_", "raw_spin_rq_", "_raw_spin_rq_"};
  for (const char* p : kPrefixes)
    if (frame.rfind(p, 0) == 0) return true;
  return false;
}

std::string reading(const LockRow& r) {
  size_t n = r.waiters.size();
  if (!r.contended) return "";
  std::string p50 = fmt_ns(r.p50_ns), mx = fmt_ns(r.max_ns);
  if (r.p50_ns >= kMs && n <= 2)
    return "long hold: " + std::to_string(n) + (n == 1 ? " waiter waits" : " waiters wait") +
           " long (p50 " + p50 + ", max " + mx + "); the holder keeps it long";
  if (n >= 3 && r.p50_ns < kMs)
    return "convoy: " + std::to_string(n) + " threads queue with moderate waits (p50 " + p50 +
           "); shorten or split the critical section";
  if (n >= 3)
    return "convoy behind long holds: " + std::to_string(n) + " threads wait long (p50 " + p50 +
           ", max " + mx + ")";
  return "light: " + std::to_string(n) + (n == 1 ? " waiter" : " waiters") + ", p50 " + p50;
}

// --- aggregation --------------------------------------------------------------------

namespace {

struct GroupKey {
  bool kernel;
  uint32_t pid;
  uint64_t addr;
  bool operator<(const GroupKey& o) const {
    return std::tie(kernel, pid, addr) < std::tie(o.kernel, o.pid, o.addr);
  }
};

GroupKey group_of(uint32_t kind, uint32_t pid, uint64_t addr) {
  bool k = kind == LS_KIND_KERNEL;
  return {k, k ? 0 : pid, addr};
}

bool name_filter_pass(const Config& c, uint64_t addr, const std::string& symbol) {
  if (c.lock_addrs.empty() && c.lock_names.empty()) return true;
  if (std::find(c.lock_addrs.begin(), c.lock_addrs.end(), addr) != c.lock_addrs.end()) return true;
  return !symbol.empty() &&
         std::find(c.lock_names.begin(), c.lock_names.end(), symbol) != c.lock_names.end();
}

std::string comm_of(const Snapshot& s, uint32_t tid) {
  auto it = s.comms.find(tid);
  return it == s.comms.end() ? "?" : it->second;
}

template <typename T>
void pct(T& row) {
  row.p50_ns = row.hist.percentile(50);
  row.p95_ns = row.hist.percentile(95);
  row.p99_ns = row.hist.percentile(99);
}

}  // namespace

std::vector<LockRow> build_locks(const Snapshot& s, const Names& n, const Config& c) {
  std::map<GroupKey, LockRow> groups;
  std::map<GroupKey, uint32_t> flags;
  std::map<GroupKey, std::set<uint32_t>> pids;
  std::map<GroupKey, std::map<uint32_t, WaiterRow>> waiters;
  std::map<GroupKey, std::map<std::string, SiteRow>> sites;
  for (const auto& w : s.waits) {
    GroupKey g = group_of(w.key.kind, w.key.pid, w.key.addr);
    LockRow& r = groups[g];
    r.addr = w.key.addr;
    r.pid = g.pid;
    r.layer = g.kernel ? "kernel" : "user";
    flags[g] |= w.key.flags;
    if (g.kernel) r.kind = "";
    else r.kind = user_lock_kind(w.key.kind, flags[g]);
    pids[g].insert(w.key.pid);
    r.contended += w.val.blocked;
    r.calls += w.val.count;
    r.total_ns += w.val.total_ns;
    r.max_ns = std::max<uint64_t>(r.max_ns, w.val.max_ns);
    auto& wr = waiters[g][w.key.tid];
    wr.tid = w.key.tid;
    wr.contended += w.val.blocked;
    wr.total_ns += w.val.total_ns;
    wr.max_ns = std::max<uint64_t>(wr.max_ns, w.val.max_ns);
    if (c.top) {
      std::vector<std::string> frames = n.frames ? n.frames(w.key) : std::vector<std::string>{};
      std::string site = n.site ? n.site(w.key, frames) : "";
      if (site.empty()) site = "[unknown]";
      auto& sr = sites[g][site];
      if (sr.stack.empty()) sr.stack = frames;
      sr.site = site;
      sr.contended += w.val.blocked;
      sr.total_ns += w.val.total_ns;
    }
  }
  for (const auto& [hk, cnt] : s.hist) {
    auto it = groups.find(group_of(hk.kind, hk.pid, hk.addr));
    if (it != groups.end()) it->second.hist.add_bucket(hk.bucket, cnt);
  }
  std::vector<LockRow> out;
  for (auto& [g, r] : groups) {
    uint32_t f = flags[g];
    if (g.kernel) {
      r.kind = kernel_lock_kind(f);
      if (f & LS_KID_MMAP_LOCK) {
        uint32_t off = f >> LS_KID_OFFSET_SHIFT;
        r.symbol = off ? "mmap_lock+" + std::to_string(off) : "mmap_lock";
      }
      else if (f & LS_KID_SIGLOCK) r.symbol = "siglock";
      else if (n.lock_symbol) r.symbol = n.lock_symbol(0, r.addr);
      if (pids[g].size() == 1) r.pid = *pids[g].begin();
    } else if (n.lock_symbol) {
      r.symbol = n.lock_symbol(r.pid, r.addr);
    }
    if (!name_filter_pass(c, r.addr, r.symbol)) continue;
    r.hist.set_exact_sum(r.total_ns);
    r.hist.set_exact_max(r.max_ns);
    pct(r);
    for (auto& [tid, wr] : waiters[g]) {
      wr.comm = comm_of(s, tid);
      r.waiters.push_back(wr);
    }
    auto by_total = [](const auto& a, const auto& b) { return a.total_ns > b.total_ns; };
    std::stable_sort(r.waiters.begin(), r.waiters.end(), by_total);
    for (auto& [name, sr] : sites[g]) r.sites.push_back(sr);
    std::stable_sort(r.sites.begin(), r.sites.end(), by_total);
    r.comm = r.pid ? comm_of(s, r.pid) : "";
    if (r.comm == "?" && !r.waiters.empty()) r.comm = r.waiters.front().comm;
    out.push_back(std::move(r));
  }
  auto t = lock_table(c.uprobes);
  if (!configure(t, c)) t.sort(out);
  return out;
}

std::vector<ThreadRow> build_threads(const Snapshot& s, const Names& n, const Config& c) {
  Config lc = c;
  lc.threads_view = false;
  lc.sort = "total";
  lc.fields.clear();
  lc.entries = 0;
  lc.top = 0;
  auto locks = build_locks(s, n, lc);
  std::map<GroupKey, std::string> lock_names;
  for (auto& l : locks) {
    GroupKey g{l.layer == "kernel", l.layer == "kernel" ? 0 : l.pid, l.addr};
    lock_names[g] = l.name();
  }
  std::map<uint32_t, ThreadRow> rows;
  std::map<uint32_t, std::map<std::string, uint64_t>> per_lock;
  for (const auto& w : s.waits) {
    GroupKey g = group_of(w.key.kind, w.key.pid, w.key.addr);
    auto ln = lock_names.find(g);
    if (ln == lock_names.end()) continue;
    auto& r = rows[w.key.tid];
    r.pid = w.key.pid;
    r.tid = w.key.tid;
    r.contended += w.val.blocked;
    r.calls += w.val.count;
    r.total_ns += w.val.total_ns;
    r.max_ns = std::max<uint64_t>(r.max_ns, w.val.max_ns);
    per_lock[w.key.tid][ln->second] += w.val.total_ns;
  }
  for (const auto& [hk, cnt] : s.hist) {
    auto it = rows.find(hk.tid);
    if (it != rows.end() && lock_names.count(group_of(hk.kind, hk.pid, hk.addr)))
      it->second.hist.add_bucket(hk.bucket, cnt);
  }
  std::vector<ThreadRow> out;
  for (auto& [tid, r] : rows) {
    r.comm = comm_of(s, tid);
    r.locks = per_lock[tid].size();
    uint64_t best = 0;
    for (auto& [name, tot] : per_lock[tid])
      if (tot >= best) best = tot, r.top_lock = name;
    r.hist.set_exact_sum(r.total_ns);
    r.hist.set_exact_max(r.max_ns);
    pct(r);
    out.push_back(std::move(r));
  }
  auto t = thread_table(c.uprobes);
  if (!configure(t, c)) t.sort(out);
  return out;
}

// --- rendering ----------------------------------------------------------------------

namespace {

std::string site_chain(const SiteRow& s) {
  std::string out = s.site;
  // the call site, then up to two outer frames after it
  auto it = std::find(s.stack.begin(), s.stack.end(), s.site);
  if (it == s.stack.end()) return out;
  int more = 0;
  for (++it; it != s.stack.end() && more < 2; ++it, ++more) out += " <- " + *it;
  return out;
}

nlohmann::json dq_json(const Snapshot& s) { return s.dq.to_json(); }

void render_lock_details(std::ostream& os, const Config& c, const LockRow& r) {
  char line[256];
  std::string rd = reading(r);
  if (!rd.empty()) os << "    " << rd << "\n";
  for (size_t i = 0; i < r.waiters.size() && i < c.top; ++i) {
    const auto& w = r.waiters[i];
    std::snprintf(line, sizeof line, "    waiter %7u %-15s %8llu %7s max %s\n", w.tid, w.comm.c_str(),
                  static_cast<unsigned long long>(w.contended), fmt_ns(w.total_ns).c_str(),
                  fmt_ns(w.max_ns).c_str());
    os << line;
  }
  for (size_t i = 0; i < r.sites.size() && i < c.top; ++i) {
    const auto& s = r.sites[i];
    std::snprintf(line, sizeof line, "    site   %8llu %7s  ", static_cast<unsigned long long>(s.contended),
                  fmt_ns(s.total_ns).c_str());
    os << line << site_chain(s) << "\n";
  }
  if (c.hist) {
    os << "\n";
    print_log2_hist(os, r.hist.log2_slots(), "nsecs");
  }
}

}  // namespace

void render(std::ostream& os, std::ostream& err, const Config& c, const Snapshot& s, const Names& n,
            uint64_t interval_ns, bool final) {
  uint64_t now = realtime_ns();
  if (c.threads_view) {
    auto rows = build_threads(s, n, c);
    auto t = thread_table(c.uprobes);
    configure(t, c);
    if (c.json) {
      for (size_t i = 0; i < t.shown_rows(rows); ++i) {
        const auto& r = rows[i];
        nlohmann::json j = {{"type", "thread"},       {"time_ns", now},
                            {"interval_ns", interval_ns}, {"final", final},
                            {"pid", r.pid},           {"tid", r.tid},
                            {"comm", r.comm},         {"contended", r.contended},
                            {"calls", r.calls},       {"total_wait_ns", r.total_ns},
                            {"max_wait_ns", r.max_ns}, {"avg_wait_ns", r.avg_ns()},
                            {"p50_ns", r.p50_ns},     {"p95_ns", r.p95_ns},
                            {"p99_ns", r.p99_ns},     {"locks", r.locks},
                            {"top_lock", r.top_lock}, {"data_quality", dq_json(s)}};
        if (c.hist) j["hist"] = r.hist.to_json();
        emit_json(os, j);
      }
      emit_json(os, {{"type", "summary"}, {"view", "threads"}, {"time_ns", now},
                     {"interval_ns", interval_ns}, {"final", final}, {"rows", rows.size()},
                     {"data_quality", dq_json(s)}});
      return;
    }
    if (c.csv) {
      t.print_csv(os, rows);
      os.flush();
      err << s.dq.to_text() << std::endl;  // the CSV stays pure
      return;
    }
    if (c.timestamp) os << clock_hms() << "\n";
    if (rows.empty()) os << "No lock waits seen.\n";
    else t.print_text(os, rows);
    if (c.hist)
      for (size_t i = 0; i < t.shown_rows(rows); ++i) {
        os << "\ntid " << rows[i].tid << " (" << rows[i].comm << ")\n";
        print_log2_hist(os, rows[i].hist.log2_slots(), "nsecs");
      }
    os << s.dq.to_text() << "\n";
    os.flush();
    return;
  }

  auto rows = build_locks(s, n, c);
  auto t = lock_table(c.uprobes);
  configure(t, c);
  if (c.json) {
    uint64_t total = 0, cont = 0;
    for (auto& r : rows) total += r.total_ns, cont += r.contended;
    for (size_t i = 0; i < t.shown_rows(rows); ++i) {
      const auto& r = rows[i];
      nlohmann::json threads = nlohmann::json::array(), sites = nlohmann::json::array();
      const size_t list_max = std::max<size_t>(c.top, 10);  // JSON lists: at least 10
      for (size_t k = 0; k < r.waiters.size() && k < list_max; ++k) {
        const auto& w = r.waiters[k];
        threads.push_back({{"tid", w.tid}, {"comm", w.comm}, {"contended", w.contended},
                           {"total_wait_ns", w.total_ns}, {"max_wait_ns", w.max_ns}});
      }
      for (size_t k = 0; k < r.sites.size() && k < list_max; ++k) {
        const auto& st = r.sites[k];
        sites.push_back({{"site", st.site}, {"stack", st.stack}, {"contended", st.contended},
                         {"total_wait_ns", st.total_ns}});
      }
      nlohmann::json j = {{"type", "lock"},
                          {"time_ns", now},
                          {"interval_ns", interval_ns},
                          {"final", final},
                          {"layer", r.layer},
                          {"kind", r.kind},
                          {"pid", r.pid},
                          {"comm", r.comm},
                          {"addr", r.addr},
                          {"addr_hex", hex(r.addr)},
                          {"symbol", r.symbol},
                          {"contended", r.contended},
                          {"calls", r.calls},
                          {"total_wait_ns", r.total_ns},
                          {"max_wait_ns", r.max_ns},
                          {"avg_wait_ns", r.avg_ns()},
                          {"p50_ns", r.p50_ns},
                          {"p95_ns", r.p95_ns},
                          {"p99_ns", r.p99_ns},
                          {"waiters", r.waiters.size()},
                          {"reading", reading(r)},
                          {"threads", threads},
                          {"callsites", sites},
                          {"data_quality", dq_json(s)}};
      if (c.hist) j["hist"] = r.hist.to_json();
      emit_json(os, j);
    }
    emit_json(os, {{"type", "summary"}, {"view", "locks"}, {"time_ns", now},
                   {"interval_ns", interval_ns}, {"final", final}, {"locks", rows.size()},
                   {"contended", cont}, {"total_wait_ns", total}, {"data_quality", dq_json(s)}});
    return;
  }
  if (c.csv) {
    t.print_csv(os, rows);
    os.flush();
    err << s.dq.to_text() << std::endl;  // the CSV stays pure
    return;
  }
  if (c.timestamp) os << clock_hms() << "\n";
  if (rows.empty()) {
    os << "No lock waits seen.\n";
  } else {
    os << t.header_line() << "\n";
    for (size_t i = 0; i < t.shown_rows(rows); ++i) {
      os << t.row_line(rows[i]) << "\n";
      render_lock_details(os, c, rows[i]);
    }
    if (t.shown_rows(rows) < rows.size())
      os << "(" << rows.size() - t.shown_rows(rows) << " more locks; -E 0 shows all)\n";
  }
  os << s.dq.to_text() << "\n";
  os.flush();
}

}  // namespace lockstat
