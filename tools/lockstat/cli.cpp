#include "tools/lockstat/internal.h"

#include <bpf/libbpf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <tuple>

#include "common/bpf_session.h"
#include "common/bpf_text.h"
#include "common/btf.h"
#include "common/cli.h"
#include "common/options.h"
#include "common/tool_config.h"
#include "common/embedded.h"
#include "common/filters.h"
#include "common/table.h"
#include "common/unwind_maps.h"
#include "common/registry.h"

static_assert(sizeof(lockstat_key) == 48, "lockstat_key layout shared with BPF");
static_assert(sizeof(lockstat_val) == 40, "lockstat_val layout shared with BPF");
static_assert(sizeof(lockstat_hkey) == 32, "lockstat_hkey layout shared with BPF");
static_assert(sizeof(lockstat_comm) == 16, "lockstat_comm layout shared with BPF");
static_assert(sizeof(lockstat_wkey) == 16, "lockstat_wkey layout shared with BPF");

namespace bpfdiag {
extern const EmbeddedFile kBpf_lockstat[];
}

namespace lockstat {
using namespace bpfdiag;

namespace {

const char kDescription[] = R"(Measures how long threads wait for locks, per lock: futex waits in user space
(only contended acquisitions reach the kernel, so uncontended locks cost
nothing; works for glibc mutexes and any runtime that blocks on futexes) and
the kernel's own locks (lock:contention_begin/end: spinlocks, rwlocks, rwsems,
mutexes). Each lock is named by its symbol when it has one (static
pthread_mutex_t cache_lock -> cache_lock; mmap_lock; rq_lock), with its top
waiting threads, call sites and a reading.

Not every futex wait is lock contention. Waits are told apart by what they
are: glibc mutexes wait with FUTEX_WAIT on a word of 2; condition variables
and semaphores with FUTEX_WAIT_BITSET; a wait that runs to its timeout is a
sleep or poll; a wait ended by threads that never wait on it is idle
(waiting for work); CPython's GIL (_PyRuntime, take_gil) is named. Only lock
contention is ranked; the others are listed apart, never advised as locks.

Go programs (-p, amd64, Go >= 1.17, with a symbol table): goroutines park in
the Go runtime, not on a futex each; lockstat times each park in
runtime.gopark (kind go-park) and names it as the runtime does (its
waitReason: sync.Mutex.Lock, semacquire, chan receive) at the program's own
call site. A sync.Mutex wait is contention, a channel receive is not. Past
10000 parks/s (a channel ping-pong) goroutine tracing stops (go_rate_guard).

FIELDS (--sort, --fields, CSV and JSON use these names; short names in ()):
  locks:   kind layer pid comm addr wait_count (contended) calls
           wait_total_ns (total) wait_max_ns (max) wait_avg_ns (avg)
           wait_p50_ns (p50) wait_p90_ns (p90) wait_p99_ns (p99)
           thread_count (waiters) lock
  threads: pid tid comm wait_count (contended) calls wait_total_ns (total)
           wait_max_ns (max) wait_avg_ns (avg) wait_p50_ns (p50)
           wait_p90_ns (p90) wait_p99_ns (p99) lock_count (locks) top_lock
  wait_count: waits that blocked (--uprobes: calls that blocked); calls: lock
  calls timed (--uprobes only, else = wait_count); wait_avg_ns = total/calls.)";

const char kExamples[] = R"(  lockstat                       # rank lock waits (futex + kernel) until Ctrl-C
  lockstat -p 1234 -d 5          # one process for 5 seconds
  lockstat -p $(pidof myserver) -d 5  # a Go program: goroutine waits too
  lockstat -p 1234 -L cache_lock # only the lock named cache_lock in PID 1234
  lockstat -K -s 5 -d 10         # kernel locks, 5 call sites each, 10 s
  lockstat -P -p 1234            # which threads wait the most
  lockstat --container 3f2a9c1d8e7b -d 5  # lock waits inside one container
  lockstat -S max -n 5           # the 5 locks with the longest single wait
  lockstat --fields +avg,p90 --csv  # CSV with average and p90 added
  lockstat -m 1ms -H             # waits >= 1 ms only, with histograms
  lockstat --uprobes -p 1234 -d 5   # exact pthread_mutex_lock timing for 5 s
  lockstat -j -i 1 -c 10         # NDJSON, a report every second, 10 times
  lockstat -p 1234 -d 5 --pprof locks.pb.gz  # for go tool pprof
  lockstat -i 10 --prometheus /var/lib/node_exporter/lockstat.prom  # metrics
)";

