// threadpool's wait model: what a wait of a pool thread is (idle, lock, sleep, the
// GIL, I/O), from who ended it, and where a group waits for work. No BPF here.
#include <algorithm>
#include <array>
#include <cstdio>

#include "common/wait_sites.h"
#include "tools/threadpool/threadpool.h"

extern "C" {
#include <linux/types.h>

#include "threadpool_shared.h"
}

namespace threadpool {

namespace {

constexpr uint32_t kFutexWaitBitset = 9;

}  // namespace

namespace {

bool is_sleep_syscall(int nr) { return nr == 35 || nr == 230; }  // nanosleep, clock_nanosleep
bool is_accept(int nr) { return nr == TP_NR_ACCEPT || nr == TP_NR_ACCEPT4; }

// A wake class for a wait whose wake-up was not seen, when nothing is known: a
// condition/semaphore wait is ended by whoever produces what it waits for, a mutex
// wait by the holder.
int default_wake(const WaitKey& k) {
  if (k.nr == TP_NR_FUTEX) return k.op == kFutexWaitBitset ? kByProcess : kByPeer;
  return kByOther;
}

}  // namespace

namespace {

// A frame's function without its "+0x..." offset.
std::string frame_function(const std::string& f) {
  size_t at = f.find("+0x");
  return at == std::string::npos ? f : f.substr(0, at);
}

bool is_futex_plumbing(const std::string& f) {
  return f.rfind("__futex", 0) == 0 || f.rfind("futex", 0) == 0 || f.rfind("syscall", 0) == 0 ||
         f.rfind("__lll_", 0) == 0 || f.rfind("__GI_", 0) == 0 || f.rfind("[", 0) == 0;
}

int site_category(bpfdiag::WaitKind k) {
  switch (k) {
    case bpfdiag::WaitKind::Lock: return kLock;
    case bpfdiag::WaitKind::Idle: return kIdle;
    case bpfdiag::WaitKind::Sleep: return kSleep;
    case bpfdiag::WaitKind::Io: return kIo;
    case bpfdiag::WaitKind::Gil: return kGil;
    default: return kOther;  // a condition wait, a rule's "unclassified", a tracer's
  }
}

}  // namespace

WaitSite classify_site(const std::vector<std::string>& frames) {
  const bpfdiag::WaitRules& rules = bpfdiag::WaitRules::suite();
  const bpfdiag::WaitVerdict v = rules.classify(frames);
  WaitSite s;
  if (v.decided && v.frame < frames.size()) {
    s.category = site_category(v.kind);
    s.name = v.what + " (" + frame_function(frames[v.frame]) + ")";
    return s;
  }
  // no rule decides: named by the call site, past the mechanism (a via's frame), the
  // wrappers and the C library's futex plumbing
  size_t i = v.frame < frames.size() ? v.frame + 1 : 0;
  while (i < frames.size() && (rules.is_wrapper(frames[i]) || is_futex_plumbing(frames[i]))) ++i;
  const std::string at = i < frames.size() ? frame_function(frames[i]) : "[stack not reached]";
  s.name = (v.frame < frames.size() ? v.what : std::string("futex wait")) + " in " + at;
  return s;
}

int WorkWaits::category(uint32_t tid, const WaitKey& k, int wake) const {
  if (k.nr == TP_NR_FUTEX && runtime_locks.count(k.obj)) return kGil;
  const WaitSite* site = nullptr;
  if (k.nr == TP_NR_FUTEX) {
    auto s = sites.find({tid, k});
    if (s != sites.end()) site = &s->second;
    if (site && site->category != kSiteUndecided)
      return site->category == kSleep && sleep_is_idle ? kIdle : site->category;
    // woken, then took a request: work was handed over (whoever woke it)
    if (handoff.count({tid, k})) return kIdle;
  }
  if (is_sleep_syscall(k.nr)) return sleep_is_idle ? kIdle : kSleep;
  if (is_accept(k.nr)) return kIdle;
  if (is_event_wait(k.nr)) return queue_users.count(tid) ? kPoll : kIdle;
  if (wake < 0 || wake >= kNumWakes || wake == kUnseen) {
    auto it = usual.find({tid, k});
    if (it != usual.end()) {
      wake = it->second;
    } else {
      auto a = usual_any.find(k);
      wake = a != usual_any.end() ? a->second : default_wake(k);
    }
  }
  if (wake == kByMain) wake = main_in_pool ? kByPeer : kByProcess;
  if (k.nr == TP_NR_FUTEX) {
    if (wake == kTimedOut) return sleep_is_idle ? kIdle : kSleep;  // a timed wait nobody ended early
    // where work arrives from outside the pool, peers hand wake-ups on too (a queue's
    // getter that took an item wakes the next one): all waits there are for work
    if (k.op == kFutexWaitBitset && work_words.count(k.obj)) return kIdle;
    // a peer ended it: it released a mutex (mutex-style waits, when nothing better is
    // known), or handed over anything else: unclassified, never a lock by default
    if (wake == kByPeer)
      return !site && (k.op == 0 || k.op == 6 || k.op == 13) ? kLock : kOther;
    // ended from outside the pool: a producer (condition, semaphore) means work
    // arrived; a mutex is a lock held outside the pool
    return k.op == kFutexWaitBitset ? kIdle : kLock;
  }
  return classify_wait(k.nr, k.op);
}

namespace {

// --- thresholds ----------------------------------------------------------------------
// Hand-off: a condition-style wait after which the thread took a request at least
// 1/kHandoffShareDen of the times it waited is a wait for work. Half: chosen, not
// measured (MariaDB's standby workers take one nearly every time they are woken).
constexpr uint64_t kHandoffShareDen = 2;
// Producer share: a share of a condition/semaphore wait's woken time that someone
// outside the pool (or the main thread, when it submits work) ended, in percent. 1%
// came in with the squashed landing 1558a17 with no measurement behind it: chosen,
// not measured (any producer that is seen at all counts; a pool's own lock is never
// woken from outside, so the share only has to be above noise).
constexpr uint64_t kProducerSharePct = 1;
// Not a member: a thread that blocked at least this many times (721de71, chosen, not
// measured: test_threadpool_python's python3-named monitor thread is left out with
// it and its workers are not) ...
constexpr uint64_t kApartMinWaits = 3;
// ... once at least this many members waited for work (721de71: "once two members
// waited for work"; two is the least that makes a pool to compare with).
constexpr size_t kApartMinWorkers = 2;
// A work wait is one queue when this many threads wait for work on it (two: a word
// shared at all; fewer is JVM-style one word per thread). Chosen, not measured.
constexpr size_t kSharedWordMinThreads = 2;
// A pool split off by its work word needs one word with at least 1/kTopWordShare of
// its idle time (78d66c5: half; checked on a CPython queue.Queue pool of 8 at 300 and
// 600 items/s, which must stay one group: busy 1.24 / 4.82 vs 1.2 / 4.8 expected).
constexpr uint64_t kTopWordShare = 2;
// ... and at least two threads (a pool of one is a thread; threadpool.h). Chosen.
constexpr size_t kMinPoolThreads = 2;

// Members that are not the pool: once at least two members have waited for work, a
// thread (not the main one, judged apart) that blocked repeatedly (3 waits or more),
// blocked longer than it ran (time waiting for a CPU is the machine's, not the
// thread's), never waited for work, and never waited on a
// futex word a worker also waits on (the pool's locks and queues; a runtime lock such
// as the GIL does not count, every thread takes it). A worker of a saturated pool
// that never idles stays: it contends with its peers on their locks, or it runs.
std::set<uint32_t> threads_apart(const std::map<uint32_t, ThreadTimes>& group,
                                 const WorkWaits& w, const std::set<uint32_t>& waiters,
                                 uint32_t pid) {
  std::set<uint32_t> out, workers;
  for (uint32_t t : waiters)
    if (t != pid) workers.insert(t);
  if (workers.size() < kApartMinWorkers) return out;
  std::set<uint64_t> worker_words;
  for (uint32_t t : workers)
    for (const auto& [k, wt] : group.at(t).waits)
      if (k.nr == TP_NR_FUTEX && k.obj && !w.runtime_locks.count(k.obj)) worker_words.insert(k.obj);
  for (const auto& [tid, t] : group) {
    if (tid == pid || workers.count(tid)) continue;
    uint64_t count = 0, blk = 0;
    bool shares = false;
    for (const auto& [k, wt] : t.waits) {
      count += wt.count;
      blk += wt.blk();
      if (k.nr == TP_NR_FUTEX && worker_words.count(k.obj)) shares = true;
    }
    if (!shares && count >= kApartMinWaits && blk > t.on_ns) out.insert(tid);
  }
  return out;
}

using Group = std::map<uint32_t, ThreadTimes>;
using WakeTotals = std::map<WaitKey, std::array<uint64_t, kNumWakes>>;

bool is_condition_wait(const WaitKey& k, const std::map<uint64_t, std::string>& runtime_locks) {
  return k.nr == TP_NR_FUTEX && k.op == kFutexWaitBitset && !runtime_locks.count(k.obj);
}

// The usual (most time) resolved wake class per thread and wait (w.usual), and per
// wait over the group (w.usual_any); returns the blocked time per wait and wake class.
WakeTotals usual_wakes(const Group& group, WorkWaits& w) {
  WakeTotals any;
  for (const auto& [tid, t] : group)
    for (const auto& [k, wt] : t.waits) {
      int best = -1;
      uint64_t best_t = 0;
      for (int c = 0; c < kNumWakes; ++c) {
        if (c == kUnseen) continue;
        any[k][c] += wt.blk_ns[c];
        if (wt.blk_ns[c] > best_t) best = c, best_t = wt.blk_ns[c];
      }
      if (best >= 0) w.usual[{tid, k}] = best;
    }
  for (const auto& [k, a] : any) {
    int best = -1;
    uint64_t best_t = 0;
    for (int c = 0; c < kNumWakes; ++c)
      if (c != kUnseen && a[c] > best_t) best = c, best_t = a[c];
    if (best >= 0) w.usual_any[k] = best;
  }
  return any;
}

// Does the main thread end the others' condition/semaphore waits (hand them work)?
bool main_produces_work(const Group& group, uint32_t pid, const std::map<uint64_t, std::string>& runtime_locks) {
  uint64_t by_main = 0, woken_all = 0;
  for (const auto& [tid, t] : group)
    for (const auto& [k, wt] : t.waits)
      if (tid != pid && is_condition_wait(k, runtime_locks)) {
        by_main += wt.blk_ns[kByMain];
        for (int c : {kByPeer, kByProcess, kByOther, kByMain}) woken_all += wt.blk_ns[c];
      }
  return pid && group.count(pid) && by_main && by_main * 100 >= woken_all * kProducerSharePct;
}

// Work words: condition/semaphore words that threads outside the pool end waits on (a
// producer) for a share of the woken time; a lock of the pool's own never is (futex
// wake-ups come from the releasing thread; timeouts are apart).
void find_work_words(const WakeTotals& any, WorkWaits& w) {
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> woken;  // word -> {outside, all}
  for (const auto& [k, a] : any)
    if (is_condition_wait(k, w.runtime_locks)) {
      auto& x = woken[k.obj];
      x.first += a[kByProcess] + a[kByOther] + (w.main_in_pool ? 0 : a[kByMain]);
      x.second += a[kByPeer] + a[kByProcess] + a[kByOther] + a[kByMain];
    }
  for (const auto& [obj, x] : woken)
    if (x.first && x.first * 100 >= x.second * kProducerSharePct) w.work_words.insert(obj);
}

// Queue users: threads whose futex waits are (partly) waits for work.
void find_queue_users(const Group& group, WorkWaits& w) {
  for (const auto& [tid, t] : group)
    for (const auto& [k, wt] : t.waits)
      if (k.nr == TP_NR_FUTEX)
        for (int c = 0; c < kNumWakes; ++c)
          if (wt.blk_ns[c] && w.category(tid, k, c) == kIdle) w.queue_users.insert(tid);
}

struct IdleSite {
  std::set<uint32_t> tids;
  uint64_t ns = 0;
};
// Where the group waits for work (idle time and threads per wait), and what else.
struct IdleSeen {
  std::map<WaitKey, IdleSite> sites;
  std::set<uint32_t> waiters;    // threads that waited for work
  std::set<uint64_t> gil_words;  // runtime locks waited on
  bool io_polls = false;         // some event wait is a queue worker's poll, not idle
};

IdleSeen collect_idle(const Group& group, const WorkWaits& w) {
  IdleSeen seen;
  for (const auto& [tid, t] : group)
    for (const auto& [k, wt] : t.waits)
      for (int c = 0; c < kNumWakes; ++c) {
        if (!wt.blk_ns[c]) continue;
        int cat = w.category(tid, k, c);
        if (cat == kIdle) {
          seen.sites[k].tids.insert(tid);
          seen.sites[k].ns += wt.blk_ns[c];
          seen.waiters.insert(tid);
        } else if (cat == kGil) {
          seen.gil_words.insert(k.obj);
        } else if (is_event_wait(k.nr)) {
          seen.io_polls = true;
        }
      }
  return seen;
}

// The main thread stays only if it waits for work where another member does, and
// never when it submits the work.
void judge_main_thread(const Group& group, uint32_t pid, bool main_produces, IdleSeen& seen, WorkWaits& w) {
  if (pid && group.count(pid) && group.size() > 1 && !seen.waiters.empty()) {
    bool shares = false;
    for (const auto& [k, s] : seen.sites)
      if (s.tids.count(pid) && s.tids.size() >= kSharedWordMinThreads) shares = true;
    if (!shares) w.excluded.insert(pid);
  }
  if (main_produces) w.excluded.insert(pid);  // a submitter, not a worker
  if (!w.excluded.count(pid)) return;
  w.main_in_pool = false;
  for (auto it = seen.sites.begin(); it != seen.sites.end();) {
    it->second.tids.erase(pid);
    it = it->second.tids.empty() ? seen.sites.erase(it) : std::next(it);
  }
}

// --- wording -------------------------------------------------------------------------

// Where the pool waits for work, in words ("" when nowhere): the futex site (one word
// several threads share, a queue's condition variable; or one word per thread, as JVM
// threads each park on their own), then the event waits.
std::string describe_work_sites(const IdleSeen& seen, size_t members) {
  std::string desc;
  auto add = [&](const std::string& s) { desc += (desc.empty() ? "" : ", ") + s; };
  std::vector<std::pair<uint64_t, WaitKey>> fut;
  std::set<uint32_t> fut_threads;
  for (const auto& [k, s] : seen.sites)
    if (k.nr == TP_NR_FUTEX) {
      fut.push_back({s.ns, k});
      fut_threads.insert(s.tids.begin(), s.tids.end());
    }
  std::sort(fut.rbegin(), fut.rend());
  if (!fut.empty()) {
    const IdleSite& top = seen.sites.at(fut.front().second);
    const std::string of_n = "/" + std::to_string(members) + " threads)";
    if (top.tids.size() >= kSharedWordMinThreads || fut.size() == 1)
      add(describe_wait(fut.front().second) + " ended from outside the pool (" +
          std::to_string(top.tids.size()) + of_n);
    else
      add("futex waits on " + std::to_string(fut.size()) + " words, one per thread (" +
          std::to_string(fut_threads.size()) + of_n + ", ended from outside the pool");
  }
  std::set<std::string> events;
  for (const auto& [k, s] : seen.sites)
    if (k.nr != TP_NR_FUTEX) events.insert(syscall_name(k.nr));
  for (const auto& e : events)
    add(e + (seen.io_polls && e.find("accept") == std::string::npos ? " (outside queue workers)" : ""));
  return desc;
}

// Futex waits that are neither work, locks nor the GIL (condition waits, waits a peer
// ended that no site rule decides): by site, most time first, at most three.
std::string describe_other_sites(const Group& group, const WorkWaits& w) {
  std::map<std::string, std::pair<uint64_t, std::set<uint32_t>>> by;
  for (const auto& [tid, t] : group) {
    if (w.excluded.count(tid)) continue;
    for (const auto& [k, wt] : t.waits) {
      if (k.nr != TP_NR_FUTEX) continue;
      for (int c = 0; c < kNumWakes; ++c) {
        if (!wt.blk_ns[c] || w.category(tid, k, c) != kOther) continue;
        auto s = w.sites.find({tid, k});
        auto& e = by[s != w.sites.end() ? s->second.name : "futex wait, site not read (" + describe_wait(k) + ")"];
        e.first += wt.blk_ns[c];
        e.second.insert(tid);
      }
    }
  }
  std::vector<std::pair<uint64_t, std::string>> top;
  for (const auto& [name, e] : by) {
    char b[64];
    std::snprintf(b, sizeof b, " (%zu thread%s, %.2f s)", e.second.size(), e.second.size() > 1 ? "s" : "",
                  e.first / 1e9);
    top.push_back({e.first, name + b});
  }
  if (top.empty()) return "";
  std::sort(top.rbegin(), top.rend());
  std::string out = "; other futex waits (unclassified or condition): ";
  for (size_t i = 0; i < top.size() && i < 3; ++i) out += (i ? ", " : "") + top[i].second;
  if (top.size() > 3) out += ", " + std::to_string(top.size() - 3) + " more sites";
  return out;
}

// What was left aside: runtime locks, the main thread, threads apart.
std::string describe_left_out(const IdleSeen& seen, const WorkWaits& w, uint32_t pid,
                              const std::set<uint32_t>& others) {
  std::string desc;
  if (!seen.gil_words.empty()) {
    std::string names;
    for (auto o : seen.gil_words) {
      auto it = w.runtime_locks.find(o);
      if (names.find(it->second) == std::string::npos)
        names += (names.empty() ? "" : ", ") + it->second;
    }
    desc += "; runtime lock: " + names + " (waiting for it is neither busy nor idle)";
  }
  if (w.excluded.count(pid))
    desc += "; main thread " + std::to_string(pid) + " left out (does not wait for work as "
            "the others do)";
  if (!others.empty()) {
    std::string tids;
    for (uint32_t t : others) tids += (tids.empty() ? "" : ", ") + std::to_string(t);
    desc += "; " + std::string(others.size() > 1 ? "threads " : "thread ") + tids +
            " left out (never waited for work, share no lock with the workers)";
  }
  return desc;
}

}  // namespace

WorkWaits infer_work_waits(const std::map<uint32_t, ThreadTimes>& group, size_t nthreads,
                           uint32_t pid, const std::map<uint64_t, std::string>& runtime_locks,
                           const SiteMap* sites) {
  WorkWaits w;
  w.runtime_locks = runtime_locks;
  if (sites)
    for (const auto& [tid, t] : group)
      for (const auto& [k, wt] : t.waits) {
        auto s = sites->find({tid, k});
        if (s != sites->end()) w.sites.emplace(s->first, s->second);
      }
  for (const auto& [tid, t] : group)
    for (const auto& [k, wt] : t.waits)
      if (k.nr == TP_NR_FUTEX && k.op == kFutexWaitBitset && wt.took && wt.took * kHandoffShareDen >= wt.count)
        w.handoff.insert({tid, k});
  const WakeTotals any = usual_wakes(group, w);
  const bool main_produces = main_produces_work(group, pid, runtime_locks);
  w.main_in_pool = pid && group.count(pid) && !main_produces;
  find_work_words(any, w);
  find_queue_users(group, w);
  IdleSeen seen = collect_idle(group, w);
  judge_main_thread(group, pid, main_produces, seen, w);
  // threads that share a name with the pool but not its behaviour (a timer, a monitor,
  // a flusher: every thread of a CPython process is "python3"): left out
  const std::set<uint32_t> others = threads_apart(group, w, seen.waiters, pid);
  w.excluded.insert(others.begin(), others.end());
  std::string desc = describe_work_sites(seen, (nthreads ? nthreads : group.size()) - w.excluded.size());
  w.found = !desc.empty();
  w.sleep_is_idle = !w.found;
  if (!w.found) desc = "none seen (no thread waited for work; timed sleeps counted as waiting for work)";
  w.description = desc + describe_other_sites(group, w) + describe_left_out(seen, w, pid, others);
  return w;
}

std::vector<std::set<uint32_t>> pools_by_work_word(const std::map<uint32_t, ThreadTimes>& group,
                                                   const WorkWaits& w) {
  // union-find over threads, joined through the work words they wait for work on
  std::map<uint32_t, uint32_t> parent;
  auto root = [&](uint32_t t) {
    while (parent[t] != t) t = parent[t] = parent[parent[t]];
    return t;
  };
  std::map<uint64_t, uint32_t> first_on_word;
  std::map<uint64_t, uint64_t> word_ns;  // idle time per work word
  for (const auto& [tid, t] : group) {
    if (w.excluded.count(tid)) continue;
    for (const auto& [k, wt] : t.waits) {
      if (k.nr != TP_NR_FUTEX || !w.work_words.count(k.obj)) continue;
      uint64_t idle = 0;
      for (int c = 0; c < kNumWakes; ++c)
        if (w.category(tid, k, c) == kIdle) idle += wt.blk_ns[c];
      if (!idle) continue;
      word_ns[k.obj] += idle;
      if (!parent.count(tid)) parent[tid] = tid;
      auto [it, fresh] = first_on_word.emplace(k.obj, tid);
      if (!fresh) parent[root(tid)] = root(it->second);
    }
  }
  std::map<uint32_t, std::set<uint32_t>> comp;
  for (auto& [tid, _] : parent) comp[root(tid)].insert(tid);
  // a pool has its queue: one word with most of its idle time (threads that meet on
  // words allocated per wait and reused, as CPython's queue.Queue does, are no pool)
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> comp_ns;  // root -> {top word, all}
  for (auto& [obj, ns] : word_ns) {
    auto& c = comp_ns[root(first_on_word[obj])];
    c.first = std::max(c.first, ns);
    c.second += ns;
  }
  std::vector<std::set<uint32_t>> out;
  for (auto& [r, tids] : comp)
    if (tids.size() >= kMinPoolThreads && comp_ns[r].first * kTopWordShare >= comp_ns[r].second)
      out.push_back(std::move(tids));
  if (out.size() < 2) return {};
  std::sort(out.begin(), out.end(), [](const std::set<uint32_t>& a, const std::set<uint32_t>& b) {
    return a.size() != b.size() ? a.size() > b.size() : *a.begin() < *b.begin();
  });
  return out;
}

}  // namespace threadpool
