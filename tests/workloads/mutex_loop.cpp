// Lock-heavy workload for pmheld's benchmark and probe-cost checks: THREADS threads
// each lock and unlock one shared pthread mutex ITERS times (optionally with
// pthread_mutex_trylock), doing a little work while holding it. Prints its own
// measurements as one JSON line: wall time and nanoseconds per lock+unlock pair.
//
//   mutex_loop [--threads N] [--iters N] [--trylock] [--start-delay-ms N]
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long shared_counter;
static long g_iters = 100000;
static bool g_trylock = false;

static unsigned long long now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

__attribute__((noinline)) static void locked_work() {
  for (int i = 0; i < 8; ++i) shared_counter = shared_counter + 1;
}

static void* worker(void*) {
  for (long i = 0; i < g_iters; ++i) {
    if (g_trylock) {
      while (pthread_mutex_trylock(&loop_lock) != 0) {
      }
    } else {
      pthread_mutex_lock(&loop_lock);
    }
    locked_work();
    pthread_mutex_unlock(&loop_lock);
  }
  return nullptr;
}

int main(int argc, char** argv) {
  int threads = 2;
  long delay_ms = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) g_iters = atol(argv[++i]);
    else if (!strcmp(argv[i], "--trylock")) g_trylock = true;
    else if (!strcmp(argv[i], "--start-delay-ms") && i + 1 < argc) delay_ms = atol(argv[++i]);
    else {
      fprintf(stderr, "usage: mutex_loop [--threads N] [--iters N] [--trylock] [--start-delay-ms N]\n");
      return 2;
    }
  }
  if (threads < 1 || g_iters < 1) return 2;
  if (delay_ms) usleep(delay_ms * 1000);
  std::vector<pthread_t> t(threads);
  unsigned long long t0 = now_ns();
  for (auto& th : t) pthread_create(&th, nullptr, worker, nullptr);
  for (auto& th : t) pthread_join(th, nullptr);
  unsigned long long wall = now_ns() - t0;
  unsigned long long pairs = (unsigned long long)threads * g_iters;
  printf("{\"type\":\"mutex_loop\",\"pid\":%d,\"threads\":%d,\"iters\":%ld,\"pairs\":%llu,"
         "\"wall_ns\":%llu,\"ns_per_pair\":%.1f}\n",
         getpid(), threads, g_iters, pairs, wall, (double)wall / pairs);
  return 0;
}
