// lockstat: lock contention across user space (futex waits or pthread uprobes) and
// the kernel (lock:contention_begin/end), ranked per lock with identity and call sites.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "common/bpf_plan.h"
#include "common/cgroup.h"
#include "common/declared_waits.h"
#include "common/histogram.h"
#include "common/metrics.h"
#include "common/options.h"
#include "common/output.h"
#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"
#include "common/stacks.h"
#include "common/wait_sites.h"

extern "C" {
#include <linux/types.h>
#include "jvm_shared.h"
#include "lockstat_shared.h"
}

namespace bpfdiag {
class PprofProfile;
class RunPprof;
class Symbolizer;
}  // namespace bpfdiag
namespace lockstat {

struct Config {
  bool help = false;
  bool json = false;
  bool csv = false;
  bool ebpf = false;
  bool per_thread = false;    // -P: one row per thread
  bool timestamp = false;     // -T
  bool hist = false;          // -H: per-lock histograms
  bool uprobes = false;       // --uprobes: exact pthread mode
  bool kernel_only = false;   // -K
  bool user_only = false;     // -U
  bool verbose = false;       // -v
  bool unwind_dwarf = false;  // --unwind=dwarf (default with -p/-t): user stacks from .eh_frame
  std::vector<uint32_t> pids;            // -p
  std::vector<uint32_t> tids;            // -t
  std::optional<bpfdiag::CgroupTarget> cgroup;  // --cgroup / --container
  std::vector<uint64_t> lock_addrs;      // -L 0x...
  std::vector<std::string> lock_names;   // -L name
  uint64_t min_wait_ns = 0;              // -m
  std::string sort = "wait_total_ns";    // -S
  std::string fields;                    // --fields
  size_t entries = 10;                   // -n (0: all)
  size_t stacks = 3;                     // -s: waiters and call sites shown per lock
  uint64_t map_entries = 0;              // --map-entries (0: sized from the target)
  uint64_t user_map_entries = 0;         // rows for user-space waits (0: map_entries)
  bpfdiag::Schedule schedule;            // -i/-c/-d
  // --uprobes: ns of probe cost taken off each timed call, measured at startup by
  // run() (tools/lockstat/calibrate.cpp), not an option
  uint64_t probe_cost_ns = 0;
  std::string svg;                       // --svg FILE: flame graph of the run's waits
  std::string pprof;                     // --pprof FILE: the run's waits as a pprof profile
  std::string prometheus;           // --prometheus FILE: metrics at every report (common/metrics.h)
  std::string listen;               // --listen ADDR:PORT: the same over HTTP
};

// The option table (generated --help, USAGE, man page SYNOPSIS).
const bpfdiag::ToolSpec& spec();
const char* help_text();

bpfdiag::Result<Config> parse_args(int argc, char** argv);

// The data-quality keys of every lockstat record (zeros when nothing happened).
bpfdiag::DataQuality empty_dq();

std::string bpf_text();
// BPF map sizes (-D name=value) for a config: --map-entries, or what run() derived
// from the target's thread count (Config::map_entries), or the defaults.
std::vector<std::pair<std::string, uint64_t>> map_sizes(const Config& c);
// Map size for `threads` traced threads: 8 entries each, at least 16384, a power of 2.
uint64_t map_entries_for_threads(uint64_t threads);
// --uprobes: every mutex call is a row per (mutex, caller, thread), and one more per
// stack of its blocked calls: kUprobeRowsPerThread rows per thread (1024 mutexes and
// call sites per thread, 2 rows each), at least 16384, at most 4M (powers of two).
uint64_t uprobe_map_entries_for_threads(uint64_t threads);
// Mode, filter and map-size defines (plus optional BTF offsets when `btf` is true).
bpfdiag::Result<bpfdiag::BpfPlan> bpf_plan(const Config& c, bool btf = true);

// --- data model (independent of BPF, so the report is unit-testable) --------------

struct RawWait {
  lockstat_key key;
  lockstat_val val;
};

struct Snapshot {
  std::vector<RawWait> waits;
  std::vector<std::pair<lockstat_hkey, uint64_t>> hist;
  std::vector<std::pair<lockstat_wkey, uint64_t>> wakers;  // futex mode: who woke waiters
  std::map<uint32_t, std::string> comms;  // tid -> comm
  uint64_t window_ns = 0;                 // time covered (0: unknown)
  bpfdiag::DataQuality dq = empty_dq();
};

// What a wait is, decided per lock: first by the wait-site rules over its stacks
// (common/wait_sites: the runtime's own words), then by what the futex protocol
// proves (glibc's lock word, PI, timeouts), then by who woke the waiters on a word
// several threads share. A word only one thread waits on (a runtime's per-thread
// park word) with none of these is unclassified. Only Contention is ranked as locks.
enum class WaitClass {
  Contention,  // waiting for a lock another thread holds
  Gil,         // a runtime's global lock (CPython's GIL)
  Idle,        // a condition/semaphore wait ended by producers: waiting for work
  Condition,   // a condition/semaphore wait with no waker seen yet
  Timed,       // timed waits that ran to their timeout: sleeps and polls
  Uncontended, // --uprobes: a lock whose measured calls never blocked
  Unclassified,  // nothing above can tell: shown with its site, never ranked or advised on
  Tracer,        // waits caused by a tracer attaching or detaching (perf_trace_destroy, ...)
};
const char* wait_class_name(WaitClass c);

// Name lookups the aggregation needs; the real ones come from the symbolizer.
struct Names {
  // The declared wait behind a LS_KIND_DECLARED key's addr (nullptr: unknown).
  std::function<const bpfdiag::DeclaredName*(uint64_t addr)> declared;
  // Lock symbol for a user (pid != 0) or kernel (pid == 0) address; "" if none.
  std::function<std::string(uint32_t pid, uint64_t addr)> lock_symbol;
  // Symbolized frames for a key, innermost first (user or kernel as the kind says).
  std::function<std::vector<std::string>(const lockstat_key&)> frames;
  // The class of a Java object (LS_KIND_JAVA: a Klass * in process pid), then its
  // superclasses, nearest first (common/jvm_state); empty when unknown.
  std::function<std::vector<std::string>(uint32_t pid, uint64_t klass)> java_class;
  // Call site for a key: the lock call's caller (pthread), the first frame outside
  // libc (futex) or outside the kernel's lock functions (kernel).
  std::function<std::string(const lockstat_key&, const std::vector<std::string>&)> site;
  // LS_KIND_GO: the Go runtime's word for waitReason `v` in process pid (common/go_runtime)
  std::function<std::string(uint32_t pid, uint32_t v)> go_reason;
};

struct WaiterRow {
  uint32_t tid = 0;
  std::string comm;
  uint64_t contended = 0, total_ns = 0, max_ns = 0;
};

struct SiteRow {
  std::string site;  // ends with kUnplacedSite when only a wrapper is known
  std::vector<std::string> stack;  // innermost first
  uint64_t contended = 0, total_ns = 0;
};

struct LockRow {
  std::string layer;  // "user" or "kernel"
  std::string kind;   // futex-mutex, futex, futex-pi, pthread-mutex, spinlock, rwsem:W, go-park, ...
  uint32_t pid = 0;   // user: owning process; kernel: the waiters' process if only one
  std::string comm;
  uint64_t addr = 0;
  std::string symbol;  // "" when the address is not a symbol
  uint64_t contended = 0;  // waits (futex/kernel) or calls that blocked (pthread)
  uint64_t calls = 0;      // pthread: lock calls measured; else == contended
  uint64_t total_ns = 0, max_ns = 0;
  uint64_t p50_ns = 0, p90_ns = 0, p99_ns = 0;
  uint32_t futex_flags = 0;  // LS_FUTEX_* OR-ed over the waits
  bool spin = false;         // kernel: spinning waits (ls_kernel_spins), apart from sleeping ones
  uint64_t timedout = 0;     // waits that ran to their timeout
  uint64_t wakes = 0;        // waits ended by a wake whose waker was seen
  uint64_t peer_wakes = 0;   // ... by a thread that also waited on this lock
  size_t wakers = 0;         // distinct waking threads
  size_t producers = 0;      // ... of which never waited on this lock
  double max_share = 0;      // largest share of the window one waiter spent waiting
  double mean_waiting = 0;   // threads waiting on it on average (all waits / the window)
  WaitClass cls = WaitClass::Contention;
  // The wait-site rule behind the class (common/wait_sites), over the sites' stacks by
  // wait time: its words ("" when none matched), whether it decided, where it is from.
  std::string wait_what, wait_rule;
  bpfdiag::WaitKind wait_kind = bpfdiag::WaitKind::Unclassified;
  bool wait_decided = false, own_word = false;
  uint32_t jvm_kind = 0;     // java-* rows: JVM_WAIT_* (what the JVM says the thread waits for)
  uint64_t java_klass = 0;   // java-* rows: the object's class (a Klass * in pid)
  // user: the futex words (process, address) merged into this row (own words, by site)
  std::vector<std::pair<uint32_t, uint64_t>> words;
  bpfdiag::Histogram hist;
  std::vector<WaiterRow> waiters;  // sorted by total wait
  std::vector<SiteRow> sites;      // sorted by total wait
  uint64_t site_samples = 0;       // waits whose stacks the sites come from (kernel: sampled)
  uint64_t avg_ns() const { return calls ? total_ns / calls : 0; }
  std::string name() const;        // symbol, or 0x-address
};

struct ThreadRow {
  uint32_t pid = 0, tid = 0;
  std::string comm;
  uint64_t contended = 0, calls = 0, total_ns = 0, max_ns = 0;
  uint64_t p50_ns = 0, p90_ns = 0, p99_ns = 0;
  size_t locks = 0;
  std::string top_lock;
  bpfdiag::Histogram hist;
  uint64_t avg_ns() const { return calls ? total_ns / calls : 0; }
};

// Kernel contention_begin flags -> "spinlock", "rwsem:W", "mutex", ...
std::string kernel_lock_kind(uint32_t flags);
// A Java thread's wait (LS_KIND_JAVA) by JVM_WAIT_*: java-monitor, java-wait, java-park.
std::string java_kind(uint32_t jvm_kind);
// User kind from the futex flags / pthread mode.
std::string user_lock_kind(uint32_t kind, uint32_t flags);
// True for kernel frames that belong to the lock implementation (skipped when
// choosing a kernel lock's call site).
bool is_kernel_lock_frame(const std::string& frame);
// True for instrumentation/shim frames skipped when choosing a user call site
// (psi_mutex_lock, inline_mysql_mutex_lock, PyThread_acquire_lock_timed, ...).
bool is_wrapper_frame(const std::string& frame);
// Appended to a site that is only a wrapper (its caller's caller unknown: an --uprobes
// call that did not block has no stack walked). Such sites rank after the placed ones.
inline constexpr const char* kUnplacedSite = " [outer caller unknown]";
bool site_placed(const std::string& site);
// True for kernel frames that take a per-CPU run-queue lock (named rq_lock, as perf).
bool is_rq_lock_frame(const std::string& frame);
// The class of a user lock row from its evidence (flags, timeouts, wakers, symbol,
// call paths); kernel rows are contention.
WaitClass classify(const LockRow& r);
// One-line reading from the class, the waiters' share of time spent waiting and
// the hold evidence (wait lengths).
std::string reading(const LockRow& r);

// Groups raw waits into locks (and threads), applying name filters from `c`.
std::vector<LockRow> build_locks(const Snapshot& s, const Names& n, const Config& c);
std::vector<ThreadRow> build_threads(const Snapshot& s, const Names& n, const Config& c);

// One report's rows, built once: contended locks (ranked), the other waits (apart),
// and with -P the threads waiting on contended locks (on any lock named by -L).
struct Report {
  std::vector<LockRow> locks;
  std::vector<LockRow> other;
  std::vector<ThreadRow> threads;  // -P only
};
Report build_report(const Snapshot& s, const Names& n, const Config& c);

// Renders one report (text, CSV or NDJSON records covering `w`) to `os`; with --csv
// the data-quality line goes to `err` (stderr in the tool) so the CSV stays pure.
void render(std::ostream& os, std::ostream& err, const Config& c, const Snapshot& s, const Names& n,
            const bpfdiag::Window& w);

// --svg: the contended locks' call sites as folded stacks, "comm;outer;...;inner;
// lock NAME" valued in microseconds of wait (the sites the report keeps, -s).
void add_folded_waits(const Report& rep, bpfdiag::FoldedSet& out);
// --pprof (pprof.cpp): the output over the run, and one report's rows of every class
// as samples (contentions/count, delay/nanoseconds) by call site.
bpfdiag::RunPprof pprof_output(const Config& c);
void add_pprof(bpfdiag::PprofProfile& p, const Report& rep, const bpfdiag::Symbolizer& sym);

// --prometheus/--listen (metrics.cpp): one report's rows into the counters.
void add_report_metrics(bpfdiag::MetricSet& m, const Report& rep);

bpfdiag::Status run(const Config& c);

}  // namespace lockstat
