// crowd_storm: many threads blocking and waking, plus a stream of short-lived processes,
// the load under which a system-wide tracer's final report has the most to do (every
// thread a stack, thousands of processes gone by the time it is made).
//
// Usage: crowd_storm [--threads N] [--forks-per-s R] [--exec PATH]
// Starts N threads (default 2000) that each sleep 20-200 ms in a loop (a futex wait on
// a condvar with a timeout, so each has an off-CPU stack through libc), and a forker
// that starts R processes a second (default 300): every other one execs PATH (default
// /bin/true), the rest sleep 1 ms and _exit. Prints {"ready":true,"pid":N,"threads":N}
// once every thread runs, then {"forks":N} every second, until SIGINT/SIGTERM; reaps
// its children and exits 0.
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_started{0};
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cv;

void on_stop(int) { g_stop.store(true); }

void sleep_ns(long ns) {
  struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
  nanosleep(&ts, nullptr);
}

// A distinct frame per thread group so stacks differ (several hundred stacks).
__attribute__((noinline)) void wait_a_while(unsigned* seed) {
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  long ns = 20000000L + static_cast<long>(rand_r(seed) % 180) * 1000000L;
  until.tv_sec += (until.tv_nsec + ns) / 1000000000L;
  until.tv_nsec = (until.tv_nsec + ns) % 1000000000L;
  pthread_mutex_lock(&g_mu);
  pthread_cond_timedwait(&g_cv, &g_mu, &until);
  pthread_mutex_unlock(&g_mu);
}

void* sleeper(void* arg) {
  unsigned seed = static_cast<unsigned>(reinterpret_cast<uintptr_t>(arg));
  g_started.fetch_add(1);
  while (!g_stop.load()) wait_a_while(&seed);
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2000;
  int rate = 300;
  const char* exec_path = "/bin/true";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = atoi(argv[++i]);
    else if (a == "--forks-per-s" && i + 1 < argc) rate = atoi(argv[++i]);
    else if (a == "--exec" && i + 1 < argc) exec_path = argv[++i];
    else {
      fprintf(stderr, "usage: crowd_storm [--threads N] [--forks-per-s R] [--exec PATH]\n");
      return 2;
    }
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&g_cv, &ca);

  std::vector<pthread_t> tids;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  for (int i = 0; i < threads; ++i) {
    pthread_t t;
    if (pthread_create(&t, &attr, sleeper, reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1))) != 0) {
      fprintf(stderr, "crowd_storm: cannot start thread %d\n", i);
      g_stop.store(true);
      break;
    }
    tids.push_back(t);
  }
  while (!g_stop.load() && g_started.load() < static_cast<int>(tids.size())) sleep_ns(1000000);
  printf("{\"ready\":true,\"pid\":%d,\"threads\":%zu}\n", getpid(), tids.size());
  fflush(stdout);

  long forks = 0;
  const long gap = rate > 0 ? 1000000000L / rate : 1000000000L;
  struct timespec last;
  clock_gettime(CLOCK_MONOTONIC, &last);
  while (!g_stop.load()) {
    if (rate > 0) {
      pid_t p = fork();
      if (p == 0) {
        if (forks % 2 == 0) {
          execl(exec_path, exec_path, static_cast<char*>(nullptr));
          _exit(127);
        }
        sleep_ns(1000000);
        _exit(0);
      }
      if (p > 0) ++forks;
    }
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    sleep_ns(gap);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > last.tv_sec) {
      printf("{\"forks\":%ld}\n", forks);
      fflush(stdout);
      last = now;
    }
  }
  pthread_cond_broadcast(&g_cv);
  for (auto t : tids) pthread_join(t, nullptr);
  while (waitpid(-1, nullptr, 0) > 0) {
  }
  return 0;
}
