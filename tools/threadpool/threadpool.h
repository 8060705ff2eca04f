// threadpool: is a process's thread pool CPU-starved, blocked, too small or idle?
// Thread states from scheduler tracepoints, blocked time split by the syscall the
// thread waits in, utilisation with inferred "waiting for work" waits, and request
// queueing (accept -> first read -> response) on the process's accepted sockets.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "common/histogram.h"
#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"

namespace threadpool {

struct Config {
  bool help = false;
  bool json = false;
  bool ebpf = false;
  bool timestamp = false;   // -T
  bool per_thread = false;  // -P
  bool hist = false;        // -H: dispatch latency histogram
  uint32_t pid = 0;         // -p
  std::optional<std::string> pattern;  // --threads (ECMAScript regex, searched)
  bpfdiag::Schedule schedule;          // [interval] [duration]
};

extern const char kHelp[];

bpfdiag::Result<Config> parse_args(int argc, char** argv);
std::string bpf_text();
bpfdiag::Result<std::vector<std::string>> bpf_cflags(const Config& c);
bpfdiag::Status run(const Config& c);

// --- analysis (pure, unit-tested) ---------------------------------------------------

enum Reason { kLock = 0, kIo, kPoll, kSleep, kOther, kNumReasons };
const char* reason_name(int r);
// What a thread blocked in syscall `nr` (futex command `futex_cmd`) is waiting for.
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
  uint64_t blk_ns = 0, wake_rq_ns = 0, count = 0;
};

// Cumulative times of one thread at a snapshot (in-progress state included).
struct ThreadTimes {
  uint64_t on_ns = 0, rq_ns = 0, blk_ns = 0, rq_count = 0;
  std::map<WaitKey, WaitTimes> waits;
  std::map<unsigned, uint64_t> rq_hist;  // fine bucket -> count
};
// cur - prev, field by field (clamped at 0).
ThreadTimes delta(const ThreadTimes& cur, const ThreadTimes* prev);

// The waits inferred as "waiting for work" for one group of threads.
struct WorkWaits {
  std::set<WaitKey> futexes;  // condition-variable words the workers park on
  bool guessed = false;       // chosen without a condition-variable wait (plain futex)
  bool found = false;         // some work wait (futex or event wait) was seen
  std::string description;    // for the report
  std::set<uint32_t> queue_users;  // threads seen parked on `futexes`
  uint32_t excluded = 0;           // main thread left out of the pool (0: none)
  // Is thread `tid` blocked in `k` waiting for work? The work-queue futex and accept
  // always are; epoll/poll/select only for threads that do not take work from the
  // queue (a listener), since for queue workers they are I/O done while serving.
  bool is_idle(uint32_t tid, const WaitKey& k) const {
    if (futexes.count(k) || k.nr == 43 || k.nr == 288) return true;
    return is_event_wait(k.nr) && !queue_users.count(tid);
  }
};
// From the group's cumulative waits: among futex waits, the condition-variable
// (FUTEX_WAIT_BITSET) word the most distinct threads (at least 2 in a group of 2 or
// more) blocked on (ties: most time);
// without one, the plain FUTEX_WAIT word at least half of the threads and >= 2 parked
// on, marked as a guess. accept always counts; epoll/poll/select count for threads
// that never parked on that word (see is_idle). The process's main thread (tid ==
// pid) is left out of the pool when it never waited for work but others in its group
// did (it supervises: pthread_join, a signal or pipe-of-death wait).
WorkWaits infer_work_waits(const std::map<uint32_t, ThreadTimes>& group, size_t nthreads,
                           uint32_t pid = 0);

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
  std::string name;
  uint64_t on_ns = 0, rq_ns = 0, idle_ns = 0;
  uint64_t blocked_ns[kNumReasons] = {};
};

struct RequestStats {
  uint64_t requests = 0;
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
  uint64_t blocked_ns[kNumReasons] = {};  // not counting work waits
  double utilization = 0, busy_avg = 0;
  uint64_t busy_max = 0;
  bpfdiag::Histogram dispatch;  // runnable -> on CPU latency
  RequestStats req;
  std::vector<ThreadRow> rows;
  WorkWaits work;
  std::string verdict, why;
};

// Aggregates one group's per-thread deltas; idle = time blocked in a work wait plus
// the runnable time right after being woken from it.
void aggregate(GroupReport& g, const std::map<uint32_t, ThreadTimes>& deltas,
               const std::map<uint32_t, std::string>& names);

// Sets g.verdict ("cpu-starved", "blocked-on-locks", "blocked-on-io",
// "blocked-other", "pool-too-small", "idle", "ok") and g.why.
void decide_verdict(GroupReport& g);

struct ReportMeta {
  uint32_t pid = 0;
  std::string comm;
  bool final = false;
  bool summary = false;
  bool target_exited = false;
  uint64_t interval_ns = 0;
};
void render(std::ostream& os, const Config& c, const ReportMeta& m,
            const std::vector<GroupReport>& groups, const bpfdiag::DataQuality& dq);

}  // namespace threadpool
