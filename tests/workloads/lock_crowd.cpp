// lock_crowd: many threads (up to 10000, named "crowd-N") contend on ONE mutex, each
// holding it for --hold-us while sleeping (so the CPUs stay free), for threadpool's
// data-loss test: with thousands of threads its BPF maps must be sized from the
// target, and a verdict drawn from maps too small must be withheld.
//
// USAGE: lock_crowd [--threads N] [--hold-us US] [--duration-ms MS]
// Prints {"pid":P,"threads":N} on stdout once every thread runs, then, when done,
// {"acquisitions":n,"wait_ns":W,"duration_ns":D} (W: time inside pthread_mutex_lock,
// summed over threads).
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
std::atomic<bool> g_stop{false};
std::atomic<long> g_started{0};
std::atomic<unsigned long long> g_acq{0}, g_wait{0};
long g_hold_us = 100;

unsigned long long now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

void* worker(void* arg) {
  char name[16];
  std::snprintf(name, sizeof name, "crowd-%ld", reinterpret_cast<long>(arg));
  pthread_setname_np(pthread_self(), name);
  g_started++;
  struct timespec hold = {0, g_hold_us * 1000};
  unsigned long long acq = 0, wait = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    unsigned long long t0 = now_ns();
    pthread_mutex_lock(&g_lock);
    wait += now_ns() - t0;
    nanosleep(&hold, nullptr);
    pthread_mutex_unlock(&g_lock);
    ++acq;
  }
  g_acq += acq;
  g_wait += wait;
  return nullptr;
}

long arg(const char* s, long lo, long hi, const char* what) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) {
    std::fprintf(stderr, "lock_crowd: %s must be %ld..%ld\n", what, lo, hi);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  long threads = 2000, duration_ms = 5000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = arg(argv[i + 1], 1, 10000, "--threads");
    else if (!std::strcmp(argv[i], "--hold-us")) g_hold_us = arg(argv[i + 1], 0, 100000, "--hold-us");
    else if (!std::strcmp(argv[i], "--duration-ms"))
      duration_ms = arg(argv[i + 1], 1, 3600000, "--duration-ms");
    else {
      std::fprintf(stderr, "lock_crowd: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  std::vector<pthread_t> tids(threads);
  for (long i = 0; i < threads; ++i)
    if (pthread_create(&tids[i], &attr, worker, reinterpret_cast<void*>(i)) != 0) {
      std::fprintf(stderr, "lock_crowd: cannot create thread %ld\n", i);
      return 1;
    }
  while (g_started.load() < threads) usleep(1000);
  std::printf("{\"pid\":%d,\"threads\":%ld}\n", getpid(), threads);
  std::fflush(stdout);
  unsigned long long t0 = now_ns();
  usleep(static_cast<useconds_t>(duration_ms) * 1000);
  g_stop = true;
  for (auto& t : tids) pthread_join(t, nullptr);
  std::printf("{\"acquisitions\":%llu,\"wait_ns\":%llu,\"duration_ns\":%llu}\n", g_acq.load(),
              g_wait.load(), now_ns() - t0);
  return 0;
}
