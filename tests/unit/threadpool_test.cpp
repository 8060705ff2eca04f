#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "tools/threadpool/threadpool.h"

extern "C" {
#include "hist.h"
}

using namespace threadpool;

namespace {

bpfdiag::Result<Config> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "threadpool");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

constexpr int kFutex = 202;

// One wait of a thread: blocked `blk` ns (runnable `rq` ns after the wake-ups), ended
// by `wake` (default: a thread outside the pool).
struct W {
  WaitKey k;
  uint64_t blk = 0, rq = 0, count = 1;
  int wake = kByProcess;
};

ThreadTimes thread_with(std::vector<W> waits, uint64_t on = 0, uint64_t rq = 0) {
  ThreadTimes t;
  t.on_ns = on;
  t.rq_ns = rq;
  for (auto& w : waits) {
    auto& x = t.waits[w.k];
    x.blk_ns[w.wake] += w.blk;
    x.wake_rq_ns[w.wake] += w.rq;
    x.count += w.count;
    t.blk_ns += w.blk;
  }
  return t;
}

}  // namespace

TEST_CASE("parse_args: pid, pattern, interval and duration") {
  const std::string self = std::to_string(getpid());  // -p must name a live process
  auto c = parse({"-p", self, "--threads", "^worker", "-P", "-j", "-i", "2", "-d", "10"});
  REQUIRE(c.ok());
  CHECK(c->pids == std::vector<uint32_t>{static_cast<uint32_t>(getpid())});
  CHECK(!c->children);
  CHECK(*c->pattern == "^worker");
  CHECK(c->per_thread);
  CHECK(c->json);
  CHECK(*c->schedule.interval_ns == 2000000000ULL);
  CHECK(*c->schedule.duration_ns == 10000000000ULL);
  auto d = parse({"-p", "1", "-i", "500ms"});
  REQUIRE(d.ok());
  CHECK(*d->schedule.interval_ns == 500000000ULL);
  CHECK(!d->schedule.duration_ns);
}

TEST_CASE("parse_args: errors are values") {
  CHECK(parse({}).error() == "-p PID is required (or --cgroup/--container)");
  CHECK(!parse({"-p", "0"}).ok());
  CHECK(!parse({"-p", "12x"}).ok());
  CHECK(!parse({"-p", "5000000"}).ok());
  CHECK(parse({"-p", "1", "--threads", "("}).error().find("invalid --threads pattern") == 0);
  CHECK(!parse({"-p", "1", "--threads", ""}).ok());
  // a PID that does not exist is bad input (pid_max is at most 4194304, so this PID
  // can never be live); --ebpf needs no process
  CHECK(parse({"-p", "4194304"}).error() == "no process with PID 4194304");
  CHECK(parse({"-p", "4194304", "--ebpf"}).ok());
  CHECK(!parse({"-p", "1", "1"}).ok());  // no positional schedule: -i/-c/-d
  CHECK(!parse({"-p", "1", "-i", "1x"}).ok());
  CHECK(!parse({"-p", "1", "-c", "3"}).ok());  // a count needs an interval
  // a pool of processes: a PID list, or a parent and its children
  auto list = parse({"-p", "1," + std::to_string(getpid())});
  REQUIRE(list.ok());
  CHECK(list->pids == std::vector<uint32_t>{1, static_cast<uint32_t>(getpid())});
  CHECK(parse({"-p", "1", "--children"})->children);
  CHECK(!parse({"-p", "1", "--children", "2"}).ok());  // a flag: the parent is -p's
  CHECK(parse({"--children"}).error() == "-p PID is required (or --cgroup/--container)");
  CHECK(!parse({"-p", "1", "--bogus"}).ok());
  CHECK(parse({"-h"})->help);
}

TEST_CASE("help has usage, options and examples") {
  std::string h = help_text();
  CHECK(h.find("USAGE: threadpool [-p PID[,PID]] [--cgroup PATH] [--container ID] [--children] [--threads PATTERN] [-a] [-T] [-P] [-H] [-j] [--map-entries N] [-v] "
               "[-i TIME] [-c N] [-d TIME] [--prometheus FILE] [--listen ADDR:PORT] [--ebpf] [-h] [--version]\n") != std::string::npos);
  CHECK(h.find("OPTIONS:") != std::string::npos);
  CHECK(h.find("--max-threads") == std::string::npos);  // the older name is hidden
  CHECK(h.find("EXAMPLES:") != std::string::npos);
  CHECK(h.find("  threadpool -p 1234 -i 1 ") != std::string::npos);
}

TEST_CASE("wait classification") {
  CHECK(classify_wait(kFutex, 0) == kLock);
  CHECK(classify_wait(kFutex, 9) == kLock);
  CHECK(classify_wait(0, 0) == kIo);        // read
  CHECK(classify_wait(45, 0) == kIo);       // recvfrom
  CHECK(classify_wait(232, 0) == kPoll);    // epoll_wait
  CHECK(classify_wait(7, 0) == kPoll);      // poll
  CHECK(classify_wait(35, 0) == kSleep);    // nanosleep
  CHECK(classify_wait(230, 0) == kSleep);   // clock_nanosleep
  CHECK(classify_wait(-1, 0) == kOther);    // outside a syscall (page fault...)
  CHECK(classify_wait(9999, 0) == kOther);
  CHECK(is_event_wait(288));  // accept4
  CHECK(is_event_wait(43));   // accept
  CHECK(is_event_wait(281));  // epoll_pwait
  CHECK(!is_event_wait(0));
  CHECK(!is_event_wait(kFutex));
  CHECK(syscall_name(230) == "clock_nanosleep");
  CHECK(syscall_name(-1) == "(no syscall)");
  CHECK(std::string(reason_name(kIo)) == "io");
}

