// Built -O2 -fomit-frame-pointer (issue 11): one thread waits on a contended mutex and
// one sleeps, each from a named function three calls deep:
//   uw_mutex  mutex_loop -> mutex_stage -> block_in_mutex_lock -> pthread_mutex_lock
//   uw_sleep  sleep_loop -> sleep_stage -> block_in_nanosleep -> nanosleep
// A holder thread (uw_holder) takes the mutex and holds it hold_ms each round; the
// waiter only asks for it once the holder has it, so every wait is contended.
// Usage: unwind_lock_nofp [rounds=8] [hold_ms=50] [sleeps=8] [sleep_ms=50]
//                         [start_delay_ms=0; -1: start on stdin]
// Prints the JSON report described in unwind_truth.h.
#include <atomic>
#include <cstdlib>
#include <thread>

#include "unwind_truth.h"

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static std::atomic<int> g_held{0}, g_acquired{0};
static long g_sleep_ms = 50;

UW_FN uint64_t block_in_mutex_lock() {
  uint64_t t0 = uw::now_ns();
  pthread_mutex_lock(&g_mu);
  uint64_t t1 = uw::now_ns();
  pthread_mutex_unlock(&g_mu);
  UW_KEEP;
  return t1 - t0;
}
UW_FN uint64_t mutex_stage() {
  uint64_t ns = block_in_mutex_lock();
  UW_KEEP;
  return ns;
}
UW_FN void mutex_loop(uw::Result* r, int n) {
  for (int i = 1; i <= n; ++i) {
    while (g_held.load() < i) {  // spin (on CPU) until the holder has the lock
    }
    r->blocked_ns += mutex_stage(), r->calls++;
    g_acquired.store(i);
  }
  UW_KEEP;
}

UW_FN uint64_t block_in_nanosleep() {
  timespec ts{g_sleep_ms / 1000, (g_sleep_ms % 1000) * 1000000L};
  uint64_t t0 = uw::now_ns();
  nanosleep(&ts, nullptr);
  uint64_t t1 = uw::now_ns();
  UW_KEEP;
  return t1 - t0;
}
UW_FN uint64_t sleep_stage() {
  uint64_t ns = block_in_nanosleep();
  UW_KEEP;
  return ns;
}
UW_FN void sleep_loop(uw::Result* r, int n) {
  for (int i = 0; i < n; ++i) r->blocked_ns += sleep_stage(), r->calls++;
  UW_KEEP;
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 8;
  long hold_ms = argc > 2 ? std::atol(argv[2]) : 50;
  int sleeps = argc > 3 ? std::atoi(argv[3]) : 8;
  g_sleep_ms = argc > 4 ? std::atol(argv[4]) : 50;
  long start_delay = argc > 5 ? std::atol(argv[5]) : 0;
  if (rounds < 1 || hold_ms < 1 || sleeps < 1 || g_sleep_ms < 1 || start_delay < -1) {
    std::fprintf(stderr, "usage: unwind_lock_nofp [rounds] [hold_ms] [sleeps] [sleep_ms] [start_delay_ms]\n");
    return 2;
  }
  uw::start_gate(start_delay);
  std::vector<uw::Result> res = {{"uw_mutex", "block_in_mutex_lock", {"mutex_loop", "mutex_stage"}},
                                 {"uw_sleep", "block_in_nanosleep", {"sleep_loop", "sleep_stage"}}};
  std::thread tm([&] { uw::name_self(res[0]); mutex_loop(&res[0], rounds); uw::done(res[0]); });
  std::thread ts([&] { uw::name_self(res[1]); sleep_loop(&res[1], sleeps); uw::done(res[1]); });
  std::thread th([&] {
    pthread_setname_np(pthread_self(), "uw_holder");
    for (int i = 1; i <= rounds; ++i) {
      pthread_mutex_lock(&g_mu);
      g_held.store(i);
      uw::sleep_ms(hold_ms);
      pthread_mutex_unlock(&g_mu);
      while (g_acquired.load() < i) uw::sleep_ms(1);
    }
  });
  tm.join(), ts.join(), th.join();
  uw::print_report(res);
  return 0;
}
