#include "common/runloop.h"

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/parse.h"
#include "common/timing.h"

namespace bpfdiag {
namespace {

const int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Shared with the signal handler: lock-free atomics only.
std::atomic<int> g_stop_signal{0};
std::atomic<uint64_t> g_stop_ns{0};         // this process's CPU time at the first stop signal
std::atomic<uint64_t> g_stop_wall_ns{0};    // CLOCK_MONOTONIC then (BPFDIAG_TIMING)
std::atomic<bool> g_running{false};       // the run loop has started
std::atomic<bool> g_boundary{false};      // SIGUSR1: a report boundary was asked for
std::atomic<uint64_t> g_boundaries{0};     // boundaries reported so far
std::atomic<uint64_t> g_boundary_ns{0};    // monotonic_ns() of the last one
std::atomic<char**> g_temp_paths{nullptr};  // null-terminated, removed before _exit
std::atomic<long> g_loop_tid{0};           // the run loop's thread (0: not running)

// The thread that makes the final report runs SCHED_RR at the lowest real-time priority
// from the stop signal on (see run_loop). A plain system call: the signal handler may
// make it, for the loop thread, whichever thread the signal was delivered to.
void final_report_priority(long tid) {
  struct sched_param sp = {};
  sp.sched_priority = 1;
  syscall(SYS_sched_setscheduler, tid, SCHED_RR | SCHED_RESET_ON_FORK, &sp);  // EPERM: nice -20 stays
}

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kStopSignals) sigaddset(&set, s);
  return set;
}

// Removes NAME under the directory DIRFD (a file, or a directory with what it holds,
// DEPTH levels at most) with system calls only (openat, getdents64, unlinkat), so a
// signal handler may call it while the tree is still being written.
void remove_tree_at(int dirfd, const char* name, int depth) {
  if (unlinkat(dirfd, name, 0) == 0 || errno != EISDIR || depth == 0) {
    unlinkat(dirfd, name, AT_REMOVEDIR);
    return;
  }
  const int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buf[2048];
  for (;;) {
    const long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      struct Ent {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const Ent* e = reinterpret_cast<const Ent*>(buf + off);
      off += e->reclen;
      if (e->name[0] == '.' && (e->name[1] == 0 || (e->name[1] == '.' && e->name[2] == 0)))
        continue;
      remove_tree_at(fd, e->name, depth - 1);
    }
  }
  close(fd);
  unlinkat(dirfd, name, AT_REMOVEDIR);
}

void remove_temp_paths() {
  char** paths = g_temp_paths.load();
  if (!paths) return;
  const int saved = errno;
  for (char** p = paths; *p; ++p) remove_tree_at(AT_FDCWD, *p, 8);
  errno = saved;
}

void on_stop_signal(int sig) {
  const int saved = errno;
  int expected = 0;
  const bool first = g_stop_signal.compare_exchange_strong(expected, sig);
  if (!g_running.load() || !first) {
    // Nothing to report yet (or asked twice): nothing attached outlives the process,
    // only our temp files would.
    remove_temp_paths();
    _exit(128 + sig);
  }
  struct timespec ts;  // clock_gettime is async-signal-safe
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  g_stop_ns.store(static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + ts.tv_nsec);
  clock_gettime(CLOCK_MONOTONIC, &ts);
  g_stop_wall_ns.store(static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + ts.tv_nsec);
  // At once, not when the loop next looks: under 2000 runnable threads the loop thread
  // at nice -20 took 0.5-1.8 s to finish the poll it was in (BPFDIAG_TIMING: "stop
  // signal seen" that long after "handled"; test_prompt_exit, ci37 and CI)
  if (const long tid = g_loop_tid.load()) final_report_priority(tid);
  errno = saved;
}

void on_boundary_signal(int) { g_boundary.store(true); }

// A report builds and frees tens of MB (tables read, names, JSON); glibc keeps freed
// heap in its arenas, and over a long run under churn the high-water marks of
// fragmented heaps looked like growth (RSS +10-22% over 30 minutes in bench/soak.sh).
// Handing the free pages back after each interval report keeps RSS what is in use.
void release_freed_memory() { malloc_trim(0); }

}  // namespace

uint64_t monotonic_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + ts.tv_nsec;
}

uint64_t realtime_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + ts.tv_nsec;
}

void install_stop_handlers() {
  g_running.store(false);  // a fresh start (e.g. a forked child of a finished run)
  g_stop_signal.store(0);
  g_stop_ns.store(0);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read or open returns EINTR at once
  for (int s : kStopSignals) sigaction(s, &sa, nullptr);
  g_boundary.store(false);
  sa.sa_handler = on_boundary_signal;
  // SA_RESTART: a report boundary must not fail a write blocked on a full pipe (stdio
  // does not retry EINTR: "cannot write output", exit 1, output lost); the waits the
  // loop sleeps in (poll, epoll_wait, nanosleep) still return EINTR at once
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigset_t set = stop_set();
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);  // e.g. inherited blocked from a parent
}

