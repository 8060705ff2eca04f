// sleepers: issues sleeps through every libc path with known lengths, for naptime.
//
// Protocol: prints {"ready":true,"pid":N} and waits for a line on stdin (so a tracer
// can attach first), then sleeps, then prints one JSON line with its ground truth:
//   {"pid":N,"tids":[...],"sleeps":[{"path","tid","clocks","abstime","requested_ns",
//    "slept_ns","interrupted","errno"}, ...]}
// requested_ns is the exact length passed for relative sleeps and, for TIMER_ABSTIME
// ones, the intended length (target minus the clock read just before the call).
// slept_ns is measured by the workload with CLOCK_MONOTONIC around the call.
// "clocks" lists the clock names a correct tracer may report: libc wrappers are
// allowed to use either clock_nanosleep(CLOCK_REALTIME) (glibc) or nanosleep(2).
// Options: --no-sleep1 skips sleep(1) (the only one-second sleep).
// --storm N: instead, at once, N zero-length clock_nanosleep(CLOCK_MONOTONIC) calls
// with 1 ns timer slack, then {"pid":N,"storm":N,"elapsed_ns":..} (tracer overhead
// per sleep, for bench/naptime.sh).
// Waiting for "go" is a read(2), and no other sleep is issued by the process.
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

int64_t now_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

struct timespec to_ts(int64_t ns) {
  struct timespec ts;
  ts.tv_sec = ns / 1000000000LL;
  ts.tv_nsec = ns % 1000000000LL;
  return ts;
}

pid_t gettid_() { return static_cast<pid_t>(syscall(SYS_gettid)); }

struct Record {
  std::string path;
  pid_t tid;
  std::vector<std::string> clocks;
  bool abstime;
  int64_t requested_ns;
  int64_t slept_ns;
  bool interrupted;
  int err;
  int64_t run_delay_ns;  // waiting on a run queue around the call (schedstat), e.g. after wake-up
};

// This thread's run_delay (ns waiting on a run queue), 0 if schedstat is unreadable.
int64_t run_delay_now() {
  unsigned long long on_cpu = 0, delay = 0;
  if (FILE* f = std::fopen("/proc/thread-self/schedstat", "r")) {
    if (std::fscanf(f, "%llu %llu", &on_cpu, &delay) != 2) delay = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(delay);
}

std::mutex g_mu;
std::vector<Record> g_records;
std::vector<pid_t> g_tids;

const std::vector<std::string> kLibc = {"CLOCK_REALTIME", "CLOCK_MONOTONIC"};

// Runs `call` (returns 0 or an errno) and records it.
void issue(const std::string& path, const std::vector<std::string>& clocks, bool abstime,
           int64_t requested_ns, const std::function<int()>& call) {
  int64_t rd0 = run_delay_now();  // read outside the timed span
  int64_t t0 = now_ns(CLOCK_MONOTONIC);
  int err = call();
  int64_t t1 = now_ns(CLOCK_MONOTONIC);
  int64_t rd1 = run_delay_now();
  std::lock_guard<std::mutex> g(g_mu);
  g_records.push_back({path, gettid_(), clocks, abstime, requested_ns, t1 - t0, err != 0, err, rd1 - rd0});
}

// An absolute sleep of `len_ns` on `clock`; the intended length is measured here.
void abs_sleep(const std::string& path, clockid_t clock, const char* name, int64_t len_ns) {
  int64_t rd0 = run_delay_now();
  int64_t t0 = now_ns(CLOCK_MONOTONIC);
  int64_t now = now_ns(clock);
  struct timespec target = to_ts(now + len_ns);
  int err = clock_nanosleep(clock, TIMER_ABSTIME, &target, nullptr);
  int64_t t1 = now_ns(CLOCK_MONOTONIC);
  int64_t rd1 = run_delay_now();
  std::lock_guard<std::mutex> g(g_mu);
  g_records.push_back({path, gettid_(), {name}, true, len_ns, t1 - t0, err != 0, err, rd1 - rd0});
}

void on_usr1(int) {}

std::atomic<bool> g_victim_ready{false};

void victim() {
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_tids.push_back(gettid_());
  }
  struct timespec ts = to_ts(3000000000LL);
  g_victim_ready = true;
  issue("clock_nanosleep(CLOCK_MONOTONIC) interrupted", {"CLOCK_MONOTONIC"}, false, 3000000000LL,
        [&] { return clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr); });
}

void worker() {
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_tids.push_back(gettid_());
  }
  issue("std::this_thread::sleep_for", kLibc, false, 12345678, [] {
    std::this_thread::sleep_for(std::chrono::nanoseconds(12345678));
    return 0;
  });
  struct timespec ts = to_ts(18000777);
  issue("syscall(SYS_nanosleep)", {"CLOCK_MONOTONIC"}, false, 18000777,
        [&] { return syscall(SYS_nanosleep, &ts, nullptr) == 0 ? 0 : errno; });
}

