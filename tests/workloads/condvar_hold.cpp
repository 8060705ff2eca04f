// condvar_hold: a thread holds a mutex for a known short time, then waits a long time
// on a condition variable with it (which releases the mutex), then holds it briefly
// again. A hold-time tracer must see only the short holds, never the waits.
//
// USAGE: condvar_hold [--cycles N] [--hold-us US] [--wait-ms MS] [--go-file PATH]
//
//   --cycles N       rounds (1-100000, default 10)
//   --hold-us US     busy hold before and after each wait (0-1000000, default 200)
//   --wait-ms MS     condition-variable wait per call (1-60000, default 50)
//   --go-file PATH   print "ready <pid>" on stderr, wait until PATH exists, then start
//
// Each round, on `static pthread_mutex_t cv_lock`:
//   1. waiter: lock, hold, pthread_cond_timedwait (times out after MS), hold, unlock
//   2. waiter: lock, hold, pthread_cond_wait until the signaler (told to start just
//      before the wait; it sleeps MS, then locks, sets a flag, signals and unlocks)
//      wakes it, hold, unlock
// so the waiter makes 4 holds of ~US per round and the signaler 1 tiny hold.
//
// Output: one JSON line on stdout (durations in ns):
//   {"type":"condvar_hold","pid":P,"mutex_addr":"0x...","symbol":"cv_lock","cycles":C,
//    "hold_ns_target":H,"wait_ns_target":W,"waiter_holds":4C,"signaler_holds":C,
//    "waiter_hold_ns":sum of the waiter's measured holds (each from the lock's return to
//    just before the unlock or wait call: everything done holding, sem_post included),
//    "waiter_max_hold_ns":M,"signaler_hold_ns":sum,"signaler_max_hold_ns":M,
//    "cond_waits":calls to pthread_cond_*wait (2C unless spuriously woken),
//    "cond_wait_ns":time spent inside the waits,
//    "hold_p50_ns":the median of all 5C measured holds (waiter's and signaler's)}
#include <pthread.h>
#include <semaphore.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

static pthread_mutex_t cv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool ready = false;
static long g_cond_calls = 0;
static sem_t go_signal;  // posted by the waiter when it is about to wait

static long g_cycles = 10, g_hold_us = 200, g_wait_ms = 50;
static unsigned long long g_waiter_hold = 0, g_waiter_max = 0, g_signaler_hold = 0, g_signaler_max = 0, g_wait_ns = 0;

static std::vector<unsigned long long> g_holds;  // every measured hold (appended holding cv_lock)

static unsigned long long now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void spin_until(unsigned long long t) {
  while (now_ns() < t) {
  }
}

// Busy hold; returns when the hold started (for the caller's measurement).
__attribute__((noinline)) static void hold() { spin_until(now_ns() + g_hold_us * 1000ULL); }

static void account(unsigned long long start) {
  unsigned long long h = now_ns() - start;
  g_waiter_hold += h;
  if (h > g_waiter_max) g_waiter_max = h;
  g_holds.push_back(h);
}

__attribute__((noinline)) static void timed_round() {
  pthread_mutex_lock(&cv_lock);
  unsigned long long t = now_ns();
  hold();
  struct timespec abs;
  clock_gettime(CLOCK_REALTIME, &abs);
  abs.tv_nsec += (g_wait_ms % 1000) * 1000000L;
  abs.tv_sec += g_wait_ms / 1000 + abs.tv_nsec / 1000000000L;
  abs.tv_nsec %= 1000000000L;
  account(t);
  unsigned long long w = now_ns();
  int rc;
  do {  // no one signals in this round: it times out
    rc = pthread_cond_timedwait(&cv, &cv_lock, &abs);
    g_cond_calls++;
  } while (rc == 0);
  t = now_ns();
  g_wait_ns += t - w;
  hold();
  account(t);
  pthread_mutex_unlock(&cv_lock);
}

