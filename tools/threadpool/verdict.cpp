// threadpool verdict: what limits a group of worker threads, from its time split, and
// whether data loss leaves the answer in doubt.
#include <algorithm>
#include <cstdio>
#include <string>

#include "tools/threadpool/threadpool.h"

namespace threadpool {

namespace {

// --- thresholds ----------------------------------------------------------------------
// None of these was set by a measurement: they came with the first cut (12596c2) or
// the pool-too-small rework (390fb71) and the squashed landing (1558a17), and no
// commit records a run that chose them. Chosen, not measured; the integration tests
// (test_threadpool*) pass with them on workloads far from every boundary.
// Verdict withheld when more than 1/kLossShareDen of the pool's time lost its wait (5%).
constexpr uint64_t kLossShareDen = 20;
// blocked-on-gil: GIL waits are at least this percentage of the time workers have work.
constexpr uint64_t kGilPctOfWork = 30;
// Requests queue when the average queue depth is at least this (idle needs none queued).
constexpr double kQueuedDepth = 0.5;
// idle: workers busy less than this share of the time.
constexpr double kIdleUtil = 0.25;
// pool-too-small: busy at least this share of the time (390fb71) and the queue grows:
// depth at least kGrowingDepth on average, or requests wait in the queue at least
// 1/kQueueWaitShareDen of their service time.
constexpr double kSaturatedUtil = 0.9;
constexpr double kGrowingDepth = 1.0;
constexpr uint64_t kQueueWaitShareDen = 2;
// cpu-starved / blocked-on-*: at least this share of busy time waiting for a CPU, or
// blocked on one kind of wait.
constexpr double kCpuStarvedShare = 0.3;
constexpr double kBlockedShare = 0.3;
// cpu-starved from the whole CPU wait (wake-ups for work included): the pool wants a
// CPU (on CPU or runnable) at least this share of its time (as kIdleUtil, below it the
// pool is idle whatever its wake-ups wait).
constexpr double kCpuDemandShare = kIdleUtil;
// Work queues when at least kReadyPct% of the requests workers took (of at least
// kMinTaken taken by a thread that had answered one before) were taken without the
// worker blocking since its last response: the request was waiting for it. Chosen, not
// measured: MariaDB pool-of-threads with 32 clients on 2 CPUs, requests queued 92-97%
// of the time by THREAD_POOL_GROUPS, takes (see the commit) far above it.
constexpr uint64_t kReadyPct = 50;
constexpr uint64_t kMinTaken = 20;

bool taken_ready(const GroupReport& g) {
  return g.req.taken_known >= kMinTaken && g.req.taken_ready * 100 >= g.req.taken_known * kReadyPct;
}

// Loss that can change the verdict: pool threads not tracked at all, or more than 5%
// of the pool's time whose wait was dropped (waits map full).
bool significant_loss(const GroupReport& g) {
  return g.untracked > 0 || g.unattributed_ns * kLossShareDen > g.accounted_ns;
}

std::string loss_text(const GroupReport& g) {
  char b[256];
  std::snprintf(b, sizeof b,
                "%llu updates dropped (maps full), %llu threads untracked, %llu events lost",
                static_cast<unsigned long long>(g.dropped),
                static_cast<unsigned long long>(g.untracked),
                static_cast<unsigned long long>(g.lost_events));
  return b;
}

// A runnable worker woken for work counts as idle in the time split (it has not begun
// the work), so a pool whose every wake-up waits long for a CPU (nginx workers on a
// saturated machine) can look idle or merely busy. The rule of cpu-starved, with the
// whole CPU wait (the kernel's run_delay) in place of the busy runnable time: at least
// kCpuStarvedShare of the busy time plus those wake-ups' waits, and no kind of blocking
// larger; that time at least kCpuDemandShare of the pool's time.
bool starved_of_cpu(GroupReport& g, uint64_t busy, uint64_t blocked_max) {
  const uint64_t wake_wait = g.cpu_wait_ns > g.rq_ns ? g.cpu_wait_ns - g.rq_ns : 0;
  const uint64_t wanted = busy + wake_wait;
  if (!wanted || g.cpu_wait_ns < blocked_max) return false;
  const double share = static_cast<double>(g.cpu_wait_ns) / wanted;
  if (share < kCpuStarvedShare || wanted < kCpuDemandShare * g.accounted_ns) return false;
  char why[320];
  std::snprintf(why, sizeof why, "workers wait for a CPU %.0f%% of the time they want one (wake-ups too)",
                100 * share);
  g.verdict = "cpu-starved";
  g.why = why;
  return true;
}

void decide(GroupReport& g) {
  char why[320];
  if (g.accounted_ns == 0) {
    g.verdict = "no-data";
    g.why = "no scheduler activity recorded for these threads";
    return;
  }
  const uint64_t idle = std::min(g.idle_ns, g.accounted_ns);
  const uint64_t working = g.accounted_ns - idle;  // busy + waiting for the GIL
  const uint64_t gil = g.blocked_ns[kGil];
  const uint64_t busy = working - std::min(gil, working);
  const double util = g.utilization;
  if (working && gil * 100 >= working * kGilPctOfWork) {
    std::snprintf(why, sizeof why,
                  "workers wait for the GIL %.0f%% of the time they have work; only one runs "
                  "Python at a time (%.2f busy on average): use processes or code that "
                  "releases the GIL",
                  100.0 * gil / working, g.busy_avg);
    g.verdict = "blocked-on-gil";
    g.why = why;
    return;
  }
  const uint64_t blocked_max = std::max({g.blocked_ns[kLock], g.blocked_ns[kIo] + g.blocked_ns[kPoll],
                                         g.blocked_ns[kSleep], g.blocked_ns[kOther]});
  if (starved_of_cpu(g, busy, blocked_max)) return;
  const bool ready = taken_ready(g);
  const bool queued = (g.req.have_depth && g.req.depth.avg >= kQueuedDepth) || ready;
  if (util < kIdleUtil && !queued) {
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
  const double f_sleep = frac(g.blocked_ns[kSleep]);
  const double f_other = frac(g.blocked_ns[kOther]);
  const double f_blk = std::max({f_lock, f_io, f_sleep, f_other});
  const char* blk_name = f_blk == f_lock    ? "locks"
                         : f_blk == f_io    ? "I/O"
                         : f_blk == f_sleep ? "sleep (timed waits nobody ended early)"
                                            : "other waits";
  // "too small" needs evidence of queueing, which only request tracking gives
  bool growing = false;
  if (g.req.have_depth && g.req.requests)
    growing = g.req.depth.avg >= kGrowingDepth ||
              g.req.queue_wait.mean() * kQueueWaitShareDen >= std::max<uint64_t>(g.req.service.mean(), 1);
  const bool saturated = util >= kSaturatedUtil && growing;
  const double ready_pct = g.req.taken_known ? 100.0 * g.req.taken_ready / g.req.taken_known : 0;
  if (f_rq >= kCpuStarvedShare && f_rq >= f_blk) {
    std::snprintf(why, sizeof why,
                  "busy workers wait for a CPU %.0f%% of their busy time (on CPU %.0f%%)",
                  100 * f_rq, 100 * f_on);
    g.verdict = "cpu-starved";
  } else if (ready && !saturated && !(f_blk >= kBlockedShare && f_blk > f_on)) {
    std::snprintf(why, sizeof why,
                  "requests queue: %.0f%% of those taken were waiting for a worker (taken without "
                  "blocking since its last response) while %.2f threads of %zu are busy on average: "
                  "the pool runs no more at a time (its concurrency cap or the CPUs)",
                  ready_pct, g.busy_avg, g.threads);
    g.verdict = "pool-too-small";
  } else if (saturated) {
    std::snprintf(why, sizeof why,
                  "all workers busy (%.0f%%) and work queues (depth avg %.1f); busy time: on "
                  "CPU %.0f%%, blocked on %s %.0f%%",
                  100 * util, g.req.depth.avg, 100 * f_on, blk_name, 100 * f_blk);
    g.verdict = "pool-too-small";
  } else if (f_blk >= kBlockedShare && f_blk > f_on) {
    if (f_blk == f_sleep) {
      std::snprintf(why, sizeof why,
                    "busy workers sleep %.0f%% of their busy time (timed waits nobody ended "
                    "early); utilisation %.0f%%",
                    100 * f_blk, 100 * util);
      g.verdict = "sleeping";
    } else {
      std::snprintf(why, sizeof why, "busy workers are blocked on %s %.0f%% of their busy time",
                    blk_name, 100 * f_blk);
      g.verdict = f_blk == f_lock ? "blocked-on-locks" : f_blk == f_io ? "blocked-on-io"
                                                                       : "blocked-other";
    }
  } else {
    std::snprintf(why, sizeof why, "busy %.0f%%, mostly on CPU (%.0f%% of busy time)", 100 * util,
                  100 * f_on);
    g.verdict = "ok";
  }
  g.why = why;
}

}  // namespace

void decide_verdict(GroupReport& g) {
  decide(g);
  if (!g.dropped && !g.untracked && !g.lost_events) return;
  const std::string hint =
      g.suggest_map_entries ? "; rerun with --map-entries " + std::to_string(g.suggest_map_entries)
                            : "; rerun with a larger --map-entries";
  if (significant_loss(g)) {
    g.why = "verdict withheld (would be " + g.verdict + "): " + loss_text(g) + hint;
    g.verdict = "uncertain";
  } else {
    g.why += " (data lost: " + loss_text(g) + hint + ")";
  }
}

}  // namespace threadpool