TEST_CASE("thread names group without their numbers") {
  CHECK(group_of_name("worker-12") == "worker");
  CHECK(group_of_name("pool_7") == "pool");
  CHECK(group_of_name("pool-1-thread-3") == "pool-1-thread");
  CHECK(group_of_name("httpd") == "httpd");
  CHECK(group_of_name("apache2") == "apache2");
  CHECK(group_of_name("42") == "42");
  CHECK(group_of_name("-7") == "-7");
  CHECK(group_of_name("w#3:1") == "w");
}

TEST_CASE("a wait is what ended it: producer, peer, timeout, runtime lock") {
  WaitKey cond{kFutex, 9, 0x1000}, mutex{kFutex, 0, 0x2000}, own{kFutex, 9, 0x3000};
  std::map<uint32_t, ThreadTimes> g;
  for (uint32_t tid = 1; tid <= 4; ++tid)
    g[tid] = thread_with({{cond, 1000, 10, 5, kByProcess},   // the acceptor hands work over
                          {mutex, 9000, 0, 50, kByPeer},      // a peer releases the lock
                          {own, 500, 0, 3, kTimedOut}});      // a timed wait runs out
  auto w = infer_work_waits(g, 4);
  CHECK(w.found);
  CHECK(w.category(1, cond, kByProcess) == kIdle);
  CHECK(w.category(1, mutex, kByPeer) == kLock);
  CHECK(w.category(1, own, kTimedOut) == kSleep);
  // a mutex held by a thread outside the pool is still a lock
  CHECK(w.category(1, mutex, kByProcess) == kLock);
  // in progress (unseen): what usually ends that wait for that thread
  CHECK(w.category(1, cond, kUnseen) == kIdle);
  CHECK(w.category(1, mutex, kUnseen) == kLock);
  CHECK(w.category(1, own, kUnseen) == kSleep);
  // nothing known: a condition wait is waiting for a producer, a mutex for its holder
  CHECK(w.category(9, WaitKey{kFutex, 9, 0x9000}, kUnseen) == kIdle);
  CHECK(w.category(9, WaitKey{kFutex, 0, 0x9000}, kUnseen) == kLock);
  CHECK(w.description.find("condition wait") != std::string::npos);
  CHECK(w.description.find("4/4 threads") != std::string::npos);
  CHECK(w.queue_users == std::set<uint32_t>{1, 2, 3, 4});
  CHECK(w.category(1, WaitKey{288, 0, 0}, kByOther) == kIdle);  // accept4
  CHECK(w.category(1, WaitKey{230, 0, 0}, kByPeer) == kSleep);  // clock_nanosleep
  CHECK(w.category(1, WaitKey{0, 0, 0}, kByOther) == kIo);      // read
  // the GIL: neither busy nor idle, whoever ends the wait
  auto gil = infer_work_waits(g, 4, 0, {{0x2000, "GIL (_PyRuntime+432)"}});
  CHECK(gil.category(1, mutex, kByPeer) == kGil);
  CHECK(gil.category(1, mutex, kTimedOut) == kGil);
  CHECK(gil.description.find("GIL (_PyRuntime+432)") != std::string::npos);
}

TEST_CASE("a queue word a producer wakes is idle even when peers pass wake-ups on") {
  // CPython's SimpleQueue / the JVM's LinkedBlockingQueue: a getter that took an item
  // wakes the next getter, so most wake-ups come from peers
  WaitKey q{kFutex, 9, 0x1000}, lock{kFutex, 9, 0x2000};
  std::map<uint32_t, ThreadTimes> g;
  for (uint32_t tid = 1; tid <= 3; ++tid)
    g[tid] = thread_with({{q, 800, 0, 9, kByPeer}, {q, 200, 0, 3, kByProcess},
                          {lock, 500, 0, 4, kByPeer}});
  auto w = infer_work_waits(g, 3);
  CHECK(w.work_words.count(0x1000));
  CHECK(w.category(1, q, kByPeer) == kIdle);
  // never woken from outside, a condition-style word, no site read: what a peer handed
  // over is not known (a lock? work?): unclassified, never a lock by default
  CHECK(w.category(1, lock, kByPeer) == kOther);
  // JVM threads park on their own words: one word per thread, described as such
  std::map<uint32_t, ThreadTimes> jvm;
  for (uint32_t tid = 1; tid <= 3; ++tid)
    jvm[tid] = thread_with({{WaitKey{kFutex, 9, 0x1000 * tid}, 100, 0, 2, kByProcess}});
  auto j = infer_work_waits(jvm, 3);
  CHECK(j.description.find("3 words, one per thread") != std::string::npos);
}

