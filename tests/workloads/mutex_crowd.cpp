// mutex_crowd: many threads (up to 4000) on ONE pthread mutex, each holding it briefly,
// to exercise lock tools' map sizes (one key per waiting thread and lock).
// USAGE: mutex_crowd [--threads N] [--duration-ms MS] [--hold-us US] [--go-file PATH]
// Prints "ready <pid>" on stderr once every thread runs, then {"acquisitions":N} on
// stdout at the end. With --go-file the MS of contention start when PATH exists (a
// tracer attached after "ready" sees all of them, however long its start took).
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

static pthread_mutex_t crowd_lock = PTHREAD_MUTEX_INITIALIZER;
static std::atomic<bool> stop{false};
static std::atomic<long> acquisitions{0}, started{0};

static long arg(int argc, char** argv, const char* name, long def, long lo, long hi) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], name)) {
      char* end = nullptr;
      long v = std::strtol(argv[i + 1], &end, 10);
      if (*end || v < lo || v > hi) {
        std::fprintf(stderr, "mutex_crowd: %s must be %ld-%ld\n", name, lo, hi);
        std::exit(2);
      }
      return v;
    }
  return def;
}

int main(int argc, char** argv) {
  long threads = arg(argc, argv, "--threads", 2000, 1, 4000);
  long duration_ms = arg(argc, argv, "--duration-ms", 3000, 1, 600000);
  long hold_us = arg(argc, argv, "--hold-us", 20, 0, 100000);
  std::vector<std::thread> ts;
  for (long i = 0; i < threads; ++i)
    ts.emplace_back([hold_us] {
      ++started;
      while (!stop.load(std::memory_order_relaxed)) {
        pthread_mutex_lock(&crowd_lock);
        if (hold_us) usleep(static_cast<useconds_t>(hold_us));
        pthread_mutex_unlock(&crowd_lock);
        ++acquisitions;
      }
    });
  while (started.load() < threads) usleep(1000);
  std::fprintf(stderr, "ready %d\n", getpid());
  const char* go = nullptr;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--go-file")) go = argv[i + 1];
  struct stat st;
  while (go && stat(go, &st) != 0) usleep(10000);
  std::this_thread::sleep_for(std::chrono::milliseconds(duration_ms));
  stop = true;
  for (auto& t : ts) t.join();
  std::printf("{\"acquisitions\":%ld,\"threads\":%ld}\n", acquisitions.load(), threads);
  return 0;
}
