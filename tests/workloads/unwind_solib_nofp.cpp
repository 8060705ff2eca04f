// Built -O2 -fomit-frame-pointer and linked against libunwind_blk.so, our own stripped
// shared library (issue 11): the blocking functions and their direct callers live in
// the stripped library, the outer loops in the executable:
//   uw_so_pipe  so_pipe_loop -> ublk_read_stage -> ublk_block_in_read -> read()
//   uw_so_cond  so_cond_loop -> ublk_cond_stage -> ublk_block_in_cond_wait -> pthread_cond_wait
// Usage: unwind_solib_nofp [pipe_reads=9] [pipe_ms=100] [cond_waits=4] [cond_ms=100]
//                          [start_delay_ms=0; -1: start on stdin]
// Prints the JSON report described in unwind_truth.h.
#include <cstdlib>
#include <thread>

#include "unwind_truth.h"

extern "C" uint64_t ublk_read_stage(int fd);
extern "C" uint64_t ublk_cond_stage(pthread_mutex_t* mu, pthread_cond_t* cv, const int* gen, int want);

static int g_pipe[2];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_gen = 0;

UW_FN void so_pipe_loop(uw::Result* r, int n) {
  for (int i = 0; i < n; ++i) r->blocked_ns += ublk_read_stage(g_pipe[0]), r->calls++;
  UW_KEEP;
}
UW_FN void so_cond_loop(uw::Result* r, int n) {
  for (int i = 1; i <= n; ++i) r->blocked_ns += ublk_cond_stage(&g_mu, &g_cv, &g_gen, i), r->calls++;
  UW_KEEP;
}

int main(int argc, char** argv) {
  uw::PipeCondArgs a;
  if (!uw::parse_pipe_cond(argc, argv, a)) {
    std::fprintf(stderr, "usage: unwind_solib_nofp [pipe_reads] [pipe_ms] [cond_waits] [cond_ms] [start_delay_ms]\n");
    return 2;
  }
  if (pipe(g_pipe) != 0) return 1;
  uw::start_gate(a.start_delay);
  std::vector<uw::Result> res = {{"uw_so_pipe", "ublk_block_in_read", {"so_pipe_loop", "ublk_read_stage"}},
                                 {"uw_so_cond", "ublk_block_in_cond_wait", {"so_cond_loop", "ublk_cond_stage"}}};
  std::thread tp([&] { uw::name_self(res[0]); so_pipe_loop(&res[0], a.pipe_reads); uw::done(res[0]); });
  std::thread tc([&] { uw::name_self(res[1]); so_cond_loop(&res[1], a.cond_waits); uw::done(res[1]); });
  auto drivers = uw::start_drivers(a, g_pipe[1], &g_mu, &g_cv, &g_gen);
  tp.join(), tc.join();
  for (auto& d : drivers) d.join();
  uw::print_report(res);
  return 0;
}
