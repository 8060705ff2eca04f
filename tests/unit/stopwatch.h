// Time a bounded operation took, net of the time the scheduler kept this thread waiting
// for a CPU. The unit tests run beside the integration suite as SCHED_IDLE (scripts/test),
// where a test that saturates both CPUs can keep them off a CPU for seconds: a bound on
// raw wall time then fails for the scheduler's reasons, not the code's. What stays in
// is the time this thread ran or blocked (a FIFO open that hangs still counts in full).
#pragma once
#include <time.h>

#include <cstdint>
#include <cstdio>

namespace bpfdiag_test {

// This thread's total time spent runnable but waiting for a CPU (ns; 0 if unknown):
// the second field of /proc/thread-self/schedstat.
inline uint64_t run_delay_ns() {
  FILE* f = std::fopen("/proc/thread-self/schedstat", "r");
  unsigned long long on_cpu = 0, waited = 0;
  if (f) {
    if (std::fscanf(f, "%llu %llu", &on_cpu, &waited) != 2) waited = 0;
    std::fclose(f);
  }
  return waited;
}

inline uint64_t monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

class Stopwatch {
 public:
  Stopwatch() : wall0_(monotonic_now_ns()), delay0_(run_delay_ns()) {}
  // wall time since construction minus this thread's run-queue delay over it
  double seconds() const {
    const uint64_t wall = monotonic_now_ns() - wall0_, delay = run_delay_ns() - delay0_;
    return (wall > delay ? wall - delay : 0) / 1e9;
  }
  double ms() const { return seconds() * 1e3; }

 private:
  uint64_t wall0_, delay0_;
};

}  // namespace bpfdiag_test