TEST_CASE("a futex wait's site decides what it is; peer-woken waits without one are unclassified") {
  // MariaDB pool-of-threads: standby workers sleep on a condition word of their own,
  // woken by a pool peer (the listener, a worker) when work arrives; a mutex word shared
  WaitKey mutex{kFutex, 0, 0x2000}, other{kFutex, 9, 0x3000};
  std::map<uint32_t, ThreadTimes> g;
  for (uint32_t tid = 1; tid <= 3; ++tid)
    g[tid] = thread_with({{WaitKey{kFutex, 9, 0x1000 * (tid + 8)}, 900, 0, 4, kByPeer},
                          {mutex, 50, 0, 2, kByPeer}, {other, 300, 0, 2, kByPeer}});
  SiteMap sites;
  for (uint32_t tid = 1; tid <= 3; ++tid) {
    sites[{tid, WaitKey{kFutex, 9, 0x1000 * (tid + 8)}}] =
        classify_site({"__futex_abstimed_wait_common", "__GI___pthread_cond_timedwait", "psi_cond_timedwait",
                       "get_event(worker_thread_t*, thread_group_t*, timespec*)+0x12c", "worker_main",
                       "start_thread"});
    sites[{tid, mutex}] = classify_site({"__GI___lll_lock_wait", "__GI___pthread_mutex_lock", "psi_mutex_lock",
                                         "get_event(worker_thread_t*, thread_group_t*, timespec*)+0x40"});
    sites[{tid, other}] = classify_site({"__futex_abstimed_wait_common", "__GI___pthread_cond_timedwait",
                                         "psi_cond_timedwait", "[unknown] (mariadbd+0x69eca3)", "handler::ha_index_read_map"});
  }
  CHECK(sites[{1, mutex}].category == kLock);
  CHECK(sites[{1, other}].category == kSiteUndecided);
  CHECK(sites[{1, other}].name == "pthread condition variable in handler::ha_index_read_map");
  auto w = infer_work_waits(g, 3, 0, {}, &sites);
  CHECK(w.category(2, WaitKey{kFutex, 9, 0x1000 * 10}, kByPeer) == kIdle);  // the site: get_event
  CHECK(w.category(2, mutex, kByPeer) == kLock);                           // pthread_mutex_lock
  CHECK(w.category(2, other, kByPeer) == kOther);                          // read, undecided
  CHECK(w.description.find("other futex waits") != std::string::npos);
  CHECK(w.description.find("in handler::ha_index_read_map (3 threads") != std::string::npos);
  // no site read: a mutex-style wait a peer ended is still a lock; a condition-style one
  // is unclassified, named by its word
  auto bare = infer_work_waits(g, 3);
  CHECK(bare.category(2, mutex, kByPeer) == kLock);
  CHECK(bare.category(2, WaitKey{kFutex, 9, 0x1000 * 10}, kByPeer) == kOther);
  CHECK(bare.description.find("site not read") != std::string::npos);
  // the GIL stays the GIL whatever the site says
  auto gil = infer_work_waits(g, 3, 0, {{0x2000, "GIL"}}, &sites);
  CHECK(gil.category(2, mutex, kByPeer) == kGil);
}

TEST_CASE("hand-off: a condition wait the thread leaves to take a request is a wait for work") {
  WaitKey standby{kFutex, 9, 0x1000}, cond{kFutex, 9, 0x2000};
  std::map<uint32_t, ThreadTimes> g;
  for (uint32_t tid = 1; tid <= 2; ++tid) {
    g[tid] = thread_with({{standby, 900, 0, 10, kByPeer}, {cond, 300, 0, 10, kByPeer}});
    g[tid].waits[standby].took = 5;  // half the wake-ups took a request: work handed over
    g[tid].waits[cond].took = 4;     // fewer: not
  }
  auto w = infer_work_waits(g, 2);
  CHECK(w.category(1, standby, kByPeer) == kIdle);
  CHECK(w.category(1, cond, kByPeer) == kOther);
  // the delta keeps the hand-offs of the interval
  ThreadTimes prev = g[1];
  g[1].waits[standby].took = 7;
  g[1].waits[standby].count = 12;
  CHECK(delta(g[1], &prev).waits[standby].took == 2);
}

TEST_CASE("poll is a work wait for a listener, I/O for queue workers; main thread left out") {
  // Apache worker MPM: workers park on the fd-queue condvar and poll() on the CGI
  // pipe while serving; the listener waits in epoll; the main thread reads a pipe.
  WaitKey cond{kFutex, 9, 0x1000}, poll{7, 0, 0}, epoll{232, 0, 0}, rd{0, 0, 0};
  std::map<uint32_t, ThreadTimes> g;
  g[100] = thread_with({{rd, 5000, 0, 1}});  // main thread, tid == pid
  g[101] = thread_with({{epoll, 4000, 0, 9, kByOther}});
  for (uint32_t tid = 102; tid < 106; ++tid)
    g[tid] = thread_with({{cond, 10, 0, 3}, {poll, 900, 0, 3, kByOther}});
  auto w = infer_work_waits(g, 6, 100);
  CHECK(w.is_idle(101, epoll));
  CHECK(!w.is_idle(102, poll));
  CHECK(w.is_idle(102, cond));
  CHECK(w.excluded.count(100));
  CHECK(w.description.find("main thread 100 left out") != std::string::npos);
  CHECK(w.description.find("epoll_wait (outside queue workers)") != std::string::npos);
  // a main thread that waits for work where the workers do stays in
  g[100] = thread_with({{cond, 10, 0, 1}});
  CHECK(infer_work_waits(g, 6, 100).excluded.empty());
  // CPython: the main thread waits for results on its own words (woken by workers,
  // from its point of view a producer): idle for it, but not where workers wait
  g[100] = thread_with({{WaitKey{kFutex, 9, 0x7000}, 5000, 0, 9}});
  CHECK(infer_work_waits(g, 6, 100).excluded.count(100));
  // nobody waits for work: nothing to compare with, nobody left out
  std::map<uint32_t, ThreadTimes> h;
  h[100] = thread_with({{rd, 5000, 0, 1}});
  h[101] = thread_with({{rd, 5000, 0, 1}});
  CHECK(infer_work_waits(h, 2, 100).excluded.empty());
}

