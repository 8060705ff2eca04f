// Ground truth for offcputime: four threads that block in known functions for known
// times, each timing its own blocking (CLOCK_MONOTONIC around the blocking call):
//   blk_pipe   block_in_pipe_read()   read() on a pipe, a writer feeds it every D ms
//   blk_cond   block_in_cond_wait()   pthread_cond_wait(), signaled every D ms
//   blk_sleep  block_in_sleep()       nanosleep(D ms)
//   blk_mutex  block_in_mutex_lock()  pthread_mutex_lock() on a mutex held for D ms
// Usage: offcpu_blockers [iterations=25] [delay_ms=20] [start_delay_ms=0]
//   start_delay_ms -1: the threads start once a line (or EOF) arrives on stdin, so a test
//   can start them right after its tracer has attached, however loaded the box.
// Prints one JSON object: {"pid":..,"threads":[{"name","tid","function",
// "blocked_ns","calls"}]}. Each blocker calls its libc function through a noinline
// helper, so the named function is found by frame-pointer unwinding even though
// Debian's libc has no frame pointers (the helper's own frame is the one lost).
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

static int g_iters = 25;
static long g_delay_ms = 20;

static uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

static void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

struct Result {
  const char* name;
  const char* function;
  long tid = 0;
  uint64_t blocked_ns = 0;
  int calls = 0;
};

#define NOINLINE __attribute__((noinline))
#define KEEP asm volatile("" ::: "memory")

// --- pipe -----------------------------------------------------------------------------
static int g_pipe[2];
extern "C" NOINLINE ssize_t pipe_read_helper(int fd, char* c) {
  ssize_t n = read(fd, c, 1);
  KEEP;
  return n;
}
extern "C" NOINLINE uint64_t block_in_pipe_read() {
  char c;
  uint64_t t0 = now_ns();
  pipe_read_helper(g_pipe[0], &c);
  uint64_t t1 = now_ns();
  KEEP;
  return t1 - t0;
}

// --- condition variable ----------------------------------------------------------------
static pthread_mutex_t g_cond_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static int g_cond_gen = 0;
extern "C" NOINLINE void cond_wait_helper() {
  pthread_cond_wait(&g_cond, &g_cond_mu);
  KEEP;
}
extern "C" NOINLINE uint64_t block_in_cond_wait(int want_gen) {
  uint64_t t0 = now_ns();
  pthread_mutex_lock(&g_cond_mu);
  while (g_cond_gen < want_gen) cond_wait_helper();
  pthread_mutex_unlock(&g_cond_mu);
  uint64_t t1 = now_ns();
  KEEP;
  return t1 - t0;
}

// --- sleep -------------------------------------------------------------------------------
extern "C" NOINLINE void sleep_helper(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
  KEEP;
}
extern "C" NOINLINE uint64_t block_in_sleep() {
  uint64_t t0 = now_ns();
  sleep_helper(g_delay_ms);
  uint64_t t1 = now_ns();
  KEEP;
  return t1 - t0;
}

// --- contended mutex ---------------------------------------------------------------------
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static std::atomic<int> g_held_gen{0};
static std::atomic<int> g_acquired_gen{0};
extern "C" NOINLINE void mutex_lock_helper() {
  pthread_mutex_lock(&g_mu);
  KEEP;
}
extern "C" NOINLINE uint64_t block_in_mutex_lock() {
  uint64_t t0 = now_ns();
  mutex_lock_helper();
  uint64_t t1 = now_ns();
  pthread_mutex_unlock(&g_mu);
  KEEP;
  return t1 - t0;
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
    std::fprintf(stderr, "usage: offcpu_blockers [iterations] [delay_ms] [start_delay_ms]\n");
    return 2;
  }
  if (pipe(g_pipe) != 0) return 1;
  if (start_delay > 0) sleep_ms(start_delay);
  if (start_delay < 0) {
    char c;
    while (read(0, &c, 1) < 0) {
    }
  }
  std::vector<Result> res = {{"blk_pipe", "block_in_pipe_read"},
                             {"blk_cond", "block_in_cond_wait"},
                             {"blk_sleep", "block_in_sleep"},
                             {"blk_mutex", "block_in_mutex_lock"}};
  std::vector<std::thread> th;
  // blockers
  th.emplace_back([&] {
    name_self(res[0]);
    for (int i = 0; i < g_iters; ++i) res[0].blocked_ns += block_in_pipe_read(), res[0].calls++;
  });
  th.emplace_back([&] {
    name_self(res[1]);
    for (int i = 1; i <= g_iters; ++i) res[1].blocked_ns += block_in_cond_wait(i), res[1].calls++;
  });
  th.emplace_back([&] {
    name_self(res[2]);
    for (int i = 0; i < g_iters; ++i) res[2].blocked_ns += block_in_sleep(), res[2].calls++;
  });
  th.emplace_back([&] {
    name_self(res[3]);
    for (int i = 1; i <= g_iters; ++i) {
      while (g_held_gen.load() < i) {  // wait (on CPU) until the holder has the lock
      }
      res[3].blocked_ns += block_in_mutex_lock();
      res[3].calls++;
      g_acquired_gen.store(i);
    }
  });
  // drivers
  th.emplace_back([] {
    pthread_setname_np(pthread_self(), "blk_driver");
    for (int i = 1; i <= g_iters; ++i) {
      sleep_ms(g_delay_ms);
      char c = 'x';
      if (write(g_pipe[1], &c, 1) != 1) std::abort();
      pthread_mutex_lock(&g_cond_mu);
      g_cond_gen = i;
      pthread_cond_signal(&g_cond);
      pthread_mutex_unlock(&g_cond_mu);
    }
  });
  th.emplace_back([] {
    pthread_setname_np(pthread_self(), "blk_holder");
    for (int i = 1; i <= g_iters; ++i) {
      pthread_mutex_lock(&g_mu);
      g_held_gen.store(i);
      sleep_ms(g_delay_ms);
      pthread_mutex_unlock(&g_mu);
      while (g_acquired_gen.load() < i) sleep_ms(1);
    }
  });
  for (auto& t : th) t.join();
  std::string out = "{\"pid\":" + std::to_string(getpid()) + ",\"iterations\":" + std::to_string(g_iters) +
                    ",\"delay_ms\":" + std::to_string(g_delay_ms) + ",\"threads\":[";
  for (size_t i = 0; i < res.size(); ++i) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s{\"name\":\"%s\",\"tid\":%ld,\"function\":\"%s\",\"blocked_ns\":%llu,\"calls\":%d}",
                  i ? "," : "", res[i].name, res[i].tid, res[i].function,
                  static_cast<unsigned long long>(res[i].blocked_ns), res[i].calls);
    out += buf;
  }
  out += "]}";
  std::puts(out.c_str());
  return 0;
}
