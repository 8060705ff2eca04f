// threadpool analysis: wait classification, work-wait inference, aggregation,
// queue depth and the verdict. No BPF here, so all of it is unit-tested.
#include <algorithm>
#include <array>
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
  static const char* kNames[] = {"lock", "io", "poll", "sleep", "gil", "other"};
  return r >= 0 && r < kNumReasons ? kNames[r] : r == kIdle ? "idle" : "other";
}

const char* wake_name(int w) {
  static const char* kNames[] = {"peer", "process", "other", "timeout", "unseen", "main"};
  return w >= 0 && w < kNumWakes ? kNames[w] : "unseen";
}

uint64_t WaitTimes::blk() const {
  uint64_t t = 0;
  for (auto v : blk_ns) t += v;
  return t;
}

uint64_t WaitTimes::wake_rq() const {
  uint64_t t = 0;
  for (auto v : wake_rq_ns) t += v;
  return t;
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

namespace {

// Lowers the largest entries of v until they add up to at most `total`.
void trim(uint64_t (&v)[kNumWakes], uint64_t total) {
  uint64_t sum = 0;
  for (auto x : v) sum += x;
  while (sum > total) {
    auto* m = std::max_element(std::begin(v), std::end(v));
    uint64_t cut = std::min(*m, sum - total);
    *m -= cut;
    sum -= cut;
  }
}

}  // namespace

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
      for (int i = 0; i < kNumWakes; ++i) {
        x.blk_ns[i] = sub(w.blk_ns[i], it->second.blk_ns[i]);
        x.wake_rq_ns[i] = sub(w.wake_rq_ns[i], it->second.wake_rq_ns[i]);
      }
      // time shown last interval as in progress (unseen) and now resolved to who
      // ended the wait moves between classes: keep the delta's total at the real one
      trim(x.blk_ns, sub(w.blk(), it->second.blk()));
      trim(x.wake_rq_ns, sub(w.wake_rq(), it->second.wake_rq()));
      x.count = sub(w.count, it->second.count);
      x.took = sub(w.took, it->second.took);
    }
    if (x.blk() || x.wake_rq() || x.count) d.waits[k] = x;
  }
  for (const auto& [idx, n] : cur.rq_hist) {
    auto it = prev->rq_hist.find(idx);
    uint64_t x = it == prev->rq_hist.end() ? n : sub(n, it->second);
    if (x) d.rq_hist[idx] = x;
  }
  return d;
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

namespace {

// accounted time, utilisation and busy average from the group's time sums
void totals(GroupReport& g) {
  uint64_t blocked = 0;
  for (auto b : g.blocked_ns) blocked += b;
  g.accounted_ns = g.on_ns + g.rq_ns + g.idle_ns + blocked;
  const uint64_t not_busy = std::min(g.idle_ns + g.blocked_ns[kGil], g.accounted_ns);
  const uint64_t busy = g.accounted_ns - not_busy;
  g.utilization = g.accounted_ns ? static_cast<double>(busy) / g.accounted_ns : 0.0;
  g.busy_avg = g.interval_ns ? static_cast<double>(busy) / g.interval_ns : 0.0;
}

}  // namespace

void aggregate(GroupReport& g, const std::map<uint32_t, ThreadTimes>& deltas,
               const std::map<uint32_t, std::string>& names) {
  g.on_ns = g.rq_ns = g.idle_ns = g.accounted_ns = g.unattributed_ns = g.cpu_wait_ns = 0;
  std::fill(std::begin(g.blocked_ns), std::end(g.blocked_ns), 0);
  g.rows.clear();
  g.dispatch = bpfdiag::Histogram();
  for (const auto& [tid, d] : deltas) {
    ThreadRow r;
    r.tid = tid;
    auto n = names.find(tid);
    r.name = n == names.end() ? "?" : n->second;
    r.on_ns = d.on_ns;
    uint64_t wake_moved = 0, blk = 0;  // runnable time after idle/GIL waits
    for (const auto& [k, w] : d.waits)
      for (int c = 0; c < kNumWakes; ++c) {
        if (!w.blk_ns[c] && !w.wake_rq_ns[c]) continue;
        blk += w.blk_ns[c];
        int cat = g.work.category(tid, k, c);
        if (cat == kIdle) {
          r.idle_ns += w.blk_ns[c] + w.wake_rq_ns[c];
          wake_moved += w.wake_rq_ns[c];
        } else if (cat == kGil) {
          r.blocked_ns[kGil] += w.blk_ns[c] + w.wake_rq_ns[c];
          wake_moved += w.wake_rq_ns[c];
        } else {
          r.blocked_ns[cat] += w.blk_ns[c];
        }
      }
    // blocked time the waits map missed (map full) stays visible as "other"
    if (d.blk_ns > blk) {
      r.blocked_ns[kOther] += d.blk_ns - blk;
      g.unattributed_ns += d.blk_ns - blk;
    }
    wake_moved = std::min(wake_moved, d.rq_ns);
    r.rq_ns = d.rq_ns - wake_moved;
    r.cpu_wait_ns = d.rq_ns;
    for (const auto& [idx, c] : d.rq_hist) g.dispatch.add_bucket(idx, c);
    g.on_ns += r.on_ns;
    g.rq_ns += r.rq_ns;
    g.cpu_wait_ns += r.cpu_wait_ns;
    g.idle_ns += r.idle_ns;
    for (int i = 0; i < kNumReasons; ++i) g.blocked_ns[i] += r.blocked_ns[i];
    g.rows.push_back(r);
  }
  totals(g);
}

uint64_t ProcessRow::total() const {
  uint64_t t = on_ns + rq_ns + idle_ns;
  for (auto b : blocked_ns) t += b;
  return t;
}

double ProcessRow::utilization() const {
  const uint64_t t = total(), not_busy = std::min(idle_ns + blocked_ns[kGil], t);
  return t ? static_cast<double>(t - not_busy) / t : 0.0;
}

std::vector<ProcessRow> process_rows(const std::vector<ThreadRow>& rows) {
  std::map<uint32_t, ProcessRow> by_pid;
  for (const auto& r : rows) {
    if (!r.pid) continue;
    ProcessRow& p = by_pid[r.pid];
    p.pid = r.pid;
    if (p.comm.empty() || r.tid == r.pid) p.comm = r.name;
    p.threads++;
    p.on_ns += r.on_ns;
    p.rq_ns += r.rq_ns;
    p.cpu_wait_ns += r.cpu_wait_ns;
    p.idle_ns += r.idle_ns;
    for (int i = 0; i < kNumReasons; ++i) p.blocked_ns[i] += r.blocked_ns[i];
  }
  std::vector<ProcessRow> out;
  for (auto& [pid, p] : by_pid) out.push_back(std::move(p));
  return out;
}

// The times a group's threads add up to (a report group, or its retired threads').
template <class To, class From>
void add_times(To& to, const From& from) {
  to.on_ns += from.on_ns;
  to.rq_ns += from.rq_ns;
  to.cpu_wait_ns += from.cpu_wait_ns;
  to.idle_ns += from.idle_ns;
  to.unattributed_ns += from.unattributed_ns;
  for (int i = 0; i < kNumReasons; ++i) to.blocked_ns[i] += from.blocked_ns[i];
  to.dispatch.merge(from.dispatch);
}

void fold(RetiredTimes& r, const GroupReport& a) {
  r.threads += a.rows.size();
  add_times(r, a);
}

void add_retired(GroupReport& g, const RetiredTimes& r) {
  g.threads += r.threads;
  add_times(g, r);
  totals(g);
}

}  // namespace threadpool
