// Built -O2 -fomit-frame-pointer (issue 11): two threads block from named functions
// three calls deep, as Debian-built software does, so frame-pointer unwinding loses
// them:
//   uw_pipe  pipe_loop -> pipe_stage -> block_in_pipe_read -> read()   (~900 ms)
//   uw_cond  cond_loop -> cond_stage -> block_in_cond_wait -> pthread_cond_wait (~400 ms)
// A driver thread writes one byte every pipe_ms and signals every cond_ms.
// Usage: unwind_io_nofp [pipe_reads=9] [pipe_ms=100] [cond_waits=4] [cond_ms=100]
//                       [start_delay_ms=0; -1: start on stdin]
// Prints the JSON report described in unwind_truth.h.
#include <cstdlib>
#include <thread>

#include "unwind_truth.h"

static int g_pipe[2];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_gen = 0;

UW_FN uint64_t block_in_pipe_read() {
  uint64_t ns = uw::timed_read(g_pipe[0]);
  UW_KEEP;
  return ns;
}
UW_FN uint64_t pipe_stage() {
  uint64_t ns = block_in_pipe_read();
  UW_KEEP;
  return ns;
}
UW_FN void pipe_loop(uw::Result* r, int n) {
  for (int i = 0; i < n; ++i) r->blocked_ns += pipe_stage(), r->calls++;
  UW_KEEP;
}

UW_FN uint64_t block_in_cond_wait(int want) {
  pthread_mutex_lock(&g_mu);
  uint64_t ns = 0;
  while (g_gen < want) {
    uint64_t t0 = uw::now_ns();
    pthread_cond_wait(&g_cv, &g_mu);
    ns += uw::now_ns() - t0;
  }
  pthread_mutex_unlock(&g_mu);
  UW_KEEP;
  return ns;
}
UW_FN uint64_t cond_stage(int want) {
  uint64_t ns = block_in_cond_wait(want);
  UW_KEEP;
  return ns;
}
UW_FN void cond_loop(uw::Result* r, int n) {
  for (int i = 1; i <= n; ++i) r->blocked_ns += cond_stage(i), r->calls++;
  UW_KEEP;
}

int main(int argc, char** argv) {
  uw::PipeCondArgs a;
  if (!uw::parse_pipe_cond(argc, argv, a)) {
    std::fprintf(stderr, "usage: unwind_io_nofp [pipe_reads] [pipe_ms] [cond_waits] [cond_ms] [start_delay_ms]\n");
    return 2;
  }
  if (pipe(g_pipe) != 0) return 1;
  uw::start_gate(a.start_delay);
  std::vector<uw::Result> res = {{"uw_pipe", "block_in_pipe_read", {"pipe_loop", "pipe_stage"}},
                                 {"uw_cond", "block_in_cond_wait", {"cond_loop", "cond_stage"}}};
  std::thread tp([&] { uw::name_self(res[0]); pipe_loop(&res[0], a.pipe_reads); uw::done(res[0]); });
  std::thread tc([&] { uw::name_self(res[1]); cond_loop(&res[1], a.cond_waits); uw::done(res[1]); });
  auto drivers = uw::start_drivers(a, g_pipe[1], &g_mu, &g_cv, &g_gen);
  tp.join(), tc.join();
  for (auto& d : drivers) d.join();
  uw::print_report(res);
  return 0;
}