TEST_CASE("threads that share the pool's name but not its behaviour are left out") {
  // CPython: every thread is "python3". Workers wait for work on the queue's word and
  // take the GIL; a monitor thread sleeps in a loop (and takes the GIL); a saturated
  // worker never waits for work but contends with the others on their lock; a
  // CPU-bound thread never waits for work and mostly runs; a thread seen blocking
  // twice is not enough evidence.
  WaitKey q{kFutex, 9, 0x1000}, gil{kFutex, 9, 0x5000}, lock{kFutex, 0, 0x2000},
      sleep{230, 0, 0}, own{kFutex, 9, 0x9000};
  std::map<uint64_t, std::string> rt{{0x5000, "GIL (_PyRuntime+432)"}};
  std::map<uint32_t, ThreadTimes> g;
  for (uint32_t tid = 101; tid <= 104; ++tid)
    g[tid] = thread_with({{q, 800, 0, 9, kByProcess}, {gil, 50, 0, 3, kByPeer},
                          {lock, 20, 0, 2, kByPeer}}, 100);
  // (on a loaded machine it waits for a CPU longer than it sleeps: the machine's, not its own)
  g[110] = thread_with({{sleep, 5000, 0, 50, kTimedOut}, {gil, 30, 0, 50, kByPeer}}, 50, 9000);
  g[111] = thread_with({{lock, 900, 0, 20, kByPeer}}, 100);
  g[112] = thread_with({{own, 100, 0, 20, kByProcess}, {sleep, 100, 0, 5, kTimedOut}}, 5000);
  g[113] = thread_with({{sleep, 5000, 0, 2, kTimedOut}}, 10);
  g[114] = thread_with({{sleep, 100, 0, 5, kTimedOut}}, 5000);
  auto w = infer_work_waits(g, 9, 100, rt);
  CHECK(w.excluded == std::set<uint32_t>{110});
  CHECK(w.description.find("thread 110 left out (never waited for work") != std::string::npos);
  CHECK(w.description.find("4/8 threads") != std::string::npos);
  // fewer than two threads waited for work: nothing to tell the pool by
  std::map<uint32_t, ThreadTimes> h{{101, g[101]}, {110, g[110]}};
  CHECK(infer_work_waits(h, 2, 100, rt).excluded.empty());
}

TEST_CASE("two pools under one name are told apart by the word they wait for work on") {
  // two CPython ThreadPoolExecutors (every thread "python3"): 4 workers idle on queue A,
  // 3 on queue B; all take the GIL and one lock; a monitor sleeps
  WaitKey qa{kFutex, 9, 0x1000}, qb{kFutex, 9, 0x2000}, gil{kFutex, 9, 0x5000},
      lock{kFutex, 0, 0x3000}, sleep{230, 0, 0};
  std::map<uint64_t, std::string> rt{{0x5000, "GIL (_PyRuntime+432)"}};
  std::map<uint32_t, ThreadTimes> g;
  for (uint32_t tid = 101; tid <= 104; ++tid)
    g[tid] = thread_with({{qa, 800, 0, 9, kByProcess}, {gil, 50, 0, 3, kByPeer},
                          {lock, 20, 0, 2, kByPeer}}, 100);
  for (uint32_t tid = 201; tid <= 203; ++tid)
    g[tid] = thread_with({{qb, 800, 0, 9, kByProcess}, {gil, 50, 0, 3, kByPeer},
                          {lock, 20, 0, 2, kByPeer}}, 100);
  g[300] = thread_with({{sleep, 5000, 0, 50, kTimedOut}}, 50);
  auto w = infer_work_waits(g, 8, 100, rt);
  auto pools = pools_by_work_word(g, w);
  REQUIRE(pools.size() == 2);
  CHECK(pools[0] == std::set<uint32_t>{101, 102, 103, 104});
  CHECK(pools[1] == std::set<uint32_t>{201, 202, 203});
  // one pool waiting on two words (a queue's lock and its condition): one pool
  g[104] = thread_with({{qa, 800, 0, 9, kByProcess}, {qb, 100, 0, 2, kByProcess}}, 100);
  CHECK(pools_by_work_word(g, infer_work_waits(g, 8, 100, rt)).empty());
  // threads that meet on words allocated per wait and reused (CPython's queue.Queue
  // waits on a new lock each time): no word holds most of their idle time, no pool
  std::map<uint32_t, ThreadTimes> churn{{101, g[101]}, {102, g[102]}, {103, g[103]}};
  for (uint32_t i = 0; i < 4; ++i) {
    WaitKey a{kFutex, 9, 0x8000 + 0x100 * i}, b{kFutex, 9, 0x8000 + 0x100 * (i + 1)};
    churn[301 + i] = thread_with({{a, 300, 0, 3, kByProcess}, {b, 300, 0, 3, kByProcess}});
  }
  CHECK(pools_by_work_word(churn, infer_work_waits(churn, 8, 100, rt)).empty());
  churn[305] = thread_with({{WaitKey{kFutex, 9, 0x8000}, 5000, 0, 3, kByProcess}});
  churn[306] = thread_with({{WaitKey{kFutex, 9, 0x8000}, 5000, 0, 3, kByProcess}});
  CHECK(pools_by_work_word(churn, infer_work_waits(churn, 10, 100, rt)).size() == 2);
  // a lone thread on its own word (a JVM thread parks on its own) is no second pool
  g.erase(201);
  g.erase(202);
  g[104] = thread_with({{qa, 800, 0, 9, kByProcess}}, 100);
  CHECK(pools_by_work_word(g, infer_work_waits(g, 6, 100, rt)).empty());
}

TEST_CASE("queue depth from accept/read spans") {
  // [0,10) [5,15) [20, still queued) over [0, 30)
  std::vector<std::pair<uint64_t, uint64_t>> spans = {{0, 10}, {5, 15}, {20, 0}};
  auto d = queue_depth(spans, 0, 30);
  CHECK(d.max == 2);
  CHECK(d.avg == doctest::Approx((10 + 10 + 10) / 30.0));
  // clipped to the interval; a span ending where another starts never overlaps
  auto e = queue_depth({{0, 10}, {10, 20}}, 5, 15);
  CHECK(e.max == 1);
  CHECK(e.avg == doctest::Approx(1.0));
  CHECK(queue_depth({}, 0, 10).avg == 0);
  CHECK(queue_depth({{1, 2}}, 10, 10).max == 0);
}