ToolSpec make_spec() {
  return ToolSpec{
      "lockstat",
      "lock contention in user space and the kernel, ranked per lock.",
      kDescription,
      with_standard_options({
          OptionSpec{"U,user-only", "", "user-space locks only (futex waits)", "Sources"},
          OptionSpec{"K,kernel-only", "", "kernel locks only (lock:contention_begin/end)", "Sources"},
          OptionSpec{"uprobes", "",
                     "exact pthread mode: uprobes on pthread_mutex_lock,\n"
                     "_timedlock and _clocklock time EVERY lock call,\n"
                     "contended or not: ~1.5 us of CPU per call when the\n"
                     "probe sits on an emulated instruction (-v says\n"
                     "where), ~11 us more when single-stepped; it slows\n"
                     "the holders too (see the man page). Use briefly, -p.",
                     "Sources"},
          opt::pid(),
          opt::tid(),
          opt::cgroup(),
          opt::container(),
          opt::unwind(),
          OptionSpec{"L,lock", "LOCK[,LOCK]",
                     "only these locks: an address (0x...) or a data\n"
                     "symbol (cache_lock; user symbols need -p), or\n"
                     "mmap_lock / siglock",
                     "Filters"},
          opt::min("ignore waits shorter than TIME (default unit us:\n100, 2ms)"),
          opt::per_thread("one row per waiting thread instead of per lock"),
          opt::sort("sort by a field (default wait_total_ns); -KEY sorts\nascending"),
          opt::fields("fields to show, in order; +LIST adds to the defaults"),
          opt::entries("show the top N rows (default 10; 0: all)"),
          opt::stacks("waiters and call sites shown under each lock\n(default 3)"),
          OptionSpec{"H,hist", "", "a wait-time histogram per lock (or thread)", "Output"},
          opt::csv("the table as CSV (raw values in ns)"),
          opt::timestamp(),
          opt::json("NDJSON: lockstat.start, then per report one record per\n"
                    "lock (or thread) and a lockstat.summary"),
          opt::svg("write a flame graph of the waits at the contended\nlocks' call sites to FILE when the run ends"),
          opt::pprof("write the run's waits by call site to FILE as a\ngzip-compressed pprof profile (go tool pprof)"),
          opt::prometheus(),
          opt::listen(),
          OptionSpec{"map-entries", "N",
                     "BPF map size (waits per thread and lock; default:\n"
                     "from the target's thread count, at least 16384:\n"
                     "8 rows a thread, 2048 with --uprobes)",
                     "Output"},
      }, "say where the uprobes were placed"),
      kExamples,
      Positional::None};
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

const ToolSpec& spec() { return cached_spec<make_spec>(); }
const char* help_text() { return help_cstr(spec()); }

Result<Config> parse_args(int argc, char** argv) {
  Config c;
  CommonOptions o;
  auto raw = parse_into(spec(), argc, argv, c, &o);
  if (!raw) return Error{raw.error()};
  if (c.help) return c;
  const auto& r = *raw;
  auto cg = resolve_cgroup_options(o, c.pids);
  if (!cg) return Error{cg.error()};
  c.cgroup = *cg;
  c.hist = r.count("hist");
  c.uprobes = r.count("uprobes");
  c.kernel_only = r.count("kernel-only");
  c.user_only = r.count("user-only");
  if (c.kernel_only && c.user_only) return Error{"-K (kernel only) and -U (user only) exclude each other"};
  if (c.uprobes && c.kernel_only) return Error{"--uprobes traces user-space locks; it cannot be combined with -K"};
  if (auto p = opt_str(r, "lock"))
    if (auto st = parse_locks(*p, c)) return *st;
  auto uw = unwind_dwarf_option(r, !c.pids.empty() || !c.tids.empty());
  if (!uw) return Error{uw.error()};
  c.unwind_dwarf = *uw && !c.kernel_only;  // -K: no user stacks
  if (o.min_ns) c.min_wait_ns = *o.min_ns;
  if (auto p = opt_str(r, "map-entries")) {
    auto v = parse_uint(*p, "--map-entries", 1024, 1u << 22);
    if (!v) return Error{v.error()};
    c.map_entries = *v;
  }
  // validate --sort/--fields against the view's columns now, so typos are usage errors
  if (c.per_thread) {
    auto t = thread_table(c.uprobes);
    if (auto st = configure(t, c)) return *st;
  } else {
    auto t = lock_table(c.uprobes);
    if (auto st = configure(t, c)) return *st;
  }
  return c;
}

// The registry's entry (common/registry.h): the option table, the parser and what each
// mode attaches.
const ToolEntry& registry_entry() {
  static const ToolEntry e{"lockstat", &spec, &check_args<&parse_args>, {
      {"lockstat", {"syscalls:sys_enter_futex", "syscalls:sys_exit_futex", "lock:contention_begin",
                    "lock:contention_end", "sched:sched_waking"}, {}, false, false,
       "futex waits with their wakers, and kernel locks"},
      {"lockstat -U", {"syscalls:sys_enter_futex", "syscalls:sys_exit_futex", "sched:sched_waking"}, {}, false,
       false, "futex waits with their wakers (user locks only)"},
      {"lockstat -K", {"lock:contention_begin", "lock:contention_end"}, {}, false, false,
       "kernel lock contention (lock:contention_begin/end)"},
      {"lockstat --uprobes", {"syscalls:sys_enter_futex", "lock:contention_begin", "lock:contention_end"}, {},
       false, true, "pthread_mutex_lock calls timed (uprobes), and kernel locks"},
      {"lockstat --uprobes -U", {"syscalls:sys_enter_futex"}, {}, false, true,
       "pthread_mutex_lock calls timed (uprobes on libc)"}},
      {{"", "-U", "-K", "--uprobes", "--uprobes -U"}, {"", "-L 0x1000"}, {"--unwind fp", "-p $PID --unwind fp", "-t $TID --unwind fp", "-p $PID --unwind dwarf"}}};
  return e;
}

// Histogram entries for `rows` wait rows: with --per-thread a (lock, thread) row's
// waits fill a few buckets (8 each); otherwise the histogram is per lock and its
// buckets are shared by the lock's rows (threads x call sites): 2 per row (measured:
// 1000 mutexes x 16 threads under --uprobes made 32,000 rows and 75,000-96,000 buckets).
uint64_t hist_entries(const Config& c, uint64_t rows) {
  return std::min<uint64_t>(rows * (c.per_thread ? 8 : 2), 1u << 23);
}

std::vector<std::pair<std::string, uint64_t>> map_sizes(const Config& c) {
  uint64_t base = c.map_entries ? c.map_entries : 16384;
  uint64_t user = c.user_map_entries ? c.user_map_entries : base;  // --uprobes: per thread
  auto cap = [](uint64_t v, uint64_t hi) { return std::min<uint64_t>(v, hi); };
  bool both = !c.kernel_only && !c.user_only;  // user waits in maps of their own (ustats)
  uint64_t rows = c.user_only ? user : base;
  std::vector<std::pair<std::string, uint64_t>> m = {
      {"STATS_ENTRIES", rows},
      {"HIST_ENTRIES", cap(rows * 8, 1u << 23)},  // kernel: (lock, thread, bucket)
      {"STACK_ENTRIES", cap(std::max<uint64_t>(base, 16384), 65536)},
      {"START_ENTRIES", std::max<uint64_t>(base, 65536)},
      {"KSTART_ENTRIES", std::max<uint64_t>(base / 2, 8192)}};
  if (c.user_only) m[1].second = hist_entries(c, user);
  if (both) {
    m.emplace_back("USTATS_ENTRIES", user);
    m.emplace_back("UHIST_ENTRIES", hist_entries(c, user));
  }
  return m;
}

std::string bpf_text() { return with_unwind_header(with_common_header(kBpf_lockstat[0].text)); }

namespace {

// futex mode's user-stack scan (fp mode): the user registers at the top of the
// kernel stack
void add_stack_scan(BpfPlan& p, const KernelBtf& k) {
  auto st = k.field_offset("task_struct", {"stack"});
  if (!st) return;
  p.integer("OFF_TASK_STACK", *st);
  p.integer("THREAD_SIZE", 16384);  // x86-64 default; checked in BPF via orig_ax
}

// Optional kernel-lock names: without them kernel locks are still reported, unnamed.
void add_kernel_lock_names(BpfPlan& p, const KernelBtf& k) {
  auto mm = k.field_offset("task_struct", {"mm"});
  auto ml = k.field_offset("mm_struct", {"mmap_lock", "mmap_sem"});
  uint32_t msz = k.field_size("mm_struct", "mmap_lock");
  if (mm && ml && msz) {
    p.integer("OFF_TASK_MM", *mm);
    p.integer("OFF_MM_MMAP_LOCK", *ml);
    p.integer("MMAP_LOCK_SIZE", std::min<uint32_t>(msz, 4095));
  }
  // per-CPU run-queue locks (named rq_lock): current->se.cfs_rq->rq->__lock
  auto se = k.field_offset("task_struct", {"se"});
  auto cq = k.field_offset("sched_entity", {"cfs_rq"});
  auto rq = k.field_offset("cfs_rq", {"rq"});
  auto rl = k.field_offset("rq", {"__lock", "lock"});
  auto rc = k.field_offset("rq", {"cpu"});
  int ncpu = libbpf_num_possible_cpus();
  if (se && cq && rq && rl && rc && ncpu > 0) {
    p.integer("OFF_TASK_CFS_RQ", *se + *cq);
    p.integer("OFF_CFS_RQ_RQ", *rq);
    p.integer("OFF_RQ_LOCK", *rl);
    p.integer("OFF_RQ_CPU", *rc);
    p.integer("RQ_CPUS", static_cast<uint64_t>(ncpu));
  }
  auto sh = k.field_offset("task_struct", {"sighand"});
  auto sl = k.field_offset("sighand_struct", {"siglock"});
  if (sh && sl) {
    p.integer("OFF_TASK_SIGHAND", *sh);
    p.integer("OFF_SIGHAND_SIGLOCK", *sl);
  }
}

}  // namespace

Result<BpfPlan> bpf_plan(const Config& c, bool btf) {
  BpfPlan p;
  p.text = bpf_text();
  if (!c.kernel_only) {
    p.flag(c.uprobes ? "USER_PTHREAD" : "USER_FUTEX");
    if (tracepoint_exists("syscalls:sys_enter_futex_wait")) p.flag("HAVE_FUTEX_WAIT");
    if (tracepoint_exists("syscalls:sys_enter_futex_waitv")) p.flag("HAVE_FUTEX_WAITV");
  }
  if (!c.user_only) p.flag("KERNEL_LOCKS");
  p.id_filter("TGID_OK", c.pids).id_filter("TID_OK", c.tids);
  add_cgroup_filter(p, c.cgroup, false);
  // symbolic names that are not addresses (mmap_lock, ...) are filtered after the fact;
  // the address map holds every address given (a kernel symbol can have several)
  if (!c.lock_addrs.empty() && c.lock_names.empty()) {
    p.flag("FILTER_ADDRS");
    p.integer("ADDR_FILTER_ENTRIES", c.lock_addrs.size());
  }
  p.integer("MIN_WAIT_NS", c.min_wait_ns, "ULL");
  for (const auto& m : map_sizes(c)) p.integer(m.first, m.second);
  if (!c.kernel_only && !c.uprobes) p.flag("WAKERS");
  if (c.per_thread) p.flag("HIST_PER_THREAD");  // only the thread view shows a thread's percentiles
  if (!btf) return p;
  auto k = kernel_btf();
  if (!k) return p;
  if (!c.kernel_only && !c.uprobes && !c.unwind_dwarf) add_stack_scan(p, **k);
  if (!c.user_only) add_kernel_lock_names(p, **k);
  return p;
}

}  // namespace lockstat
