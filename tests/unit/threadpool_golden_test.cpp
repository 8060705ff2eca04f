// Whole-report golden files: threadpool's text and NDJSON output from a fixed model
// fixture (no BPF), compared with tests/golden/threadpool_*; UPDATE_GOLDEN=1 rewrites.
#include <doctest/doctest.h>

#include <sstream>

#include "tools/threadpool/threadpool.h"
#include "tests/unit/golden.h"

extern "C" {
#include "hist.h"
}

using namespace threadpool;

using bpfdiag_test::check_golden;

namespace {


constexpr int kFutex = 202;

// A 4-worker pool over 1 s: 35% on CPU, some dispatch latency, condition waits for
// work (ended by a producer), a contended mutex (ended by peers), reads and sleeps;
// requests on an accepted socket; and a single listener thread. `pool`: the workers
// are two processes' (201: 101-102, 202: 103-104), as nginx's or php-fpm's would be.
std::vector<GroupReport> fixture(bool pool = false) {
  const WaitKey cond{kFutex, 9, 0x1000}, mutex{kFutex, 0, 0x2000}, rd{0, 0, 0}, nap{230, 0, 0};
  GroupReport g;
  g.name = "worker";
  g.threads = 4;
  g.interval_ns = 1000000000ULL;
  std::map<uint32_t, ThreadTimes> d;
  std::map<uint32_t, std::string> names;
  for (uint32_t tid = 101; tid <= 104; ++tid) {
    ThreadTimes t;
    t.on_ns = 80000000ULL + tid * 1000000ULL;
    t.rq_ns = 20000000ULL;
    auto& w = t.waits[cond];
    w.blk_ns[kByProcess] = 500000000ULL;
    w.wake_rq_ns[kByProcess] = 5000000ULL;
    w.count = 50;
    t.waits[mutex].blk_ns[kByPeer] = 200000000ULL;
    t.waits[mutex].count = 20;
    t.waits[rd].blk_ns[kByOther] = 150000000ULL - tid * 1000000ULL;
    t.waits[rd].count = 10;
    t.waits[nap].blk_ns[kTimedOut] = 45000000ULL;
    t.waits[nap].count = 5;
    t.blk_ns = 500000000ULL + 200000000ULL + t.waits[rd].blk_ns[kByOther] + 45000000ULL;
    for (uint64_t ns : {2000ULL, 15000ULL, 150000ULL}) t.rq_hist[hist_fine_index(ns)] = 10;
    d[tid] = t;
    names[tid] = "worker-" + std::to_string(tid - 100);
  }
  g.work.found = true;
  g.work.work_words = {0x1000};
  g.work.description = "futex (condition wait) on 0x1000";
  aggregate(g, d, names);
  for (auto& r : g.rows) r.pid = pool ? (r.tid <= 102 ? 201 : 202) : 100;
  g.processes = process_rows(g.rows);
  g.busy_max = 3;
  g.req.requests = 120;
  g.req.have_depth = true;
  g.req.depth = {0.25, 3};
  for (uint64_t i = 1; i <= 120; ++i) {
    g.req.queue_wait.record(1000 * i);
    g.req.service.record(50000 + 100 * i);
    g.req.response.record(51000 + 1100 * i);
  }
  decide_verdict(g);

  GroupReport l;
  l.name = "listener";
  l.threads = 1;
  l.interval_ns = 1000000000ULL;
  std::map<uint32_t, ThreadTimes> ld;
  ThreadTimes t;
  t.on_ns = 10000000ULL;
  t.waits[WaitKey{232, 0, 0}].blk_ns[kByOther] = 990000000ULL;
  t.blk_ns = 990000000ULL;
  ld[100] = t;
  l.work.found = true;
  l.work.description = "epoll_wait";
  aggregate(l, ld, {{100, "listener"}});
  l.rows[0].pid = 100;
  l.processes = process_rows(l.rows);
  decide_verdict(l);
  return {g, l};
}

std::string render_with(const Config& c, bool summary, bool pool = false) {
  ReportMeta m;
  m.pid = 100;
  m.pids = pool ? std::vector<uint32_t>{100, 201, 202} : std::vector<uint32_t>{100};
  m.comm = "server";
  m.summary = summary;
  m.window = bpfdiag::Window{1700000000000000000ULL, 1000000000ULL, summary};
  bpfdiag::DataQuality dq = empty_quality();
  dq.add("closed_unread", 1);
  dq.add("state_assumed_at_start", 5);
  std::ostringstream os;
  render(os, c, m, fixture(pool), dq);
  return os.str();
}

}  // namespace

TEST_CASE("threadpool golden: text reports") {
  Config c;
  c.pids = {100};
  check_golden("threadpool_interval.txt", render_with(c, false));
  c.per_thread = true;
  c.hist = true;
  check_golden("threadpool_summary_per_thread.txt", render_with(c, true));
}

TEST_CASE("threadpool golden: NDJSON reports") {
  Config c;
  c.pids = {100};
  c.json = true;
  check_golden("threadpool_interval.ndjson", render_with(c, false));
  check_golden("threadpool_summary.ndjson", render_with(c, true));
}

TEST_CASE("threadpool golden: a pool of processes, a line per process") {
  Config c;
  c.pids = {100, 201, 202};
  check_golden("threadpool_pool.txt", render_with(c, true, true));
  c.json = true;
  check_golden("threadpool_pool.ndjson", render_with(c, true, true));
}