TEST_CASE("delta subtracts per field and per wait") {
  WaitKey k{kFutex, 9, 0x10};
  ThreadTimes a = thread_with({{k, 100, 10, 2}}, 50, 20);
  a.rq_hist[3] = 4;
  ThreadTimes b = thread_with({{k, 300, 30, 5}, {WaitKey{0, 0, 0}, 7, 0, 1}}, 80, 25);
  b.rq_hist[3] = 6;
  b.rq_hist[5] = 1;
  auto d = delta(b, &a);
  CHECK(d.on_ns == 30);
  CHECK(d.rq_ns == 5);
  CHECK(d.waits[k].blk() == 200);
  CHECK(d.waits[k].wake_rq() == 20);
  CHECK(d.waits[k].count == 3);
  CHECK(d.waits[(WaitKey{0, 0, 0})].blk() == 7);
  CHECK(d.rq_hist[3] == 2);
  CHECK(d.rq_hist[5] == 1);
  CHECK(delta(a, &b).on_ns == 0);  // counters reset (tid reuse): clamp, never wrap
  // a wait shown in progress (unseen) last time and resolved now: the delta's total
  // is the real one, not the whole wait again
  ThreadTimes p, q;
  p.waits[k].blk_ns[kUnseen] = 900;  // 900 ns in progress at the last snapshot
  q.waits[k].blk_ns[kByProcess] = 1000;  // ended at 1000 ns, by a producer
  auto e = delta(q, &p);
  CHECK(e.waits[k].blk() == 100);
  CHECK(e.waits[k].blk_ns[kByProcess] == 100);
}

namespace {

GroupReport pool(uint64_t on, uint64_t rq, uint64_t idle, uint64_t lock, uint64_t io,
                 uint64_t sleep) {
  // 4 threads over 1 s; idle is a condition wait, the rest by reason
  WaitKey cond{kFutex, 9, 0x1000}, mutex{kFutex, 0, 0x2000}, rd{0, 0, 0}, nap{230, 0, 0};
  GroupReport g;
  g.name = "worker";
  g.threads = 4;
  g.interval_ns = 1000000000ULL;
  g.work.found = true;
  std::map<uint32_t, ThreadTimes> d;
  std::map<uint32_t, std::string> names;
  for (uint32_t tid = 1; tid <= 4; ++tid) {
    d[tid] = thread_with({{cond, idle / 4, 0, 1, kByProcess}, {mutex, lock / 4, 0, 1, kByPeer},
                          {rd, io / 4, 0, 1, kByOther}, {nap, sleep / 4, 0, 1, kTimedOut}},
                         on / 4, rq / 4);
    d[tid].rq_hist[hist_fine_index(1000)] = 10;
    names[tid] = "worker-" + std::to_string(tid);
  }
  aggregate(g, d, names);
  return g;
}

}  // namespace

TEST_CASE("aggregate: utilisation and busy workers") {
  auto g = pool(1000000000, 1000000000, 2000000000, 0, 0, 0);
  CHECK(g.accounted_ns == 4000000000ULL);
  CHECK(g.utilization == doctest::Approx(0.5));
  CHECK(g.busy_avg == doctest::Approx(2.0));
  CHECK(g.idle_ns == 2000000000ULL);
  CHECK(g.rows.size() == 4);
  CHECK(g.dispatch.count() == 40);
}

TEST_CASE("aggregate: wake-up latency after a work wait counts as idle, not runnable") {
  WaitKey cond{kFutex, 9, 0x1000};
  GroupReport g;
  g.threads = 1;
  g.interval_ns = 100;
  std::map<uint32_t, ThreadTimes> d;
  d[1] = thread_with({{cond, 50, 10, 1}}, 30, 20);  // 20 runnable, 10 of it after the wait
  aggregate(g, d, {});
  CHECK(g.idle_ns == 60);
  CHECK(g.rq_ns == 10);
  CHECK(g.on_ns == 30);
  CHECK(g.accounted_ns == 100);
  CHECK(g.utilization == doctest::Approx(0.4));
}

TEST_CASE("retired threads: folded times add back to what aggregating them live gives") {
  // the whole group aggregated at once vs threads 3 and 4 retired (folded one at a
  // time with the same wait model) and added back to threads 1 and 2's aggregate
  auto whole = pool(1000000000, 400000000, 2000000000, 400000000, 200000000, 100000000);
  GroupReport live;
  live.name = "worker";
  live.interval_ns = whole.interval_ns;
  live.work = whole.work;
  WaitKey cond{kFutex, 9, 0x1000}, mutex{kFutex, 0, 0x2000}, rd{0, 0, 0}, nap{35, 0, 0};
  std::map<uint32_t, ThreadTimes> d;
  RetiredTimes r;
  for (uint32_t tid = 1; tid <= 4; ++tid) {
    ThreadTimes t = thread_with({{cond, 500000000, 0, 1, kByProcess}, {mutex, 100000000, 0, 1, kByPeer},
                                 {rd, 50000000, 0, 1, kByOther}, {nap, 25000000, 0, 1, kTimedOut}},
                                250000000, 100000000);
    t.rq_hist[hist_fine_index(1000)] = 10;
    if (tid <= 2) {
      d[tid] = t;
      continue;
    }
    GroupReport one;
    one.work = whole.work;
    aggregate(one, {{tid, t}}, {});
    fold(r, one);
  }
  aggregate(live, d, {});
  live.threads = 2;
  CHECK(r.threads == 2);
  add_retired(live, r);
  CHECK(live.threads == 4);
  CHECK(live.rows.size() == 2);  // no per-thread rows kept for retired threads
  CHECK(live.on_ns == whole.on_ns);
  CHECK(live.rq_ns == whole.rq_ns);
  CHECK(live.idle_ns == whole.idle_ns);
  for (int i = 0; i < kNumReasons; ++i) CHECK(live.blocked_ns[i] == whole.blocked_ns[i]);
  CHECK(live.accounted_ns == whole.accounted_ns);
  CHECK(live.utilization == doctest::Approx(whole.utilization));
  CHECK(live.busy_avg == doctest::Approx(whole.busy_avg));
  CHECK(live.dispatch.count() == 40);
  // nothing retired: nothing changes
  GroupReport same = whole;
  add_retired(same, RetiredTimes{});
  CHECK(same.accounted_ns == whole.accounted_ns);
  CHECK(same.threads == whole.threads);
}

