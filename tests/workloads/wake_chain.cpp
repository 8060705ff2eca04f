// Ground truth for offcputime --waker: who wakes whom, from where.
//   wk_waiter    waiter_block_fn()   waits on a futex word (FUTEX_WAIT), timing itself
//   wk_signaler  waker_signal_fn()   every D ms (a nanosleep) bumps the word and wakes
//                                    the waiter (FUTEX_WAKE): the waiter's waker
//   wk_timer     timer_sleep_fn()    nanosleep(D ms), timing itself: woken by a timer
//                                    interrupt, no thread wakes it
// The futex calls are inline `syscall` instructions inside the named functions, so the
// wakeup's user stack starts in waker_signal_fn itself (frame pointers or DWARF alike).
// Usage: wake_chain [iterations=20] [delay_ms=20] [start_delay_ms=0]
//   start_delay_ms -1: the threads start once a line (or EOF) arrives on stdin.
// Prints one JSON object: {"pid":..,"threads":[{"name","tid","function","blocked_ns",
// "calls","wakes"}]}: blocked_ns is the time the thread measured around its blocking
// (CLOCK_MONOTONIC), wakes the FUTEX_WAKE calls that woke a waiter (the signaler's).
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#define NOINLINE __attribute__((noinline))
#define KEEP asm volatile("" ::: "memory")

static int g_iters = 20;
static long g_delay_ms = 20;
static std::atomic<int> g_word{0};
static std::atomic<bool> g_done{false};

static uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// futex(addr, op, val, NULL) as an inline syscall: no libc frame between the caller and
// the kernel.
static inline __attribute__((always_inline)) long raw_futex(std::atomic<int>* addr, int op, int val) {
  long ret;
  register long r10 asm("r10") = 0;
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(static_cast<long>(SYS_futex)), "D"(addr), "S"(static_cast<long>(op)),
                 "d"(static_cast<long>(val)), "r"(r10)
               : "rcx", "r11", "memory");
  return ret;
}

struct Result {
  const char* name;
  const char* function;
  long tid = 0;
  uint64_t blocked_ns = 0;
  int calls = 0;
  int wakes = 0;
};

// Blocks until the word moves on from `seen`.
extern "C" NOINLINE void waiter_block_fn(int seen) {
  while (g_word.load() == seen && !g_done.load()) raw_futex(&g_word, FUTEX_WAIT_PRIVATE, seen);
  KEEP;
}

// Bumps the word and wakes its waiter; 1 when a waiter was woken.
extern "C" NOINLINE int waker_signal_fn() {
  g_word.fetch_add(1);
  long n = raw_futex(&g_word, FUTEX_WAKE_PRIVATE, 1);
  KEEP;
  return n > 0 ? 1 : 0;
}

extern "C" NOINLINE void timer_sleep_fn(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
  KEEP;
}

static void name_self(Result& r) {
  pthread_setname_np(pthread_self(), r.name);
  r.tid = syscall(SYS_gettid);
}

int main(int argc, char** argv) {
  if (argc > 1) g_iters = std::atoi(argv[1]);
  if (argc > 2) g_delay_ms = std::atol(argv[2]);
  long start_delay = argc > 3 ? std::atol(argv[3]) : 0;
  if (g_iters < 1 || g_delay_ms < 1 || start_delay < -1) {
    std::fprintf(stderr, "usage: wake_chain [iterations] [delay_ms] [start_delay_ms]\n");
    return 2;
  }
  if (start_delay > 0) timer_sleep_fn(start_delay);
  if (start_delay < 0) {
    char c;
    while (read(0, &c, 1) < 0) {
    }
  }
  std::vector<Result> res = {{"wk_waiter", "waiter_block_fn"},
                             {"wk_signaler", "waker_signal_fn"},
                             {"wk_timer", "timer_sleep_fn"}};
  std::atomic<int> waiter_ready{0};
  std::vector<std::thread> th;
  th.emplace_back([&] {
    name_self(res[0]);
    waiter_ready.store(1);
    // until the signaler is done: every wakeup it makes ends one of these waits
    while (!g_done.load()) {
      int seen = g_word.load();
      uint64_t t0 = now_ns();
      waiter_block_fn(seen);
      res[0].blocked_ns += now_ns() - t0;
      res[0].calls++;
    }
  });
  th.emplace_back([&] {
    name_self(res[1]);
    while (!waiter_ready.load()) timer_sleep_fn(1);
    for (int i = 0; i < g_iters; ++i) {
      timer_sleep_fn(g_delay_ms);  // the waiter is blocked by now
      res[1].wakes += waker_signal_fn();
      res[1].calls++;
    }
    g_done.store(true);
    g_word.fetch_add(1);
    raw_futex(&g_word, FUTEX_WAKE_PRIVATE, 1);  // the last wait ends (not from waker_signal_fn)
  });
  th.emplace_back([&] {
    name_self(res[2]);
    for (int i = 0; i < g_iters; ++i) {
      uint64_t t0 = now_ns();
      timer_sleep_fn(g_delay_ms);
      res[2].blocked_ns += now_ns() - t0;
      res[2].calls++;
    }
  });
  for (auto& t : th) t.join();
  std::printf("{\"pid\":%d,\"threads\":[", static_cast<int>(getpid()));
  for (size_t i = 0; i < res.size(); ++i)
    std::printf("%s{\"name\":\"%s\",\"tid\":%ld,\"function\":\"%s\",\"blocked_ns\":%llu,\"calls\":%d,\"wakes\":%d}",
                i ? "," : "", res[i].name, res[i].tid, res[i].function,
                static_cast<unsigned long long>(res[i].blocked_ns), res[i].calls, res[i].wakes);
  std::printf("]}\n");
  return 0;
}