__attribute__((noinline)) static void signalled_round() {
  pthread_mutex_lock(&cv_lock);
  unsigned long long t = now_ns();
  hold();
  ready = false;
  sem_post(&go_signal);  // wakes the signaler, which may preempt us: still holding
  account(t);
  unsigned long long w = now_ns();
  while (!ready) {
    pthread_cond_wait(&cv, &cv_lock);
    g_cond_calls++;
  }
  t = now_ns();
  g_wait_ns += t - w;
  hold();
  account(t);
  pthread_mutex_unlock(&cv_lock);
}

static void* signaler(void*) {
  for (long i = 0; i < g_cycles; ++i) {
    sem_wait(&go_signal);
    usleep(g_wait_ms * 1000);
    pthread_mutex_lock(&cv_lock);  // only possible once the waiter waits (mutex released)
    unsigned long long t = now_ns();
    ready = true;
    pthread_cond_signal(&cv);
    unsigned long long h = now_ns() - t;
    g_signaler_hold += h;
    if (h > g_signaler_max) g_signaler_max = h;
    g_holds.push_back(h);
    pthread_mutex_unlock(&cv_lock);
  }
  return nullptr;
}

static long parse(const char* flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || !*v || *end || x < lo || x > hi) {
    fprintf(stderr, "condvar_hold: %s needs an integer in [%ld, %ld]\n", flag, lo, hi);
    exit(2);
  }
  return x;
}

int main(int argc, char** argv) {
  std::string go;
  for (int i = 1; i < argc; ++i) {
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (!strcmp(argv[i], "--cycles")) g_cycles = parse("--cycles", v, 1, 100000), ++i;
    else if (!strcmp(argv[i], "--hold-us")) g_hold_us = parse("--hold-us", v, 0, 1000000), ++i;
    else if (!strcmp(argv[i], "--wait-ms")) g_wait_ms = parse("--wait-ms", v, 1, 60000), ++i;
    else if (!strcmp(argv[i], "--go-file") && v) go = v, ++i;
    else {
      fprintf(stderr, "condvar_hold: bad argument '%s' (see the top of condvar_hold.cpp)\n", argv[i]);
      return 2;
    }
  }
  if (!go.empty()) {
    fprintf(stderr, "ready %d\n", getpid());
    struct stat sb;
    while (stat(go.c_str(), &sb) != 0) usleep(1000);
  }
  g_holds.reserve(static_cast<size_t>(5 * g_cycles));  // no allocation while holding
  sem_init(&go_signal, 0, 0);
  pthread_t sig;
  pthread_create(&sig, nullptr, signaler, nullptr);
  for (long i = 0; i < g_cycles; ++i) {
    timed_round();
    signalled_round();
  }
  pthread_join(sig, nullptr);
  std::sort(g_holds.begin(), g_holds.end());
  unsigned long long p50 = g_holds.empty() ? 0 : g_holds[(g_holds.size() - 1) / 2];
  printf("{\"type\":\"condvar_hold\",\"pid\":%d,\"mutex_addr\":\"%p\",\"symbol\":\"cv_lock\","
         "\"cycles\":%ld,\"hold_ns_target\":%llu,\"wait_ns_target\":%llu,\"waiter_holds\":%ld,"
         "\"signaler_holds\":%ld,\"waiter_hold_ns\":%llu,\"waiter_max_hold_ns\":%llu,"
         "\"signaler_hold_ns\":%llu,\"signaler_max_hold_ns\":%llu,\"cond_waits\":%ld,\"cond_wait_ns\":%llu,\"hold_p50_ns\":%llu}\n",
         getpid(), (void*)&cv_lock, g_cycles, g_hold_us * 1000ULL, g_wait_ms * 1000000ULL,
         4 * g_cycles, g_cycles, g_waiter_hold, g_waiter_max, g_signaler_hold, g_signaler_max, g_cond_calls, g_wait_ns, p50);
  return 0;
}