TEST_CASE("a pool of processes: a row per process; wake-ups waiting for a CPU mean cpu-starved") {
  // nginx's workers on a saturated machine: two single-threaded processes, epoll_wait
  // ended by clients (idle); per thread over 1 s: on CPU 270 ms, blocked 400 ms, runnable
  // 330 ms of which 200 ms right after an epoll wake-up (counted as idle)
  const WaitKey ep{232, 0, 0};
  auto nginx = [&](uint64_t on, uint64_t blk, uint64_t wake_rq, uint64_t rq) {
    GroupReport g;
    g.name = "nginx";
    g.threads = 2;
    g.interval_ns = 1000000000ULL;
    std::map<uint32_t, ThreadTimes> d;
    for (uint32_t tid : {11u, 12u}) d[tid] = thread_with({{ep, blk, wake_rq, 100, kByOther}}, on, rq);
    aggregate(g, d, {{11, "nginx"}, {12, "nginx"}});
    for (auto& r : g.rows) r.pid = r.tid;  // each its own process
    g.processes = process_rows(g.rows);
    decide_verdict(g);
    return g;
  };
  auto g = nginx(270000000, 400000000, 200000000, 330000000);
  REQUIRE(g.processes.size() == 2);
  CHECK(g.processes[0].pid == 11);
  CHECK(g.processes[1].threads == 1);
  CHECK(g.processes[0].cpu_wait_ns == 330000000);  // every runnable period (schedstat's run_delay)
  CHECK(g.processes[0].rq_ns == 130000000);        // the busy part
  CHECK(g.processes[0].idle_ns == 600000000);
  CHECK(g.processes[0].utilization() == doctest::Approx(0.4));
  CHECK(g.cpu_wait_ns == 660000000);
  CHECK(g.verdict == "cpu-starved");
  CHECK(g.why.find("wait for a CPU 55%") != std::string::npos);  // 330 / (400 busy + 200 woken)
  // the same pool whose wake-ups hardly wait: idle, as before
  auto quiet = nginx(100000000, 880000000, 10000000, 20000000);
  CHECK(quiet.verdict == "idle");
  // rows of unknown process are left out of the per-process view
  std::vector<ThreadRow> rows(1);
  CHECK(process_rows(rows).empty());
}

TEST_CASE("verdicts") {
  auto starved = pool(1800000000, 2000000000, 200000000, 0, 0, 0);
  decide_verdict(starved);
  CHECK(starved.verdict == "cpu-starved");

  auto io = pool(200000000, 50000000, 2000000000, 0, 1750000000, 0);
  decide_verdict(io);
  CHECK(io.verdict == "blocked-on-io");

  auto locks = pool(500000000, 50000000, 1500000000, 1950000000, 0, 0);
  decide_verdict(locks);
  CHECK(locks.verdict == "blocked-on-locks");

  // requests taken without waiting: work queues although few threads are busy (MariaDB's
  // pool runs one thread per group at a time; its standby threads wait for work)
  auto capped = pool(700000000, 50000000, 3250000000, 0, 0, 0);
  capped.req.taken_known = 100;
  capped.req.taken_ready = 95;
  decide_verdict(capped);
  CHECK(capped.verdict == "pool-too-small");
  CHECK(capped.why.find("95% of those taken were waiting") != std::string::npos);
  auto waiting = pool(700000000, 50000000, 3250000000, 0, 0, 0);
  waiting.req.taken_known = 100;
  waiting.req.taken_ready = 30;  // workers mostly waited for their next request
  decide_verdict(waiting);
  CHECK(waiting.verdict == "idle");

  auto sleepy = pool(200000000, 0, 2000000000, 0, 0, 1800000000);
  decide_verdict(sleepy);
  CHECK(sleepy.verdict == "sleeping");

  auto idle = pool(400000000, 0, 3600000000, 0, 0, 0);
  decide_verdict(idle);
  CHECK(idle.verdict == "idle");

  auto small = pool(3900000000, 50000000, 50000000, 0, 0, 0);
  small.req.have_depth = true;
  small.req.requests = 100;
  small.req.depth.avg = 3.0;
  decide_verdict(small);
  CHECK(small.verdict == "pool-too-small");

  auto fine = pool(2000000000, 100000000, 1900000000, 0, 0, 0);
  decide_verdict(fine);
  CHECK(fine.verdict == "ok");

  GroupReport none;
  decide_verdict(none);
  CHECK(none.verdict == "no-data");
}