void spin_ns(int64_t ns) {
  int64_t end = now_ns(CLOCK_MONOTONIC) + ns;
  while (now_ns(CLOCK_MONOTONIC) < end) {
  }
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o + "\"";
}

}  // namespace

int storm(long n) {
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  struct timespec zero = {0, 0};
  int64_t t0 = now_ns(CLOCK_MONOTONIC);
  for (long i = 0; i < n; ++i) clock_nanosleep(CLOCK_MONOTONIC, 0, &zero, nullptr);
  int64_t t1 = now_ns(CLOCK_MONOTONIC);
  std::printf("{\"pid\":%d,\"storm\":%ld,\"elapsed_ns\":%lld}\n", getpid(), n,
              static_cast<long long>(t1 - t0));
  return 0;
}

int main(int argc, char** argv) {
  bool sleep1 = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-sleep1") == 0) {
      sleep1 = false;
    } else if (std::strcmp(argv[i], "--storm") == 0 && i + 1 < argc && std::atol(argv[i + 1]) > 0) {
      return storm(std::atol(argv[i + 1]));
    } else {
      std::fprintf(stderr,
                   "sleepers: bad argument '%s' (usage: sleepers [--no-sleep1 | --storm N])\n",
                   argv[i]);
      return 2;
    }
  }
  struct sigaction sa = {};
  sa.sa_handler = on_usr1;  // no SA_RESTART: the sleep returns EINTR
  sigaction(SIGUSR1, &sa, nullptr);
  g_tids.push_back(gettid_());

  std::printf("{\"ready\":true,\"pid\":%d}\n", getpid());
  std::fflush(stdout);
  char line[64];
  if (!std::fgets(line, sizeof line, stdin)) return 1;

  // the interrupted one, on its own thread
  std::thread v(victim);
  while (!g_victim_ready) {
  }
  spin_ns(50000000);  // let it enter the 3 s sleep (busy, so it is no sleep itself)
  // a second thread with libstdc++ and raw-syscall sleeps, concurrently
  std::thread w(worker);

  {
    struct timespec ts = to_ts(20001111);
    issue("nanosleep", kLibc, false, 20001111, [&] { return nanosleep(&ts, nullptr) ? errno : 0; });
  }
  pthread_kill(v.native_handle(), SIGUSR1);
  issue("usleep", kLibc, false, 15003000LL, [] { return usleep(15003) ? errno : 0; });
  if (sleep1) issue("sleep", kLibc, false, 1000000000LL, [] { return sleep(1) ? EINTR : 0; });
  {
    struct timespec ts = to_ts(25000333);
    issue("clock_nanosleep(CLOCK_MONOTONIC)", {"CLOCK_MONOTONIC"}, false, 25000333,
          [&] { return clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr); });
  }
  abs_sleep("clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)", CLOCK_MONOTONIC, "CLOCK_MONOTONIC",
            30000000);
  abs_sleep("clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME)", CLOCK_REALTIME, "CLOCK_REALTIME",
            35000000);
  abs_sleep("clock_nanosleep(CLOCK_BOOTTIME, TIMER_ABSTIME)", CLOCK_BOOTTIME, "CLOCK_BOOTTIME",
            22000000);
  abs_sleep("clock_nanosleep(CLOCK_TAI, TIMER_ABSTIME)", CLOCK_TAI, "CLOCK_TAI", 28000000);
  w.join();
  v.join();

  std::string out = "{\"pid\":" + std::to_string(getpid()) + ",\"tids\":[";
  for (size_t i = 0; i < g_tids.size(); ++i) out += (i ? "," : "") + std::to_string(g_tids[i]);
  out += "],\"sleeps\":[";
  for (size_t i = 0; i < g_records.size(); ++i) {
    const Record& r = g_records[i];
    out += i ? "," : "";
    out += "{\"path\":" + json_str(r.path) + ",\"tid\":" + std::to_string(r.tid) + ",\"clocks\":[";
    for (size_t k = 0; k < r.clocks.size(); ++k) out += (k ? "," : "") + json_str(r.clocks[k]);
    out += "],\"abstime\":" + std::string(r.abstime ? "true" : "false") +
           ",\"requested_ns\":" + std::to_string(r.requested_ns) +
           ",\"slept_ns\":" + std::to_string(r.slept_ns) +
           ",\"interrupted\":" + (r.interrupted ? "true" : "false") +
           ",\"errno\":" + std::to_string(r.err) + ",\"run_delay_ns\":" + std::to_string(r.run_delay_ns) + "}";
  }
  out += "]}";
  std::printf("%s\n", out.c_str());
  return 0;
}
