// Built -O2 -fomit-frame-pointer (issue 11): a thread burns CPU in a named function
// three calls deep, for an on-CPU profiler to place:
//   uw_burn  burn_loop -> burn_stage -> burn_leaf (spins ms_per_call of its own CPU time)
// Frame pointers lose burn_stage and burn_loop (the callers' return addresses are not
// chained); DWARF unwinding finds them.
// Usage: unwind_cpu_nofp [calls=10] [ms_per_call=50] [start_delay_ms=0; -1: start on stdin]
// Prints the JSON report described in unwind_truth.h; "blocked_ns" is the thread's CPU
// time inside burn_leaf (CLOCK_THREAD_CPUTIME_ID), which a sampler at F Hz should hit
// about F times per second of.
#include <cstdlib>
#include <thread>

#include "unwind_truth.h"

static long g_ms = 50;
static volatile uint64_t g_sink;

static uint64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

UW_FN uint64_t burn_leaf() {
  uint64_t t0 = thread_cpu_ns(), end = t0 + g_ms * 1000000ULL, x = t0, now;
  do {
    for (int i = 0; i < 10000; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    g_sink = x;
  } while ((now = thread_cpu_ns()) < end);
  UW_KEEP;
  return now - t0;
}
UW_FN uint64_t burn_stage() {
  uint64_t ns = burn_leaf();
  UW_KEEP;
  return ns;
}
UW_FN void burn_loop(uw::Result* r, int n) {
  for (int i = 0; i < n; ++i) r->blocked_ns += burn_stage(), r->calls++;
  UW_KEEP;
}

int main(int argc, char** argv) {
  int calls = argc > 1 ? std::atoi(argv[1]) : 10;
  g_ms = argc > 2 ? std::atol(argv[2]) : 50;
  long start_delay = argc > 3 ? std::atol(argv[3]) : 0;
  if (calls < 1 || g_ms < 1 || start_delay < -1) {
    std::fprintf(stderr, "usage: unwind_cpu_nofp [calls] [ms_per_call] [start_delay_ms]\n");
    return 2;
  }
  uw::start_gate(start_delay);
  std::vector<uw::Result> res = {{"uw_burn", "burn_leaf", {"burn_loop", "burn_stage"}}};
  std::thread t([&] { uw::name_self(res[0]); burn_loop(&res[0], calls); uw::done(res[0]); });
  t.join();
  uw::print_report(res);
  return 0;
}
