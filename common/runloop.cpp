#include "common/runloop.h"

#include <signal.h>
#include <time.h>

#include <algorithm>

namespace bpfdiag {
namespace {

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

int pending_stop_signal(int wait_ms) {
  sigset_t set = stop_set();
  struct timespec ts = {wait_ms / 1000, (wait_ms % 1000) * 1000000L};
  int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

}  // namespace

uint64_t monotonic_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + ts.tv_nsec;
}

uint64_t realtime_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + ts.tv_nsec;
}

void block_stop_signals() {
  sigset_t set = stop_set();
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

int run_loop(const Schedule& s, const RunHooks& hooks) {
  const uint64_t start = monotonic_ns();
  uint64_t next_tick = s.interval_ns ? start + *s.interval_ns : UINT64_MAX;
  const uint64_t end = s.duration_ns ? start + *s.duration_ns : UINT64_MAX;
  uint64_t ticks = 0;
  int sig = 0;
  while (true) {
    uint64_t now = monotonic_ns();
    uint64_t wake = std::min(next_tick, end);
    int budget = wake <= now ? 0 : static_cast<int>(std::min<uint64_t>((wake - now) / 1000000ULL + 1, 100));
    if (hooks.poll) {
      hooks.poll(budget);
      sig = pending_stop_signal(0);
    } else {
      sig = pending_stop_signal(budget);
    }
    if (sig) break;
    if (hooks.should_stop && hooks.should_stop()) break;
    now = monotonic_ns();
    if (now >= end) break;
    if (now >= next_tick) {
      ++ticks;
      if (s.count && ticks >= *s.count) break;  // the last interval is the final report
      if (hooks.report) hooks.report(false);
      next_tick += *s.interval_ns;
      if (next_tick <= now) next_tick = now + *s.interval_ns;
    }
  }
  if (hooks.report) hooks.report(true);
  return sig;
}

}  // namespace bpfdiag
