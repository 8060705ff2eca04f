// Shared by the *_nofp workloads (built -O2 -fomit-frame-pointer, see CMakeLists.txt):
// each thread blocks in one named function reached through a known call chain and
// times its own blocking with CLOCK_MONOTONIC around the blocking libc call. The
// report is one JSON object on stdout:
//   {"pid":..,"threads":[{"name","tid","function","callers":[outer,..],"blocked_ns","calls",
//                         "run_delay_ns"}]}
// run_delay_ns: the thread's wait on a run queue between name_self and done (schedstat):
// on a loaded box a thread preempted while it computes or spins is off-CPU too, which a
// stack tool counts under its callers and blocked_ns does not.
// `callers` lists the frames above `function`, outermost first, so a stack tool's
// folded line must contain "callers[0];...;function".
#pragma once
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

// noipa: no inlining, cloning (.constprop/.isra) or other IPA, so the symbol and the
// frame stay; UW_KEEP after a call stops GCC from turning it into a tail jump.
#define UW_FN extern "C" __attribute__((noipa))
#define UW_KEEP asm volatile("" ::: "memory")

namespace uw {

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// One byte read from fd, timed (ns): inlined into the named blocking function.
__attribute__((always_inline)) inline uint64_t timed_read(int fd) {
  char c;
  uint64_t t0 = now_ns();
  if (read(fd, &c, 1) != 1) std::abort();
  return now_ns() - t0;
}

inline void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

// The timed part starts after start_delay ms; with -1, once a byte (or EOF) arrives
// on stdin, so a test can start it right after its tracer has attached.
inline void start_gate(long start_delay) {
  if (start_delay > 0) sleep_ms(start_delay);
  if (start_delay < 0) {
    char c;
    while (read(0, &c, 1) < 0) {
    }
  }
}

struct Result {
  const char* name;
  const char* function;
  std::vector<const char*> callers;
  long tid = 0;
  uint64_t blocked_ns = 0;
  int calls = 0;
  uint64_t run_delay_ns = 0;  // since name_self; the total once done() ran
};

// This thread's run_delay (ns waiting on a run queue), 0 if schedstat is unreadable.
inline uint64_t run_delay_now() {
  uint64_t on_cpu = 0, delay = 0;
  if (FILE* f = std::fopen("/proc/thread-self/schedstat", "r")) {
    if (std::fscanf(f, "%lu %lu", &on_cpu, &delay) != 2) delay = 0;
    std::fclose(f);
  }
  return delay;
}

inline void name_self(Result& r) {
  pthread_setname_np(pthread_self(), r.name);
  r.tid = syscall(SYS_gettid);
  r.run_delay_ns = run_delay_now();
}

// The end of the thread's timed part.
inline void done(Result& r) { r.run_delay_ns = run_delay_now() - r.run_delay_ns; }

inline void print_report(const std::vector<Result>& res) {
  std::string out = "{\"pid\":" + std::to_string(getpid()) + ",\"threads\":[";
  for (size_t i = 0; i < res.size(); ++i) {
    const Result& r = res[i];
    out += std::string(i ? "," : "") + "{\"name\":\"" + r.name + "\",\"tid\":" + std::to_string(r.tid) +
           ",\"function\":\"" + r.function + "\",\"callers\":[";
    for (size_t c = 0; c < r.callers.size(); ++c) out += std::string(c ? "," : "") + "\"" + r.callers[c] + "\"";
    out += "],\"blocked_ns\":" + std::to_string(r.blocked_ns) + ",\"calls\":" + std::to_string(r.calls) +
           ",\"run_delay_ns\":" + std::to_string(r.run_delay_ns) + "}";
  }
  out += "]}";
  std::puts(out.c_str());
  std::fflush(stdout);
}

// Arguments shared by the pipe + condvar workloads:
//   [pipe_reads=9] [pipe_ms=100] [cond_waits=4] [cond_ms=100] [start_delay_ms=0, -1: stdin]
struct PipeCondArgs {
  int pipe_reads = 9, cond_waits = 4;
  long pipe_ms = 100, cond_ms = 100, start_delay = 0;
};
inline bool parse_pipe_cond(int argc, char** argv, PipeCondArgs& a) {
  if (argc > 1) a.pipe_reads = std::atoi(argv[1]);
  if (argc > 2) a.pipe_ms = std::atol(argv[2]);
  if (argc > 3) a.cond_waits = std::atoi(argv[3]);
  if (argc > 4) a.cond_ms = std::atol(argv[4]);
  if (argc > 5) a.start_delay = std::atol(argv[5]);
  return a.pipe_reads >= 1 && a.pipe_ms >= 1 && a.cond_waits >= 1 && a.cond_ms >= 1 && a.start_delay >= -1;
}
// Two driver threads: one writes a byte to pipe_wr every pipe_ms, one bumps *gen and
// signals cv every cond_ms. Returns them to be joined.
inline std::vector<std::thread> start_drivers(const PipeCondArgs& a, int pipe_wr, pthread_mutex_t* mu,
                                              pthread_cond_t* cv, int* gen) {
  std::vector<std::thread> t;
  t.emplace_back([=] {
    pthread_setname_np(pthread_self(), "uw_pipe_drv");
    for (int i = 0; i < a.pipe_reads; ++i) {
      sleep_ms(a.pipe_ms);
      char c = 'x';
      if (write(pipe_wr, &c, 1) != 1) std::abort();
    }
  });
  t.emplace_back([=] {
    pthread_setname_np(pthread_self(), "uw_cond_drv");
    for (int i = 1; i <= a.cond_waits; ++i) {
      sleep_ms(a.cond_ms);
      pthread_mutex_lock(mu);
      *gen = i;
      pthread_cond_signal(cv);
      pthread_mutex_unlock(mu);
    }
  });
  return t;
}

}  // namespace uw
