// threadpool's wait model: what a wait of a pool thread is (idle, lock, sleep, the
// GIL, I/O), from who ended it, and where a group waits for work. No BPF here.
#include <algorithm>
#include <array>

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

int WorkWaits::category(uint32_t tid, const WaitKey& k, int wake) const {
  if (k.nr == TP_NR_FUTEX && runtime_locks.count(k.obj)) return kGil;
  if (is_sleep_syscall(k.nr)) return kSleep;
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
    if (wake == kTimedOut) return kSleep;  // a timed wait nobody ended early
    // where work arrives from outside the pool, peers hand wake-ups on too (a queue's
    // getter that took an item wakes the next one): all waits there are for work
    if (k.op == kFutexWaitBitset && work_words.count(k.obj)) return kIdle;
    if (wake == kByPeer) return kLock;     // a peer released what it waited for
    // ended from outside the pool: a producer (condition, semaphore) means work
    // arrived; a mutex is a lock held outside the pool
    return k.op == kFutexWaitBitset ? kIdle : kLock;
  }
  return classify_wait(k.nr, k.op);
}

namespace {

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
  if (workers.size() < 2) return out;
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
    if (!shares && count >= 3 && blk > t.on_ns) out.insert(tid);
  }
  return out;
}

}  // namespace

WorkWaits infer_work_waits(const std::map<uint32_t, ThreadTimes>& group, size_t nthreads,
                           uint32_t pid, const std::map<uint64_t, std::string>& runtime_locks) {
  WorkWaits w;
  w.runtime_locks = runtime_locks;
  // the usual (most time) resolved wake class per thread and wait, and per wait
  std::map<WaitKey, std::array<uint64_t, kNumWakes>> any;
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
  // does the main thread end the others' condition/semaphore waits (hand them work)?
  uint64_t by_main = 0, woken_all = 0;
  for (const auto& [tid, t] : group)
    for (const auto& [k, wt] : t.waits)
      if (tid != pid && k.nr == TP_NR_FUTEX && k.op == kFutexWaitBitset &&
          !runtime_locks.count(k.obj)) {
        by_main += wt.blk_ns[kByMain];
        for (int c : {kByPeer, kByProcess, kByOther, kByMain}) woken_all += wt.blk_ns[c];
      }
  const bool main_produces = pid && group.count(pid) && by_main && by_main * 100 >= woken_all;
  w.main_in_pool = pid && group.count(pid) && !main_produces;
  // work words: condition/semaphore words that threads outside the pool end waits on
  // (a producer) for at least 1% of the woken time; a lock of the pool's own never
  // is (futex wake-ups come from the releasing thread; timeouts are apart)
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> woken;  // word -> {outside, all}
  for (const auto& [k, a] : any)
    if (k.nr == TP_NR_FUTEX && k.op == kFutexWaitBitset && !runtime_locks.count(k.obj)) {
      auto& x = woken[k.obj];
      x.first += a[kByProcess] + a[kByOther] + (w.main_in_pool ? 0 : a[kByMain]);
      x.second += a[kByPeer] + a[kByProcess] + a[kByOther] + a[kByMain];
    }
  for (const auto& [obj, x] : woken)
    if (x.first && x.first * 100 >= x.second) w.work_words.insert(obj);
  // queue users: threads whose futex waits are (partly) waits for work
  for (const auto& [tid, t] : group)
    for (const auto& [k, wt] : t.waits)
      if (k.nr == TP_NR_FUTEX)
        for (int c = 0; c < kNumWakes; ++c)
          if (wt.blk_ns[c] && w.category(tid, k, c) == kIdle) w.queue_users.insert(tid);
  // where the group waits for work: idle time and threads per wait
  struct Site {
    std::set<uint32_t> tids;
    uint64_t ns = 0;
  };
  std::map<WaitKey, Site> idle;
  std::set<uint32_t> waiters;
  uint64_t gil_ns = 0;
  std::set<uint64_t> gil_words;
  bool io_polls = false;
  for (const auto& [tid, t] : group)
    for (const auto& [k, wt] : t.waits)
      for (int c = 0; c < kNumWakes; ++c) {
        if (!wt.blk_ns[c]) continue;
        int cat = w.category(tid, k, c);
        if (cat == kIdle) {
          idle[k].tids.insert(tid);
          idle[k].ns += wt.blk_ns[c];
          waiters.insert(tid);
        } else if (cat == kGil) {
          gil_ns += wt.blk_ns[c];
          gil_words.insert(k.obj);
        } else if (is_event_wait(k.nr)) {
          io_polls = true;
        }
      }
  // the main thread stays only if it waits for work where another member does
  if (pid && group.count(pid) && group.size() > 1 && !waiters.empty()) {
    bool shares = false;
    for (const auto& [k, s] : idle)
      if (s.tids.count(pid) && s.tids.size() >= 2) shares = true;
    if (!shares) w.excluded.insert(pid);
  }
  if (main_produces) w.excluded.insert(pid);  // a submitter, not a worker
  if (w.excluded.count(pid)) {
    w.main_in_pool = false;
    for (auto it = idle.begin(); it != idle.end();) {
      it->second.tids.erase(pid);
      it = it->second.tids.empty() ? idle.erase(it) : std::next(it);
    }
  }
  // threads that share a name with the pool but not its behaviour (a timer, a monitor,
  // a flusher: every thread of a CPython process is "python3"): left out
  const std::set<uint32_t> others = threads_apart(group, w, waiters, pid);
  w.excluded.insert(others.begin(), others.end());
  std::string desc;
  auto add = [&](const std::string& s) { desc += (desc.empty() ? "" : ", ") + s; };
  // futex sites: one word shared by several threads (a queue's condition variable),
  // or one word per thread (JVM threads each park on their own)
  std::vector<std::pair<uint64_t, WaitKey>> fut;
  std::set<uint32_t> fut_threads;
  for (const auto& [k, s] : idle)
    if (k.nr == TP_NR_FUTEX) {
      fut.push_back({s.ns, k});
      fut_threads.insert(s.tids.begin(), s.tids.end());
    }
  std::sort(fut.rbegin(), fut.rend());
  if (!fut.empty()) {
    const Site& top = idle[fut.front().second];
    const size_t n = (nthreads ? nthreads : group.size()) - w.excluded.size();
    if (top.tids.size() >= 2 || fut.size() == 1)
      add(describe_wait(fut.front().second) + " ended from outside the pool (" +
          std::to_string(top.tids.size()) + "/" + std::to_string(n) + " threads)");
    else
      add("futex waits on " + std::to_string(fut.size()) + " words, one per thread (" +
          std::to_string(fut_threads.size()) + "/" + std::to_string(n) +
          " threads), ended from outside the pool");
  }
  std::set<std::string> events;
  for (const auto& [k, s] : idle)
    if (k.nr != TP_NR_FUTEX) events.insert(syscall_name(k.nr));
  for (const auto& e : events)
    add(e + (io_polls && e.find("accept") == std::string::npos ? " (outside queue workers)" : ""));
  w.found = !desc.empty();
  if (!w.found) desc = "none seen (no thread waited for work)";
  if (!gil_words.empty()) {
    std::string names;
    for (auto o : gil_words) {
      auto it = runtime_locks.find(o);
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
  w.description = desc;
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
    if (tids.size() >= 2 && comp_ns[r].first * 2 >= comp_ns[r].second) out.push_back(std::move(tids));
  if (out.size() < 2) return {};
  std::sort(out.begin(), out.end(), [](const std::set<uint32_t>& a, const std::set<uint32_t>& b) {
    return a.size() != b.size() ? a.size() > b.size() : *a.begin() < *b.begin();
  });
  return out;
}

}  // namespace threadpool