void enter_reporting() { g_running.store(true); }

bool report_pending() { return stop_signal() != 0 || g_boundary.load(); }

int stop_signal() { return g_running.load() ? g_stop_signal.load() : 0; }

bool past_stop_deadline() {
  const uint64_t t = g_stop_ns.load();
  if (t == 0 || !g_running.load()) return false;
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + ts.tv_nsec >= t + kStopBudgetNs;
}

StopSignalsBlocked::StopSignalsBlocked() {
  sigset_t set = stop_set();
  sigprocmask(SIG_BLOCK, &set, &old_);
}

StopSignalsBlocked::~StopSignalsBlocked() { sigprocmask(SIG_SETMASK, &old_, nullptr); }

void register_temp_paths(const std::vector<std::string>& paths) {
  char** list = nullptr;
  if (!paths.empty()) {
    list = new char*[paths.size() + 1];
    for (size_t i = 0; i < paths.size(); ++i) list[i] = strdup(paths[i].c_str());
    list[paths.size()] = nullptr;
  }
  sigset_t set = stop_set(), old;
  sigprocmask(SIG_BLOCK, &set, &old);  // the handler never sees a list being freed
  char** prev = g_temp_paths.exchange(list);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  if (prev) {
    for (char** p = prev; *p; ++p) free(*p);
    delete[] prev;
  }
}

std::string banner_until(const Schedule& s) {
  if (s.duration_ns) return " for " + format_duration(*s.duration_ns) + ".";
  if (s.interval_ns && s.count) return " for " + std::to_string(*s.count) + " intervals.";
  return "... Hit Ctrl-C to end.";
}

uint64_t report_boundaries() { return g_boundaries.load(); }
uint64_t last_boundary_ns() { return g_boundary_ns.load(); }

int run_loop(const Schedule& s, const RunHooks& hooks) {
  // A stop signal from now on asks for the final report instead of ending the process.
  // One that came before (the handler ended the process then) cannot be pending here.
  g_running.store(true);
  // The tracer must not be starved by the load it diagnoses: thousands of runnable
  // threads delayed Ctrl-C's wakeup (and the buffer reads, and the report) by seconds
  // at nice 0. The loop thread runs at the highest priority, as atop does; it sleeps
  // in poll almost all the time, so this moves when it runs, not how much (root may;
  // an EPERM leaves the priority as it was).
  setpriority(PRIO_PROCESS, 0, -20);
  g_loop_tid.store(static_cast<long>(syscall(SYS_gettid)));
  const uint64_t start = monotonic_ns();
  uint64_t next_tick = s.interval_ns ? start + *s.interval_ns : UINT64_MAX;
  const uint64_t end = s.duration_ns ? start + *s.duration_ns : UINT64_MAX;
  uint64_t ticks = 0;
  int sig = 0;
  while (true) {
    uint64_t now = monotonic_ns();
    uint64_t wake = std::min(next_tick, end);
    int budget = wake <= now ? 0 : static_cast<int>(std::min<uint64_t>((wake - now) / 1000000ULL + 1, 100));
    if ((sig = stop_signal())) break;
    if (hooks.poll) {
      hooks.poll(budget);
    } else if (budget > 0) {
      struct timespec ts = {budget / 1000, (budget % 1000) * 1000000L};
      nanosleep(&ts, nullptr);  // a signal ends it early (EINTR)
    }
    if ((sig = stop_signal())) break;
    if (hooks.should_stop && hooks.should_stop()) break;
    now = monotonic_ns();
    if (now >= end) break;
    if (g_boundary.exchange(false) && hooks.report) {
      g_boundary_ns.store(now);
      hooks.report(false);  // SIGUSR1: what came before goes into this report
      release_freed_memory();
      g_boundaries.fetch_add(1);
      continue;
    }
    if (now >= next_tick) {
      ++ticks;
      if (s.count && ticks >= *s.count) break;  // the last interval is the final report
      if (hooks.report) hooks.report(false);
      release_freed_memory();
      next_tick += *s.interval_ns;
      if (next_tick <= now) next_tick = now + *s.interval_ns;
    }
  }
  // Ctrl-C promises the report within about a second. nice -20 weighs 88761 against
  // 1024 per runnable thread: under 2000 of them the loop got ~5% of a CPU, and the
  // stop budget (500 ms of its CPU time) took 3-8 s. The final report after a stop
  // signal runs SCHED_RR at the lowest real-time priority: one thread, bounded by that
  // budget, under the kernel's real-time throttling; children do not inherit it.
  if (sig) {
    timing_mark_at("stop signal handled", g_stop_wall_ns.load());
    timing_mark("stop signal seen");
    final_report_priority(0);  // done by the handler already, unless it ran before the loop did
  }
  if (hooks.report) hooks.report(true);
  g_loop_tid.store(0);
  timing_mark("final report");
  timing_report();  // BPFDIAG_TIMING=1: the stop's phases too
  return sig;
}

}  // namespace bpfdiag