TEST_CASE("verdicts: the GIL is named; busy excludes waiting for it") {
  // 4 workers always have work, one runs at a time: 1 s on CPU, 3 s waiting for the GIL
  WaitKey gil{kFutex, 9, 0x5000};
  GroupReport g;
  g.name = "python3";
  g.threads = 4;
  g.interval_ns = 1000000000ULL;
  g.work = infer_work_waits({}, 4, 0, {{0x5000, "GIL (_PyRuntime+432)"}});
  std::map<uint32_t, ThreadTimes> d;
  for (uint32_t tid = 1; tid <= 4; ++tid)
    d[tid] = thread_with({{gil, 750000000, 0, 100, kByPeer}}, 250000000, 0);
  aggregate(g, d, {});
  CHECK(g.blocked_ns[kGil] == 3000000000ULL);
  CHECK(g.busy_avg == doctest::Approx(1.0));
  CHECK(g.utilization == doctest::Approx(0.25));
  decide_verdict(g);
  CHECK(g.verdict == "blocked-on-gil");
  CHECK(g.why.find("GIL 75%") != std::string::npos);
}

TEST_CASE("verdicts: data loss qualifies or withholds the verdict and names the option") {
  auto locks = pool(500000000, 50000000, 1500000000, 1950000000, 0, 0);
  locks.dropped = 3;
  locks.suggest_map_entries = 4096;
  decide_verdict(locks);
  CHECK(locks.verdict == "blocked-on-locks");  // little lost: qualified, kept
  CHECK(locks.why.find("data lost") != std::string::npos);
  CHECK(locks.why.find("--map-entries 4096") != std::string::npos);
  // pool threads untracked (threads map full): withheld
  auto untracked = pool(500000000, 50000000, 1500000000, 1950000000, 0, 0);
  untracked.untracked = 1000;
  untracked.suggest_map_entries = 8096;
  decide_verdict(untracked);
  CHECK(untracked.verdict == "uncertain");
  CHECK(untracked.why.find("verdict withheld (would be blocked-on-locks)") == 0);
  CHECK(untracked.why.find("--map-entries") != std::string::npos);
  // more than 5% of the time in waits the map could not hold: withheld
  auto lost = pool(500000000, 50000000, 1500000000, 1950000000, 0, 0);
  lost.unattributed_ns = lost.accounted_ns / 10;
  lost.dropped = 98016;
  decide_verdict(lost);
  CHECK(lost.verdict == "uncertain");
}

TEST_CASE("map sizes: from the target, or --max-threads") {
  Config c;
  CHECK(map_sizes(c, 10).threads == 1024);
  CHECK(map_sizes(c, 2001).threads == 8192);
  CHECK(map_sizes(c, 2001).waits == 131072);
  CHECK(map_sizes(c, 2001).hist == 262144);
  c.map_entries = 100;
  CHECK(map_sizes(c, 2001).threads == 100);
  CHECK(map_sizes(c, 2001).waits == 65536);
  auto r = parse({"-p", std::to_string(getpid()), "--map-entries", "50000"});
  REQUIRE(r);
  CHECK(r->map_entries == 50000);
  CHECK(parse({"-p", std::to_string(getpid()), "--max-threads", "2000"})->map_entries == 2000);  // alias
  CHECK(!parse({"-p", std::to_string(getpid()), "--map-entries", "10"}));
  CHECK(!parse({"-p", std::to_string(getpid()), "--map-entries", "x"}));
  CHECK(!parse({"-p", std::to_string(getpid()), "--map-entries", "99", "--max-threads", "99"}));
}

TEST_CASE("render: JSON record fields and text block") {
  auto g = pool(1000000000, 1000000000, 2000000000, 0, 0, 0);
  g.req.requests = 3;
  g.req.have_depth = true;
  for (uint64_t v : {1000, 2000, 3000}) {
    g.req.queue_wait.record(v);
    g.req.service.record(v * 10);
    g.req.response.record(v * 11);
  }
  decide_verdict(g);
  Config c;
  c.json = true;
  ReportMeta m;
  m.pid = 42;
  m.comm = "srv";
  m.window.interval_ns = 1000000000ULL;
  bpfdiag::DataQuality dq = empty_quality();
  dq.lost_events = 7;
  std::ostringstream os;
  render(os, c, m, {g}, dq);
  std::istringstream lines(os.str());
  std::string line;
  std::vector<nlohmann::json> recs;
  while (std::getline(lines, line)) recs.push_back(nlohmann::json::parse(line));
  REQUIRE(recs.size() == 2);
  auto j = recs[0];
  CHECK(j["type"] == "threadpool.group");
  CHECK(j["thread_count"] == 4);
  CHECK(j["utilization"].get<double>() == doctest::Approx(0.5));
  CHECK(j["request_count"] == 3);
  CHECK(j["queue_wait_p50_ns"].is_number_unsigned());
  CHECK(j["queue_wait_avg_ns"] == 2000);
  CHECK(j["service_p99_ns"].is_number_unsigned());
  CHECK(j["response_p90_ns"].is_number_unsigned());
  CHECK(j["dispatch_p50_ns"].is_number_unsigned());
  CHECK(j["dispatch_hist"]["buckets"].is_array());
  CHECK(j["blocked_total_ns"].contains("lock"));
  CHECK(j["blocked_total_ns"].contains("io"));
  CHECK(j["data_quality"]["lost_events"] == 7);
  CHECK(j["data_quality"]["threads_untracked"] == 0);  // fixed keys, zero when nothing happened
  CHECK(j["verdict"] == g.verdict);
  CHECK(j["threads"].size() == 4);
  CHECK(recs[1]["type"] == "threadpool.summary");
  CHECK(recs[1]["group_count"] == 1);
  CHECK(recs[1]["thread_count"] == 4);

  c.json = false;
  c.per_thread = true;
  c.hist = true;
  std::ostringstream txt;
  render(txt, c, m, {g}, dq);
  std::string t = txt.str();
  CHECK(t.find("\"worker\": 4 threads, 1.00s  verdict: " + g.verdict) != std::string::npos);
  CHECK(t.find("busy: avg 2.00") != std::string::npos);
  CHECK(t.find("queue wait  avg 2.00us") != std::string::npos);
  CHECK(t.find("data quality: lost events 7") != std::string::npos);
  for (size_t pos = 0, nl; (nl = t.find('\n', pos)) != std::string::npos; pos = nl + 1)
    CHECK_MESSAGE(nl - pos < 80, t.substr(pos, nl - pos));
}

