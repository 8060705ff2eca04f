// fork_storm: ever-new processes and threads, for long-run memory tests (issue 19).
//
// USAGE: fork_storm [--forks N] [--threads N] [--steady N] [--exec-every K]
//                   [--abandon-every M] [--seconds S]
//   --forks N        fork N short-lived children a second (default 0). Each child sleeps
//                    1 ms (nanosleep: naptime, offcputime) and then two of its threads
//                    contend for a pthread mutex held across a 1 ms sleep (futex waits:
//                    lockstat; holds: pmheld), then exits. 1 child in K (--exec-every,
//                    default 4, 0 = never) first execs this program again, so it gets
//                    fresh mappings like a real short-lived command. 1 child in M
//                    (--abandon-every, default 0 = never) instead exits while its
//                    second thread is blocked on the mutex the first one holds: the
//                    process dies in the middle of a futex wait, whose end is never
//                    seen (as when a program exits with threads still waiting).
//   --threads N      in this process, start N short-lived threads a second (default 0):
//                    each takes a mutex shared by all of them, holds it for 200 us,
//                    sleeps 1 ms and exits (thread churn for -p tools: threadpool,
//                    pmheld).
//   --steady N       also keep N long-lived threads (default 0), each waking every
//                    100 ms: a -p tool that needs a multi-threaded target (threadpool)
//                    can start whenever it attaches, not only while a churn thread lives.
//   --seconds S      stop after S seconds (default: until killed).
// Prints {"ready":true,"pid":N} once started, then every second
// {"forks":TOTAL,"threads":TOTAL} (ground truth of what was created).
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>

namespace {

int64_t mono_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void sleep_ns(int64_t ns) {
  struct timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

pthread_mutex_t child_lock = PTHREAD_MUTEX_INITIALIZER;

void* __attribute__((noinline)) child_contender(void*) {
  pthread_mutex_lock(&child_lock);
  sleep_ns(1000000);
  pthread_mutex_unlock(&child_lock);
  return nullptr;
}

// what every child does: sleep, then contend, then exit
[[noreturn]] void __attribute__((noinline)) child_work(bool abandon) {
  sleep_ns(1000000);
  pthread_t t;
  if (abandon) {  // hold the lock, let the other thread block on it, and exit
    pthread_mutex_lock(&child_lock);
    if (pthread_create(&t, nullptr, child_contender, nullptr) == 0) sleep_ns(2000000);
    _exit(0);
  }
  bool started = pthread_create(&t, nullptr, child_contender, nullptr) == 0;
  child_contender(nullptr);
  if (started) pthread_join(t, nullptr);
  _exit(0);
}

pthread_mutex_t churn_lock = PTHREAD_MUTEX_INITIALIZER;
std::atomic<int> churn_live{0};

void* __attribute__((noinline)) churn_thread(void*) {
  pthread_mutex_lock(&churn_lock);
  int64_t until = mono_ns() + 200000;
  while (mono_ns() < until) {
  }
  pthread_mutex_unlock(&churn_lock);
  sleep_ns(1000000);
  churn_live.fetch_sub(1);
  return nullptr;
}

void* __attribute__((noinline)) steady_thread(void*) {
  for (;;) sleep_ns(100000000);
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--child") == 0) child_work(false);
  if (argc == 2 && std::strcmp(argv[1], "--child-abandon") == 0) child_work(true);
  long forks = 0, threads = 0, steady = 0, exec_every = 4, abandon_every = 0;
  double seconds = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "fork_storm: %s needs a value\n", a.c_str());
      return 2;
    }
    char* end = nullptr;
    double v = std::strtod(argv[++i], &end);
    if (*end || v < 0) {
      std::fprintf(stderr, "fork_storm: bad value for %s\n", a.c_str());
      return 2;
    }
    if (a == "--forks") forks = long(v);
    else if (a == "--threads") threads = long(v);
    else if (a == "--steady") steady = long(v);
    else if (a == "--exec-every") exec_every = long(v);
    else if (a == "--abandon-every") abandon_every = long(v);
    else if (a == "--seconds") seconds = v;
    else {
      std::fprintf(stderr, "fork_storm: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  signal(SIGCHLD, SIG_IGN);  // children are reaped by the kernel
  pthread_attr_t detached;
  pthread_attr_init(&detached);
  pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
  for (long i = 0; i < steady; ++i) {
    pthread_t t;
    pthread_create(&t, &detached, steady_thread, nullptr);
  }
  std::printf("{\"ready\":true,\"pid\":%d}\n", int(getpid()));
  std::fflush(stdout);

  const int64_t t0 = mono_ns();
  const int64_t stop = seconds > 0 ? t0 + int64_t(seconds * 1e9) : INT64_MAX;
  int64_t next_fork = t0, next_thread = t0, next_print = t0 + 1000000000;
  const int64_t fork_gap = forks > 0 ? 1000000000 / forks : INT64_MAX;
  const int64_t thread_gap = threads > 0 ? 1000000000 / threads : INT64_MAX;
  uint64_t nforks = 0, nthreads = 0;
  for (;;) {
    int64_t now = mono_ns();
    if (now >= stop) break;
    // catch up at most one second's worth if we fell behind (a loaded machine)
    if (forks > 0 && now - next_fork > 1000000000) next_fork = now;
    if (threads > 0 && now - next_thread > 1000000000) next_thread = now;
    while (forks > 0 && next_fork <= now) {
      next_fork += fork_gap;
      bool do_exec = exec_every > 0 && nforks % uint64_t(exec_every) == 0;
      bool abandon = abandon_every > 0 && nforks % uint64_t(abandon_every) == 1 % uint64_t(abandon_every);
      pid_t pid = fork();
      if (pid == 0) {
        if (do_exec) {
          execl("/proc/self/exe", argv[0], abandon ? "--child-abandon" : "--child", (char*)nullptr);
          _exit(127);
        }
        child_work(abandon);
      }
      if (pid > 0) ++nforks;
    }
    while (threads > 0 && next_thread <= now) {
      next_thread += thread_gap;
      if (churn_live.load() > 256) break;  // never pile up more than that
      pthread_t t;
      churn_live.fetch_add(1);
      if (pthread_create(&t, &detached, churn_thread, nullptr) == 0) ++nthreads;
      else churn_live.fetch_sub(1);
    }
    if (now >= next_print) {
      next_print += 1000000000;
      std::printf("{\"forks\":%llu,\"threads\":%llu}\n", (unsigned long long)nforks,
                  (unsigned long long)nthreads);
      std::fflush(stdout);
    }
    int64_t next = std::min(std::min(next_fork, next_thread), next_print);
    next = std::min(next, stop);
    now = mono_ns();
    if (next > now) sleep_ns(next - now);
  }
  return 0;
}
