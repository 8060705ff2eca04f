// threadpool: is a pool of threads (one process's, or a pool of processes': a PID list,
// a parent and its children) CPU-starved, blocked, too small or idle?
// Thread states from scheduler tracepoints; each wait classified by what it is (who
// ended it: a pool peer, a producer outside the pool, a timeout; the runtime's global
// lock when the futex word lies in one), utilisation with "waiting for work" as
// idle, and request queueing (accept -> first read -> response) on accepted sockets.
//
// Files: cli.cpp (option table, BPF flags, map sizes); members.cpp (which threads are
// tracked, in which group), snapshot.cpp (BPF maps -> per-thread times), requests.cpp
// (request timing, data quality), tracer.cpp (ties them together into reports);
// runtime.cpp (thread roles, runtime locks such as the GIL); analysis.cpp, waits.cpp,
// verdict.cpp (the model, no BPF); render.cpp (text, NDJSON); run.cpp (skeleton).
#pragma once
#include <regex.h>

#include <memory>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "common/bpf_plan.h"
#include "common/bpf_counters.h"
#include "common/cgroup.h"
#include "common/histogram.h"
#include "common/metrics.h"
#include "common/options.h"
#include "common/output.h"
#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"

namespace threadpool {

struct Config {
  bool help = false;
  bool json = false;
  std::string prometheus;           // --prometheus FILE: metrics at every report (common/metrics.h)
  std::string listen;               // --listen ADDR:PORT: the same over HTTP
  bool ebpf = false;
  bool timestamp = false;   // -T
  bool per_thread = false;  // -P
  bool hist = false;        // -H: dispatch latency histogram
  bool all_groups = false;  // -a: every thread group in text reports
  bool verbose = false;     // -v: tracked and retired thread counts on stderr
  std::vector<uint32_t> pids;  // -p: the pool's processes (the first the report's label)
  bool children = false;       // --children: each PID's child processes join the pool
  std::optional<bpfdiag::CgroupTarget> cgroup;  // --cgroup/--container: its processes are the pool
  uint32_t map_entries = 0;  // --map-entries (0: sized from the target)
  std::optional<std::string> pattern;  // --threads (POSIX extended regex, searched)
  bpfdiag::Schedule schedule;          // -i/-c/-d
};

const bpfdiag::ToolSpec& tool_spec();
const char* help_text();  // generated from tool_spec()

// --threads PATTERN as a POSIX extended regex (glibc's matcher does not backtrack, so
// no pattern makes matching a thread name exponential; std::regex did, and its
// recursive compiler overflowed the stack on deep nesting). At most 256 characters.
constexpr size_t kMaxPatternLen = 256;
std::shared_ptr<const regex_t> compile_pattern(const std::string& p, std::string* err);
bool pattern_search(const regex_t& re, const std::string& s);

bpfdiag::Result<Config> parse_args(int argc, char** argv);
std::string bpf_text();
// Map sizes: threads/waits/dispatch-histogram entries for a target with `nthreads`
// threads, or from --map-entries.
struct MapSizes {
  uint32_t threads = 0, waits = 0, hist = 0;
};
MapSizes map_sizes(const Config& c, size_t nthreads);
bpfdiag::Result<bpfdiag::BpfPlan> bpf_plan(const Config& c, size_t nthreads = 0);
bpfdiag::Status run(const Config& c);

// --- analysis (pure, unit-tested) ---------------------------------------------------

// What busy time is blocked in. kGil: waiting for a runtime's global lock (neither
// busy nor idle: the thread has work but cannot run it).
enum Reason { kLock = 0, kIo, kPoll, kSleep, kGil, kOther, kNumReasons };
constexpr int kIdle = kNumReasons;  // a category: waiting for work
const char* reason_name(int r);
// Who ended a wait (values of TP_W_* in threadpool_shared.h).
// kByMain: the process's main thread (a producer unless it is one of the pool).
enum Wake { kByPeer = 0, kByProcess, kByOther, kTimedOut, kUnseen, kByMain, kNumWakes };
const char* wake_name(int w);
// What a thread blocked in syscall `nr` is waiting for, by the syscall alone (the
// fallback when nothing better is known; futex: lock).
Reason classify_wait(int nr, uint32_t futex_cmd);
// accept/accept4, epoll_wait/epoll_pwait/poll/ppoll/select: waiting for work by nature.
bool is_event_wait(int nr);
std::string syscall_name(int nr);
// One hex argument of /proc/PID/task/TID/syscall ("0x7f3a..."; the 0x is optional).
// False on anything else (empty, sign, junk, overflow): the caller then treats the
// wait as unknown instead of throwing.
bool parse_syscall_arg(const std::string& s, uint64_t& out);

// Thread name -> group name: trailing separator+number parts removed ("worker-12" ->
// "worker", "pool-1-thread-3" -> "pool-1-thread", "apache2" stays), so numbered
// workers form one group.
std::string group_of_name(const std::string& comm);

struct WaitKey {
  int nr = -1;        // syscall (-1: blocked outside a syscall)
  uint32_t op = 0;    // futex command
  uint64_t obj = 0;   // futex word (8-byte aligned), else 0
  bool operator<(const WaitKey& o) const {
    return nr != o.nr ? nr < o.nr : op != o.op ? op < o.op : obj < o.obj;
  }
  bool operator==(const WaitKey& o) const { return nr == o.nr && op == o.op && obj == o.obj; }
};
std::string describe_wait(const WaitKey& k);

struct WaitTimes {
  uint64_t blk_ns[kNumWakes] = {};      // blocked, by who ended the wait
  uint64_t wake_rq_ns[kNumWakes] = {};  // runnable right after that wake-up
  uint64_t count = 0;
  uint64_t took = 0;  // requests the thread took right after this wait (hand-off of work)
  uint64_t blk() const;
  uint64_t wake_rq() const;
};

// Cumulative times of one thread at a snapshot (in-progress state included).
struct ThreadTimes {
  uint64_t on_ns = 0, rq_ns = 0, blk_ns = 0, rq_count = 0;
  std::map<WaitKey, WaitTimes> waits;
  std::map<unsigned, uint64_t> rq_hist;  // fine bucket -> count
};
// cur - prev, field by field (clamped at 0).
ThreadTimes delta(const ThreadTimes& cur, const ThreadTimes* prev);

// Where a futex wait waits, from the waiter's user stack at its first wait (unwound
// once per thread and wait) matched against the suite's wait-site rules
// (common/wait_sites.rules and the rule directory): a deciding rule says what the wait
// is (lock, idle, sleep, I/O, GIL; a condition wait or a rule's "unclassified" is an
// other wait), whoever ends it.
constexpr int kSiteUndecided = -1;  // the stack was read, no rule decides
struct WaitSite {
  int category = kSiteUndecided;  // Reason or kIdle, or kSiteUndecided
  std::string name;               // the rule's words and the frame, or the call site
};
using SiteMap = std::map<std::pair<uint32_t, WaitKey>, WaitSite>;
// The site of one stack (symbolized frames, innermost first).
WaitSite classify_site(const std::vector<std::string>& frames);

// What the waits of one group of threads mean. The category of a wait comes from
// what it is, not its syscall: a futex word inside a runtime's global lock (the GIL)
// is kGil; a timed wait that ran out is sleep; a condition/semaphore word on which
// threads outside the pool (producers) end waits is where work arrives: every wait
// there is idle (peers pass wake-ups on); otherwise a futex wait ended by a pool peer
// is lock contention; a condition/semaphore wait ended from outside the pool (a producer,
// another process) is waiting for work (idle), a mutex wait so ended is still a lock;
// accept is idle, epoll/poll/select idle for threads that take no work from a queue
// (a listener) and I/O for those that do; other syscalls by classify_wait.
// Before all of that but the GIL, a futex wait whose site (`sites`) decides is what the
// site says; a wait ended by a pool peer with no deciding site is a lock only when it
// is mutex-style (FUTEX_WAIT, LOCK_PI) and its stack was not read; a condition-style
// wait (FUTEX_WAIT_BITSET: condition variables, semaphores, standby workers sleeping
// on a word of their own) or one whose stack said nothing is unclassified (other),
// named by its site in the description.
struct WorkWaits {
  std::map<uint64_t, std::string> runtime_locks;  // futex word -> "GIL (_PyRuntime+432)"
  std::set<uint64_t> work_words;   // condition/semaphore words work arrives on
  std::set<uint32_t> queue_users;  // threads with idle futex waits
  // most frequent resolved wake class (by time) per thread and wait, then per wait:
  // what an in-progress or unseen wake-up most likely is
  std::map<std::pair<uint32_t, WaitKey>, int> usual;
  std::map<WaitKey, int> usual_any;
  bool found = false;             // some idle wait was seen
  // No thread of the group waited for work in any other way: its timed sleeps are how
  // its work comes (a timer thread: jemalloc's background thread, HotSpot's VM Periodic
  // Task), idle, not busy. Set once the inference is done (infer_work_waits).
  bool sleep_is_idle = false;
  std::string description;        // for the report
  // members left out of the pool: the main thread when it supervises, and threads
  // that share the pool's name but never wait for work nor on the workers' locks
  std::set<uint32_t> excluded;
  bool main_in_pool = false;      // the main thread's wake-ups are a peer's
  SiteMap sites;                  // futex wait sites read so far (thread, wait)
  // condition-style waits after which the thread took a request at least half the
  // times it waited (work handed over: a standby worker woken for a request)
  std::set<std::pair<uint32_t, WaitKey>> handoff;
  int category(uint32_t tid, const WaitKey& k, int wake) const;  // Reason or kIdle
  bool is_idle(uint32_t tid, const WaitKey& k, int wake = kUnseen) const {
    return category(tid, k, wake) == kIdle;
  }
};
// From the group's cumulative waits. `pid`: the pool's main thread (the process's main
// thread, tid == pid; in a pool of processes the leader's, 0 if none) stays in
// the pool only if it waits for work where another member does (it behaves like a
// worker); otherwise it supervises (submits, joins, waits for results) and is left
// out, when the others do wait for work.
WorkWaits infer_work_waits(const std::map<uint32_t, ThreadTimes>& group, size_t nthreads,
                           uint32_t pid = 0,
                           const std::map<uint64_t, std::string>& runtime_locks = {},
                           const SiteMap* sites = nullptr);

// Several pools under one name (every thread of a CPython process is "python3"; a C
// program's unnamed threads share the process's name): threads are joined when they
// wait for work on the same futex word (a queue's condition variable or semaphore),
// excluded threads aside. A pool has 2 threads or more and one word with at least half
// its idle time (its queue). The pools, largest first (then by lowest TID); fewer than
// two: none (the group is one pool).
std::vector<std::set<uint32_t>> pools_by_work_word(const std::map<uint32_t, ThreadTimes>& group,
                                                   const WorkWaits& w);

// Queue depth (accepted, not yet read) over [t0, t1] from each request's
// [accept, first read] span (read = 0: still queued).
struct DepthStats {
  double avg = 0;
  uint64_t max = 0;
};
DepthStats queue_depth(const std::vector<std::pair<uint64_t, uint64_t>>& spans, uint64_t t0,
                       uint64_t t1);

struct ThreadRow {
  uint32_t tid = 0;
  uint32_t pid = 0;  // its process (set by the tracer; 0: unknown)
  std::string name;
  uint64_t on_ns = 0, rq_ns = 0, idle_ns = 0;
  // every runnable period, the wake-ups from work waits (counted in idle_ns) included:
  // what the kernel counts as run-queue wait (/proc/PID/schedstat's run_delay)
  uint64_t cpu_wait_ns = 0;
  uint64_t blocked_ns[kNumReasons] = {};
};

// One process of a pool of processes: its threads' rows added up.
struct ProcessRow {
  uint32_t pid = 0;
  std::string comm;
  size_t threads = 0;
  uint64_t on_ns = 0, rq_ns = 0, idle_ns = 0, cpu_wait_ns = 0;
  uint64_t blocked_ns[kNumReasons] = {};
  uint64_t total() const;
  double utilization() const;  // neither idle nor waiting for the GIL, of total()
};
// Per process, in PID order, from g.rows (rows with pid 0 left out).
std::vector<ProcessRow> process_rows(const std::vector<ThreadRow>& rows);

struct RequestStats {
  uint64_t requests = 0;
  // Requests taken by a thread that had answered one before (taken_known), and of those
  // the ones it took without blocking since its last response (taken_ready): the request
  // was already waiting for a worker. Most taken so: work queues, whether or not the
  // accepts were seen (kept-alive connections, a pool that caps how many threads run).
  uint64_t taken_known = 0, taken_ready = 0;
  bpfdiag::Histogram queue_wait, service, response;
  bool have_depth = false;
  DepthStats depth;
};

struct GroupReport {
  std::string name;
  size_t threads = 0;
  uint64_t interval_ns = 0;
  // thread time over the interval
  uint64_t on_ns = 0, rq_ns = 0, idle_ns = 0, accounted_ns = 0;
  uint64_t cpu_wait_ns = 0;  // every runnable period (ThreadRow::cpu_wait_ns)
  uint64_t blocked_ns[kNumReasons] = {};  // not counting work waits
  uint64_t unattributed_ns = 0;  // blocked time whose wait was lost (waits map full)
  double utilization = 0, busy_avg = 0;  // busy: neither idle nor waiting for the GIL
  uint64_t busy_max = 0;
  bpfdiag::Histogram dispatch;  // runnable -> on CPU latency
  RequestStats req;
  std::vector<ThreadRow> rows;
  std::vector<ProcessRow> processes;  // rows added up per process (process_rows)
  WorkWaits work;
  // data loss behind this report (interval or run): updates dropped because a map was
  // full, pool threads not tracked, request events lost
  uint64_t dropped = 0, untracked = 0, lost_events = 0;
  uint64_t suggest_map_entries = 0;  // for the hint (Tracer::suggested_map_entries), 0: unknown
  std::string verdict, why;
};

// Aggregates one group's per-thread deltas; idle = time blocked in a work wait plus
// the runnable time right after being woken from it.
void aggregate(GroupReport& g, const std::map<uint32_t, ThreadTimes>& deltas,
               const std::map<uint32_t, std::string>& names);

// The whole-run times of a group's exited threads (threads retired during the run,
// whose per-thread state is forgotten): each thread's times classified by the group's
// wait model when it was retired. The summary adds them back (add_retired).
struct RetiredTimes {
  size_t threads = 0;
  uint64_t on_ns = 0, rq_ns = 0, idle_ns = 0, unattributed_ns = 0, cpu_wait_ns = 0;
  uint64_t blocked_ns[kNumReasons] = {};
  bpfdiag::Histogram dispatch;
};
// Adds what aggregate() made of some threads (no rows are kept).
void fold(RetiredTimes& r, const GroupReport& aggregated);
// g (from aggregate) plus retired threads: times, thread count, dispatch histogram,
// and the totals derived from them (accounted, utilisation, busy average).
void add_retired(GroupReport& g, const RetiredTimes& r);

// Sets g.verdict ("blocked-on-gil", "cpu-starved", "blocked-on-locks",
// "blocked-on-io", "sleeping", "blocked-other", "pool-too-small", "idle", "ok",
// "no-data", or "uncertain" when data loss could change it) and g.why.
void decide_verdict(GroupReport& g);

struct ReportMeta {
  uint32_t pid = 0;            // the first PID given (the label)
  std::vector<uint32_t> pids;  // the pool's processes now (several: per-process lines)
  std::string comm;
  bool summary = false;  // the whole run (final), not an interval
  bool target_exited = false;
  bpfdiag::Window window;  // time_ns, interval_ns, final
};
// Text, or NDJSON: a threadpool.group record per group, then threadpool.summary.
void render(std::ostream& os, const Config& c, const ReportMeta& m,
            const std::vector<GroupReport>& groups, const bpfdiag::DataQuality& dq);

// --prometheus/--listen (metrics.cpp): one report's groups into the metrics.
void add_report_metrics(bpfdiag::MetricSet& m, const std::vector<GroupReport>& groups);

// The BPF data-quality counters -> data_quality keys; a report's fixed key set.
const std::vector<bpfdiag::CounterSlot>& counter_table();
bpfdiag::DataQuality empty_quality();

}  // namespace threadpool
