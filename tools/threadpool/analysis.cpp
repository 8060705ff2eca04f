// threadpool analysis: wait classification, work-wait inference, aggregation,
// queue depth and the verdict. No BPF here, so all of it is unit-tested.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "tools/threadpool/threadpool.h"

extern "C" {
#include <linux/types.h>

#include "hist.h"
#include "threadpool_shared.h"
}

namespace threadpool {

namespace {

struct SysInfo {
  int nr;
  const char* name;
  Reason reason;
  bool event_wait;
};

// x86_64 numbers of the syscalls a thread commonly blocks in.
const SysInfo kSyscalls[] = {
    {0, "read", kIo, false},           {1, "write", kIo, false},
    {2, "open", kIo, false},           {3, "close", kIo, false},
    {7, "poll", kPoll, true},          {17, "pread64", kIo, false},
    {18, "pwrite64", kIo, false},      {19, "readv", kIo, false},
    {20, "writev", kIo, false},        {23, "select", kPoll, true},
    {26, "msync", kIo, false},         {34, "pause", kOther, false},
    {35, "nanosleep", kSleep, false},  {40, "sendfile", kIo, false},
    {42, "connect", kIo, false},       {43, "accept", kIo, true},
    {44, "sendto", kIo, false},        {45, "recvfrom", kIo, false},
    {46, "sendmsg", kIo, false},       {47, "recvmsg", kIo, false},
    {61, "wait4", kOther, false},      {65, "semop", kLock, false},
    {72, "fcntl", kLock, false},       {73, "flock", kLock, false},
    {74, "fsync", kIo, false},         {75, "fdatasync", kIo, false},
    {77, "ftruncate", kIo, false},     {128, "rt_sigtimedwait", kOther, false},
    {130, "rt_sigsuspend", kOther, false}, {202, "futex", kLock, false},
    {208, "io_getevents", kIo, false}, {217, "getdents64", kIo, false},
    {220, "semtimedop", kLock, false}, {230, "clock_nanosleep", kSleep, false},
    {232, "epoll_wait", kPoll, true},  {247, "waitid", kOther, false},
    {257, "openat", kIo, false},       {262, "newfstatat", kIo, false},
    {270, "pselect6", kPoll, true},    {271, "ppoll", kPoll, true},
    {275, "splice", kIo, false},       {277, "sync_file_range", kIo, false},
    {281, "epoll_pwait", kPoll, true}, {285, "fallocate", kIo, false},
    {288, "accept4", kIo, true},       {295, "preadv", kIo, false},
    {296, "pwritev", kIo, false},      {299, "recvmmsg", kIo, false},
    {307, "sendmmsg", kIo, false},     {326, "copy_file_range", kIo, false},
    {327, "preadv2", kIo, false},      {328, "pwritev2", kIo, false},
    {333, "io_pgetevents", kIo, false}, {426, "io_uring_enter", kIo, false},
    {441, "epoll_pwait2", kPoll, true}, {449, "futex_waitv", kLock, false},
};

const SysInfo* sys_info(int nr) {
  for (const auto& s : kSyscalls)
    if (s.nr == nr) return &s;
  return nullptr;
}

constexpr uint32_t kFutexWait = 0, kFutexWaitBitset = 9;

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

const char* reason_name(int r) {
  static const char* kNames[] = {"lock", "io", "poll", "sleep", "other"};
  return r >= 0 && r < kNumReasons ? kNames[r] : "other";
}

Reason classify_wait(int nr, uint32_t /*futex_cmd*/) {
  const SysInfo* s = sys_info(nr);
  return s ? s->reason : kOther;
}

bool is_event_wait(int nr) {
  const SysInfo* s = sys_info(nr);
  return s && s->event_wait;
}

bool parse_syscall_arg(const std::string& s, uint64_t& out) {
  // strtoull would accept leading spaces and a sign ("-1" -> 2^64-1): insist on hex digits
  size_t i = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') ? 2 : 0;
  if (i >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 16);
  if (errno == ERANGE || end != s.c_str() + s.size()) return false;
  out = v;
  return true;
}

std::string syscall_name(int nr) {
  if (nr < 0) return "(no syscall)";
  const SysInfo* s = sys_info(nr);
  return s ? s->name : "syscall " + std::to_string(nr);
}

std::string group_of_name(const std::string& comm) {
  static const std::string kSep = "-_:/.# ";
  std::string g = comm;
  while (true) {
    size_t i = g.size();
    while (i > 0 && std::isdigit(static_cast<unsigned char>(g[i - 1]))) --i;
    if (i == g.size() || i == 0 || kSep.find(g[i - 1]) == std::string::npos) break;
    g.erase(i - 1);  // the separator and the number
  }
  return g.empty() ? comm : g;
}

std::string describe_wait(const WaitKey& k) {
  std::string s = syscall_name(k.nr);
  if (k.nr == TP_NR_FUTEX) {
    s += k.op == kFutexWaitBitset ? " (condition wait)" : k.op == kFutexWait ? " (lock wait)" : "";
    s += " on " + hex(k.obj);
  }
  return s;
}

ThreadTimes delta(const ThreadTimes& cur, const ThreadTimes* prev) {
  auto sub = [](uint64_t a, uint64_t b) { return a > b ? a - b : 0; };
  if (!prev) return cur;
  ThreadTimes d;
  d.on_ns = sub(cur.on_ns, prev->on_ns);
  d.rq_ns = sub(cur.rq_ns, prev->rq_ns);
  d.blk_ns = sub(cur.blk_ns, prev->blk_ns);
  d.rq_count = sub(cur.rq_count, prev->rq_count);
  for (const auto& [k, w] : cur.waits) {
    auto it = prev->waits.find(k);
    WaitTimes x = w;
    if (it != prev->waits.end()) {
      x.blk_ns = sub(w.blk_ns, it->second.blk_ns);
      x.wake_rq_ns = sub(w.wake_rq_ns, it->second.wake_rq_ns);
      x.count = sub(w.count, it->second.count);
    }
    if (x.blk_ns || x.wake_rq_ns || x.count) d.waits[k] = x;
  }
  for (const auto& [idx, n] : cur.rq_hist) {
    auto it = prev->rq_hist.find(idx);
    uint64_t x = it == prev->rq_hist.end() ? n : sub(n, it->second);
    if (x) d.rq_hist[idx] = x;
  }
  return d;
}

WorkWaits infer_work_waits(const std::map<uint32_t, ThreadTimes>& group, size_t nthreads,
                           uint32_t pid) {
  struct Site {
    std::set<uint32_t> tids;
    uint64_t blk = 0;
  };
  std::map<WaitKey, Site> futexes;
  std::set<std::string> events;
  for (const auto& [tid, t] : group)
    for (const auto& [k, w] : t.waits) {
      if (!w.count && !w.blk_ns) continue;
      if (is_event_wait(k.nr)) events.insert(syscall_name(k.nr));
      if (k.nr != TP_NR_FUTEX) continue;
      auto& s = futexes[k];
      s.tids.insert(tid);
      s.blk += w.blk_ns;
    }
  auto best_of = [&](uint32_t op, size_t min_threads) -> std::optional<WaitKey> {
    std::optional<WaitKey> best;
    size_t best_n = 0;
    uint64_t best_blk = 0;
    for (const auto& [k, s] : futexes) {
      if (k.op != op || s.tids.size() < min_threads) continue;
      if (!best || s.tids.size() > best_n || (s.tids.size() == best_n && s.blk > best_blk)) {
        best = k;
        best_n = s.tids.size();
        best_blk = s.blk;
      }
    }
    return best;
  };
  WorkWaits w;
  std::string desc;
  auto pick = best_of(kFutexWaitBitset, nthreads >= 2 ? 2 : 1);
  if (!pick) {
    pick = best_of(kFutexWait, std::max<size_t>(2, (nthreads + 1) / 2));
    w.guessed = pick.has_value();
  }
  if (pick) {
    w.futexes.insert(*pick);
    desc = std::string(w.guessed ? "futex (lock wait, guessed)" : "condition wait") + " on " +
           hex(pick->obj) + " (" + std::to_string(futexes[*pick].tids.size()) + "/" +
           std::to_string(nthreads) + " threads parked there)";
  }
  for (const auto& [tid, t] : group)
    for (const auto& [k, wt] : t.waits)
      if ((wt.count || wt.blk_ns) && w.futexes.count(k)) w.queue_users.insert(tid);
  std::set<uint32_t> waiters;  // threads seen waiting for work
  bool io_polls = false;       // queue workers' epoll/poll waits, counted as I/O
  for (const auto& [tid, t] : group)
    for (const auto& [k, wt] : t.waits) {
      if (!wt.count && !wt.blk_ns) continue;
      if (w.is_idle(tid, k)) waiters.insert(tid);
      else if (is_event_wait(k.nr)) io_polls = true;
    }
  for (const auto& e : events)
    desc += (desc.empty() ? "" : ", ") + e +
            (io_polls && e.find("accept") == std::string::npos ? " (outside queue workers)" : "");
  if (pid && group.count(pid) && !waiters.empty() && !waiters.count(pid)) {
    w.excluded = pid;
    desc += "; main thread " + std::to_string(pid) + " left out (never waited for work)";
  }
  w.found = !desc.empty();
  w.description = desc.empty() ? "none seen (no thread waited for work)" : desc;
  return w;
}

DepthStats queue_depth(const std::vector<std::pair<uint64_t, uint64_t>>& spans, uint64_t t0,
                       uint64_t t1) {
  DepthStats d;
  if (t1 <= t0) return d;
  std::vector<std::pair<uint64_t, int>> ev;
  long double integral = 0;
  for (auto [a, r] : spans) {
    if (r == 0) r = t1;
    uint64_t lo = std::max(a, t0), hi = std::min(r, t1);
    if (hi <= lo) continue;
    integral += hi - lo;
    ev.push_back({lo, +1});
    ev.push_back({hi, -1});
  }
  std::sort(ev.begin(), ev.end());  // at equal times, -1 sorts before +1
  int64_t cur = 0;
  for (auto& [t, v] : ev) {
    cur += v;
    d.max = std::max<uint64_t>(d.max, static_cast<uint64_t>(std::max<int64_t>(cur, 0)));
  }
  d.avg = static_cast<double>(integral / (t1 - t0));
  return d;
}

void aggregate(GroupReport& g, const std::map<uint32_t, ThreadTimes>& deltas,
               const std::map<uint32_t, std::string>& names) {
  g.on_ns = g.rq_ns = g.idle_ns = g.accounted_ns = 0;
  std::fill(std::begin(g.blocked_ns), std::end(g.blocked_ns), 0);
  g.rows.clear();
  g.dispatch = bpfdiag::Histogram();
  for (const auto& [tid, d] : deltas) {
    ThreadRow r;
    r.tid = tid;
    auto n = names.find(tid);
    r.name = n == names.end() ? "?" : n->second;
    r.on_ns = d.on_ns;
    uint64_t idle_wake = 0, blk = 0;
    for (const auto& [k, w] : d.waits) {
      blk += w.blk_ns;
      if (g.work.is_idle(tid, k)) {
        r.idle_ns += w.blk_ns + w.wake_rq_ns;
        idle_wake += w.wake_rq_ns;
      } else {
        r.blocked_ns[classify_wait(k.nr, k.op)] += w.blk_ns;
      }
    }
    // blocked time the waits map missed (map full) stays visible as "other"
    if (d.blk_ns > blk) r.blocked_ns[kOther] += d.blk_ns - blk;
    r.rq_ns = d.rq_ns > idle_wake ? d.rq_ns - idle_wake : 0;
    for (const auto& [idx, c] : d.rq_hist) g.dispatch.add_bucket(idx, c);
    g.on_ns += r.on_ns;
    g.rq_ns += r.rq_ns;
    g.idle_ns += r.idle_ns;
    for (int i = 0; i < kNumReasons; ++i) g.blocked_ns[i] += r.blocked_ns[i];
    g.rows.push_back(r);
  }
  uint64_t blocked = 0;
  for (auto b : g.blocked_ns) blocked += b;
  g.accounted_ns = g.on_ns + g.rq_ns + g.idle_ns + blocked;
  uint64_t busy = g.accounted_ns - std::min(g.idle_ns, g.accounted_ns);
  g.utilization = g.accounted_ns ? static_cast<double>(busy) / g.accounted_ns : 0.0;
  g.busy_avg = g.interval_ns ? static_cast<double>(busy) / g.interval_ns : 0.0;
}

void decide_verdict(GroupReport& g) {
  char why[256];
  if (g.accounted_ns == 0) {
    g.verdict = "no-data";
    g.why = "no scheduler activity recorded for these threads";
    return;
  }
  const uint64_t busy = g.accounted_ns - std::min(g.idle_ns, g.accounted_ns);
  const double util = g.utilization;
  const bool queued = g.req.have_depth && g.req.depth.avg >= 0.5;
  if (util < 0.25 && !queued) {
    std::snprintf(why, sizeof why, "workers busy %.0f%% of the time, waiting for work the rest",
                  100 * util);
    g.verdict = "idle";
    g.why = why;
    return;
  }
  auto frac = [&](uint64_t v) { return busy ? static_cast<double>(v) / busy : 0.0; };
  const double f_rq = frac(g.rq_ns), f_on = frac(g.on_ns);
  const double f_lock = frac(g.blocked_ns[kLock]);
  const double f_io = frac(g.blocked_ns[kIo] + g.blocked_ns[kPoll]);
  const double f_sleep = frac(g.blocked_ns[kSleep] + g.blocked_ns[kOther]);
  const double f_blk = std::max({f_lock, f_io, f_sleep});
  const char* blk_name = f_blk == f_lock ? "locks" : f_blk == f_io ? "I/O" : "sleep/other";
  // "too small" needs evidence of queueing, which only request tracking gives
  bool growing = false;
  if (g.req.have_depth && g.req.requests)
    growing = g.req.depth.avg >= 1.0 ||
              g.req.queue_wait.mean() * 2 >= std::max<uint64_t>(g.req.service.mean(), 1);
  const bool saturated = util >= 0.9 && growing;
  if (f_rq >= 0.3 && f_rq >= f_blk) {
    std::snprintf(why, sizeof why,
                  "busy workers wait for a CPU %.0f%% of their busy time (on CPU %.0f%%)",
                  100 * f_rq, 100 * f_on);
    g.verdict = "cpu-starved";
  } else if (saturated) {
    std::snprintf(why, sizeof why,
                  "all workers busy (%.0f%%) and work queues (depth avg %.1f); busy time: on "
                  "CPU %.0f%%, blocked on %s %.0f%%",
                  100 * util, g.req.depth.avg, 100 * f_on, blk_name, 100 * f_blk);
    g.verdict = "pool-too-small";
  } else if (f_blk >= 0.3 && f_blk > f_on) {
    std::snprintf(why, sizeof why, "busy workers are blocked on %s %.0f%% of their busy time",
                  blk_name, 100 * f_blk);
    g.verdict = f_blk == f_lock ? "blocked-on-locks" : f_blk == f_io ? "blocked-on-io"
                                                                     : "blocked-other";
  } else {
    std::snprintf(why, sizeof why, "busy %.0f%%, mostly on CPU (%.0f%% of busy time)", 100 * util,
                  100 * f_on);
    g.verdict = "ok";
  }
  g.why = why;
}

}  // namespace threadpool