TEST_CASE("BPF text uses raw tracepoints and no kernel headers") {
  std::string t = bpf_text();
  for (const char* p : {"RAW_TRACEPOINT_PROBE(sched_switch)", "RAW_TRACEPOINT_PROBE(sched_waking)",
                        "RAW_TRACEPOINT_PROBE(sys_enter)", "RAW_TRACEPOINT_PROBE(sys_exit)",
                        "BPF_PERF_OUTPUT(reqs)"})
    CHECK(t.find(p) != std::string::npos);
  CHECK(t.find("linux/sched.h") == std::string::npos);
  // prev_state (args[3]) exists only since 5.18: the state comes from task_struct
  CHECK(t.find("args[3]") == std::string::npos);
  CHECK(t.find("OFF_TASK_STATE") != std::string::npos);
}

TEST_CASE("/proc syscall arguments: hex only, junk is a value, never a throw") {
  uint64_t v = 1;
  CHECK(parse_syscall_arg("0x7ffd1234abcd", v));
  CHECK(v == 0x7ffd1234abcdULL);
  CHECK(parse_syscall_arg("0xffffffffffffffff", v));
  CHECK(v == ~0ULL);
  CHECK(parse_syscall_arg("80", v));
  CHECK(v == 0x80);
  v = 5;
  for (const char* bad : {"", "0x", "running", "-1", " 0x1", "0x1 ", "0x1g", "+1",
                          "0x10000000000000000"})
    CHECK_MESSAGE(!parse_syscall_arg(bad, v), bad);
  CHECK(v == 5);  // untouched on failure
}

TEST_CASE("render: no pool threads still gives a record with data quality") {
  Config c;
  c.json = true;
  ReportMeta m;
  m.pid = 42;
  m.comm = "srv";
  m.window.interval_ns = 1000000000ULL;
  m.target_exited = true;
  bpfdiag::DataQuality dq = empty_quality();
  dq.extra["closed_unread"] = 2;
  for (bool summary : {false, true}) {
    m.summary = summary;
    std::ostringstream os;
    render(os, c, m, {}, dq);
    std::string out = os.str();
    REQUIRE(std::count(out.begin(), out.end(), '\n') == 1);
    auto j = nlohmann::json::parse(out);
    CHECK(j["type"] == "threadpool.summary");
    CHECK(j["group_count"] == 0);
    CHECK(j["pid"] == 42);
    CHECK(j["target_exited"] == true);
    CHECK(j["data_quality"]["closed_unread"] == 2);
    CHECK(j["data_quality"]["lost_events"] == 0);
  }
  c.json = false;
  std::ostringstream txt;
  render(txt, c, m, {}, dq);
  CHECK(txt.str().find("no pool activity") != std::string::npos);
  CHECK(txt.str().find("data quality: lost events 0") != std::string::npos);
}

TEST_CASE("a main thread that hands the workers work is left out, even if it shares a lock") {
  // CPython: main submits (wakes the workers' queue waits) and shares a
  // threading.Semaphore's lock with them; the workers' queue is woken by main
  WaitKey q{kFutex, 9, 0x1000}, sem{kFutex, 9, 0x2000};
  std::map<uint32_t, ThreadTimes> g;
  g[100] = thread_with({{sem, 900, 0, 9, kByProcess}});  // main, woken by workers
  for (uint32_t tid = 101; tid <= 104; ++tid)
    g[tid] = thread_with({{q, 800, 0, 9, kByPeer}, {q, 10, 0, 1, kByMain},
                          {sem, 100, 0, 2, kByMain}});
  auto w = infer_work_waits(g, 5, 100);
  CHECK(w.excluded.count(100));
  CHECK(!w.main_in_pool);
  CHECK(w.category(101, q, kByPeer) == kIdle);  // 1.1% from main: a work word
  CHECK(w.category(101, q, kByMain) == kIdle);
  CHECK(w.description.find("4/4 threads") != std::string::npos);
  // a main thread that is one of the workers: its wake-ups are a peer's
  std::map<uint32_t, ThreadTimes> h;
  WaitKey m{kFutex, 0, 0x3000};
  for (uint32_t tid = 100; tid <= 103; ++tid)
    h[tid] = thread_with({{q, 500, 0, 3, kByProcess}, {m, 100, 0, 3, tid == 101 ? kByMain : kByPeer}});
  auto x = infer_work_waits(h, 4, 100);
  CHECK(x.excluded.empty());
  CHECK(x.main_in_pool);
  CHECK(x.category(101, m, kByMain) == kLock);
}

TEST_CASE("--threads patterns cannot crash or hang the tool (issue 9 item 3)") {
  // std::regex overflowed the stack on deep nesting and backtracked exponentially
  std::string deep = std::string(30000, '(') + "a" + std::string(30000, ')');
  auto r = parse({"-p", "1", "--threads", deep});
  REQUIRE(!r);
  CHECK(r.error().find("longer than 256") != std::string::npos);
  std::string evil;
  for (int i = 0; i < 40; ++i) evil += "(a*)*";
  evil += "b";
  auto re = compile_pattern(evil, nullptr);
  REQUIRE(re);
  CHECK(!pattern_search(*re, std::string(15, 'a') + "c"));  // returns (no backtracking blow-up)
  CHECK(pattern_search(*compile_pattern("^pool-[0-9]+-thread", nullptr), "pool-1-thread-3"));
  std::string err;
  CHECK(!compile_pattern("((", &err));
  CHECK(!err.empty());
}
