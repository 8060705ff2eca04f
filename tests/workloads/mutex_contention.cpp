// mutex_contention: N threads contend on ONE static pthread mutex with a known hold
// time; every thread times its own lock waits, so tracers can be checked against it.
//
// USAGE: mutex_contention [--threads N] [--hold-us US] [--gap-us US]
//                         [--duration-ms MS] [--hold-mode spin|sleep] [--private]
//                         [--go-file PATH]
//
//   --threads N        worker threads (1-256, default 4)
//   --hold-us US       time the lock is held per acquisition (0-1000000, default 200)
//   --gap-us US        work outside the lock between acquisitions (0-1000000, default 50)
//   --duration-ms MS   how long the workers run (1-3600000, default 2000)
//   --hold-mode M      spin: busy-wait on the clock while holding, and for the gap
//                      (default); sleep: clock_nanosleep for both (timer slack 1 ns),
//                      so threads rarely compete for CPUs and a thread's measured
//                      wait is almost all blocked time (what futex tracing sees)
//   --private          each thread locks its own mutex (uncontended; for benchmarks)
//   --go-file PATH     create the threads, print "ready <pid>" on stderr, then wait
//                      until PATH exists before starting (lets a tracer attach first)
//
// The contended lock is `static pthread_mutex_t cache_lock` (a plain, non-adaptive
// glibc mutex), taken in update_cache() called from worker(). Both are noinline so
// stack tools can name them.
//
// Output: one JSON line on stdout when done (all durations in ns):
//   {"type":"mutex_contention","pid":P,"mutex_addr":"0x...","mutex_addr_int":A,
//    "symbol":"cache_lock","threads":N,"hold_ns_target":H,"duration_ns":D,
//    "acquisitions":n,"total_wait_ns":W,"max_wait_ns":M,"slow_acquisitions":s,
//    "hold_ns":total held,"hold_p50_ns":median hold (us resolution),"ops_per_sec":r,"cpu_ns":c,"cpu_ns_per_op":x,"private":false,
//    "per_thread":[{"tid":t,"acquisitions":n,"wait_ns":w,"max_wait_ns":m},...]}
// total_wait_ns is the sum over every acquisition of the time spent inside
// pthread_mutex_lock (fast path, spinning and blocking included); slow_acquisitions
// counts those that took 10 us or more (i.e. almost certainly blocked in the kernel).
// cpu_ns is the workers' own CPU time (CLOCK_THREAD_CPUTIME_ID, user + system, so it
// includes probe costs charged to them but not time spent preempted by other load);
// cpu_ns_per_op = cpu_ns / acquisitions, a load-independent cost per lock call.
// With --private, the per-thread mutexes are reported instead of cache_lock
// (mutex_addr is the first one's).
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

namespace {

struct Opts {
  long threads = 4, hold_us = 200, gap_us = 50, duration_ms = 2000;
  bool sleep_hold = false, private_locks = false;
  std::string go_file;
};

struct alignas(64) ThreadStats {
  pthread_mutex_t own = PTHREAD_MUTEX_INITIALIZER;  // --private
  long tid = 0;
  unsigned long long acquisitions = 0, wait_ns = 0, max_wait_ns = 0, slow = 0, hold_ns = 0, cpu_ns = 0;
  std::vector<uint32_t> hold_us;  // holds by whole microseconds; the last slot is 100 ms or more
};

constexpr size_t kHoldSlots = 100001;

Opts g_opts;
std::atomic<bool> g_stop{false};
std::vector<ThreadStats> g_stats;

inline unsigned long long now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

void spin_until(unsigned long long deadline) {
  while (now_ns() < deadline) {
  }
}

long parse(const char* flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  long x = v ? std::strtol(v, &end, 10) : 0;
  if (!v || !*v || *end || x < lo || x > hi) {
    std::fprintf(stderr, "mutex_contention: %s needs an integer in [%ld, %ld]\n", flag, lo, hi);
    std::exit(2);
  }
  return x;
}

__attribute__((noinline)) void hold_for(unsigned long long ns) {
  if (!ns) return;
  if (g_opts.sleep_hold) {
    struct timespec ts = {static_cast<time_t>(ns / 1000000000ULL), static_cast<long>(ns % 1000000000ULL)};
    clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
  } else {
    spin_until(now_ns() + ns);
  }
}

// Takes the lock, timing the wait, and holds it for the configured time.
__attribute__((noinline)) void update_cache(ThreadStats& st, pthread_mutex_t* m) {
  unsigned long long t0 = now_ns();
  pthread_mutex_lock(m);
  unsigned long long t1 = now_ns();
  hold_for(g_opts.hold_us * 1000ULL);
  unsigned long long t2 = now_ns();
  pthread_mutex_unlock(m);
  unsigned long long w = t1 - t0;
  st.acquisitions++;
  st.wait_ns += w;
  if (w > st.max_wait_ns) st.max_wait_ns = w;
  if (w >= 10000) st.slow++;
  st.hold_ns += t2 - t1;
  st.hold_us[std::min<size_t>((t2 - t1) / 1000, kHoldSlots - 1)]++;
}

__attribute__((noinline)) void* worker(void* arg) {
  auto& st = *static_cast<ThreadStats*>(arg);
  st.tid = syscall(SYS_gettid);
  st.hold_us.assign(kHoldSlots, 0);
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  pthread_mutex_t* m = g_opts.private_locks ? &st.own : &cache_lock;
  struct timespec c0, c1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  while (!g_stop.load(std::memory_order_relaxed)) {
    update_cache(st, m);
    if (g_opts.gap_us) {
      if (g_opts.sleep_hold) hold_for(g_opts.gap_us * 1000ULL);
      else spin_until(now_ns() + g_opts.gap_us * 1000ULL);
    }
  }
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  st.cpu_ns = (c1.tv_sec - c0.tv_sec) * 1000000000ULL + c1.tv_nsec - c0.tv_nsec;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--threads") g_opts.threads = parse("--threads", v, 1, 256), ++i;
    else if (a == "--hold-us") g_opts.hold_us = parse("--hold-us", v, 0, 1000000), ++i;
    else if (a == "--gap-us") g_opts.gap_us = parse("--gap-us", v, 0, 1000000), ++i;
    else if (a == "--duration-ms") g_opts.duration_ms = parse("--duration-ms", v, 1, 3600000), ++i;
    else if (a == "--private") g_opts.private_locks = true;
    else if (a == "--hold-mode" && v && (!std::strcmp(v, "spin") || !std::strcmp(v, "sleep")))
      g_opts.sleep_hold = !std::strcmp(v, "sleep"), ++i;
    else if (a == "--go-file" && v) g_opts.go_file = v, ++i;
    else {
      std::fprintf(stderr, "mutex_contention: bad argument '%s' (see the top of mutex_contention.cpp)\n",
                   a.c_str());
      return 2;
    }
  }
  if (!g_opts.go_file.empty()) {
    std::fprintf(stderr, "ready %d\n", getpid());
    struct stat sb;
    while (stat(g_opts.go_file.c_str(), &sb) != 0) usleep(1000);
  }
  g_stats.resize(static_cast<size_t>(g_opts.threads));
  std::vector<pthread_t> th(g_stats.size());
  unsigned long long start = now_ns();
  for (size_t i = 0; i < th.size(); ++i) pthread_create(&th[i], nullptr, worker, &g_stats[i]);
  struct timespec d = {g_opts.duration_ms / 1000, (g_opts.duration_ms % 1000) * 1000000L};
  clock_nanosleep(CLOCK_MONOTONIC, 0, &d, nullptr);
  g_stop = true;
  for (auto& t : th) pthread_join(t, nullptr);
  unsigned long long dur = now_ns() - start;

  unsigned long long acq = 0, wait = 0, maxw = 0, slow = 0, hold = 0, cpu = 0;
  std::vector<unsigned long long> holds(kHoldSlots, 0);
  std::string per;
  for (auto& s : g_stats) {
    for (size_t i = 0; i < s.hold_us.size(); ++i) holds[i] += s.hold_us[i];
    acq += s.acquisitions, wait += s.wait_ns, slow += s.slow, hold += s.hold_ns, cpu += s.cpu_ns;
    if (s.max_wait_ns > maxw) maxw = s.max_wait_ns;
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s{\"tid\":%ld,\"acquisitions\":%llu,\"wait_ns\":%llu,\"max_wait_ns\":%llu}",
                  per.empty() ? "" : ",", s.tid, s.acquisitions, s.wait_ns, s.max_wait_ns);
    per += buf;
  }
  // the median hold as this process measured it (to the microsecond: the slot's middle)
  unsigned long long seen = 0, hold_p50 = 0;
  for (size_t i = 0; i < holds.size() && acq; ++i)
    if ((seen += holds[i]) * 2 >= acq) {
      hold_p50 = i * 1000 + 500;
      break;
    }
  const void* addr = g_opts.private_locks ? static_cast<const void*>(&g_stats[0].own)
                                          : static_cast<const void*>(&cache_lock);
  std::printf(
      "{\"type\":\"mutex_contention\",\"pid\":%d,\"mutex_addr\":\"%p\",\"mutex_addr_int\":%llu,"
      "\"symbol\":\"%s\",\"threads\":%ld,\"hold_ns_target\":%llu,\"duration_ns\":%llu,"
      "\"acquisitions\":%llu,\"total_wait_ns\":%llu,\"max_wait_ns\":%llu,\"slow_acquisitions\":%llu,"
      "\"hold_ns\":%llu,\"hold_p50_ns\":%llu,\"ops_per_sec\":%.1f,\"cpu_ns\":%llu,\"cpu_ns_per_op\":%.2f,\"private\":%s,"
      "\"per_thread\":[%s]}\n",
      getpid(), addr, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(addr)),
      g_opts.private_locks ? "" : "cache_lock", g_opts.threads, g_opts.hold_us * 1000ULL, dur, acq,
      wait, maxw, slow, hold, hold_p50, acq * 1e9 / static_cast<double>(dur), cpu, acq ? cpu / static_cast<double>(acq) : 0.0,
      g_opts.private_locks ? "true" : "false",
      per.c_str());
  return 0;
}
