// Runs the runbook's tools: one child process each (own process group, stdout a
// pipe, stderr a file; it gets SIGTERM when runbook dies, and a --duration backstop
// from plan_tools), a window that starts once every tool's "<tool>.start" record
// has arrived (SIGUSR1 to each: a report boundary, so the final report covers the
// window), then SIGINT to each (every tool prints its final report on SIGINT).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common/runloop.h"
#include "tools/runbook/runbook.h"

namespace runbook {
using namespace bpfdiag;

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

constexpr uint64_t kSec = 1'000'000'000ULL;
constexpr uint64_t kStopTimeout = 60 * kSec;

void handle_line(ToolRun& t, const std::string& line, int ndjson) {
  if (ndjson >= 0) write_all(ndjson, line + "\n");
  if (line.empty()) return;
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    ++t.bad_lines;
    return;
  }
  if (j.value("type", "") == t.name + ".start") t.started = true;
  t.records.push_back(std::move(j));
}

void drain(ToolRun& t, int ndjson) {
  char buf[65536];
  for (;;) {
    ssize_t n = read(t.out_fd, buf, sizeof buf);
    if (n > 0) {
      t.partial.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = t.partial.find('\n')) != std::string::npos) {
        handle_line(t, t.partial.substr(0, nl), ndjson);
        t.partial.erase(0, nl + 1);
      }
      continue;
    }
    if (n == 0) {  // closed
      if (!t.partial.empty()) handle_line(t, t.partial, ndjson);
      t.partial.clear();
      close(t.out_fd);
      t.out_fd = -1;
    }
    return;  // EAGAIN or closed
  }
}

void spawn(ToolRun& t, int err_fd) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    t.error = std::string("pipe: ") + std::strerror(errno);
    return;
  }
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    t.error = std::string("fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    // the tool ends with runbook: SIGTERM (every tool stops on it and detaches) when
    // runbook dies, and none at all if it died before this line
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    setpgid(0, 0);  // Ctrl-C reaches runbook only; it stops the tools itself
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0 || dup2(in, 0) < 0 || dup2(fds[1], 1) < 0 || dup2(err_fd, 2) < 0) _exit(126);
    int pprof_fd = t.pprof_fd;
    if (pprof_fd == kSvgFd && (pprof_fd = fcntl(pprof_fd, F_DUPFD_CLOEXEC, kPprofFd + 1)) < 0) _exit(126);
    if (t.svg_fd >= 0) {  // --svg /proc/self/fd/3
      if (t.svg_fd == kSvgFd ? fcntl(kSvgFd, F_SETFD, 0) < 0 : dup2(t.svg_fd, kSvgFd) < 0) _exit(126);
    }
    if (pprof_fd >= 0) {  // --pprof /proc/self/fd/4
      if (pprof_fd == kPprofFd ? fcntl(kPprofFd, F_SETFD, 0) < 0 : dup2(pprof_fd, kPprofFd) < 0) _exit(126);
    }
    std::vector<char*> av;
    for (auto& a : t.argv) av.push_back(const_cast<char*>(a.c_str()));
    av.push_back(nullptr);
    execv(t.exe.c_str(), av.data());
    std::fprintf(stderr, "%s: cannot execute %s: %s\n", t.name.c_str(), t.exe.c_str(), std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  t.pid = pid;
  t.out_fd = fds[0];
}

void reap(Run& run) {
  for (auto& t : run.tools) {
    if (t.pid <= 0 || t.exited) continue;
    int status;
    if (waitpid(t.pid, &status, WNOHANG) == t.pid) {
      t.exited = true;
      if (WIFEXITED(status)) t.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) t.exit_signal = WTERMSIG(status);
    }
  }
}

// Polls the tools' stdout for up to `ms`, reading what is there.
void pump(Run& run, std::vector<int>& out, int ms) {
  std::vector<pollfd> pfds;
  std::vector<size_t> idx;
  for (size_t i = 0; i < run.tools.size(); ++i)
    if (run.tools[i].out_fd >= 0) {
      pfds.push_back({run.tools[i].out_fd, POLLIN, 0});
      idx.push_back(i);
    }
  if (pfds.empty()) {
    usleep(static_cast<useconds_t>(ms) * 1000);
  } else if (poll(pfds.data(), pfds.size(), ms) > 0) {
    for (size_t k = 0; k < pfds.size(); ++k)
      if (pfds[k].revents) drain(run.tools[idx[k]], out[idx[k]]);
  }
  reap(run);
}

bool running(const ToolRun& t) { return t.pid > 0 && (!t.exited || t.out_fd >= 0); }

}  // namespace

uint64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * kSec + static_cast<uint64_t>(ts.tv_nsec);
}

std::string iso_time(uint64_t ns) {
  time_t s = static_cast<time_t>(ns / kSec);
  tm t;
  gmtime_r(&s, &t);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, static_cast<unsigned>(ns % kSec / 1'000'000));
  return buf;
}

namespace {

// Creates each tool's files in the report directory and starts it; out[i] is tool i's
// NDJSON file (-1 when it did not start).
void start_tools(Run& run, std::vector<int>& out) {
  for (size_t i = 0; i < run.tools.size(); ++i) {
    auto& t = run.tools[i];
    if (!t.error.empty()) continue;
    // a runbook may name a tool twice: the second one's files get a number
    std::string base = t.name;
    for (int n = 2; faccessat(run.dir_fd, (base + ".ndjson").c_str(), F_OK, AT_SYMLINK_NOFOLLOW) == 0; ++n)
      base = t.name + "-" + std::to_string(n);
    out[i] = create_report_file(run, base + ".ndjson");
    int err = create_report_file(run, base + ".stderr.txt");
    if (t.own_svg) t.svg_fd = create_report_file(run, base + ".svg");
    if (t.own_pprof) t.pprof_fd = create_report_file(run, base + ".pb.gz");
    if (out[i] < 0 || err < 0 || (t.own_svg && t.svg_fd < 0) || (t.own_pprof && t.pprof_fd < 0)) {
      t.error = "cannot create its files in " + run.dir + ": " + std::strerror(errno);
      if (err >= 0) close(err);
      continue;
    }
    t.files.push_back(base + ".ndjson");
    t.files.push_back(base + ".stderr.txt");
    t.base = base;
    spawn(t, err);
    close(err);
  }
}

// 1. Until every tool has attached (or ended), a stop signal, or the attach timeout.
void wait_all_attached(Run& run, std::vector<int>& out) {
  const uint64_t t0 = monotonic_ns();
  for (;;) {
    bool waiting = false;
    for (auto& t : run.tools)
      if (running(t) && !t.started && !t.exited) waiting = true;
    if (!waiting || g_stop) break;
    if (monotonic_ns() - t0 > kAttachTimeoutNs) {
      run.attach_timeout = true;
      break;
    }
    pump(run, out, 100);
  }
}

// 2. The window. Each tool has traced since its own attach, the first ones through
// the others' startup (BPF compiles: CPU load a run-queue tool would report);
// SIGUSR1 makes each print a report boundary now, so its final report covers the
// window only (common/runloop.h).
void trace_window(Run& run, std::vector<int>& out) {
  for (auto& t : run.tools)
    if (t.pid > 0 && t.started && !t.exited) kill(t.pid, SIGUSR1);
  run.window_start_ns = realtime_ns();
  uint64_t duration = run.cfg.duration_ns ? run.cfg.duration_ns : run.book.duration_ns;
  if (!g_stop)
    std::fprintf(stderr, "runbook %s: all tools attached; tracing for %.3g s (Ctrl-C ends early)\n",
                 run.book.name.c_str(), static_cast<double>(duration) / 1e9);
  const uint64_t w0 = monotonic_ns();
  for (;;) {
    bool any = false;
    for (auto& t : run.tools) any = any || running(t);
    if (!any || g_stop) break;
    if (!run.book.wait_exit && monotonic_ns() - w0 >= duration) break;
    pump(run, out, 100);
  }
  run.interrupted = g_stop != 0;
  run.window_end_ns = realtime_ns();
}

// After kStopTimeout: every tool still running is killed (its process group) and
// reaped, and what its stdout still holds is read.
void kill_stragglers(Run& run, std::vector<int>& out) {
  for (auto& t : run.tools)
    if (t.pid > 0 && !t.exited) {
      kill(-t.pid, SIGKILL);
      t.killed = true;
    }
  for (auto& t : run.tools)
    if (t.pid > 0 && !t.exited) {
      int status;
      waitpid(t.pid, &status, 0);
      t.exited = true;
      t.exit_signal = SIGKILL;
    }
  for (size_t i = 0; i < run.tools.size(); ++i)
    if (run.tools[i].out_fd >= 0) drain(run.tools[i], out[i]);
}

// 3. Stop: SIGINT makes every tool print its final report.
void stop_tools(Run& run, std::vector<int>& out) {
  for (auto& t : run.tools)
    if (t.pid > 0 && !t.exited) kill(t.pid, SIGINT);
  const uint64_t s0 = monotonic_ns();
  for (;;) {
    bool any = false;
    for (auto& t : run.tools) any = any || running(t);
    if (!any) break;
    if (monotonic_ns() - s0 > kStopTimeout) {
      kill_stragglers(run, out);
      break;
    }
    pump(run, out, 100);
  }
}

}  // namespace

void execute(Run& run) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<int> out(run.tools.size(), -1);
  run.start_ns = realtime_ns();
  start_tools(run, out);
  std::fprintf(stderr, "runbook %s: starting %zu tools; report in %s\n", run.book.name.c_str(), run.tools.size(),
               run.dir.c_str());
  wait_all_attached(run, out);
  trace_window(run, out);
  stop_tools(run, out);
  run.end_ns = realtime_ns();
  for (size_t i = 0; i < run.tools.size(); ++i) {
    if (out[i] >= 0) close(out[i]);
    auto& t = run.tools[i];
    if (t.pid > 0) t.stderr_text = read_report_file(run.dir_fd, t.base + ".stderr.txt");
  }
}

std::string ToolRun::stderr_last_line() const {
  if (!error.empty()) return error;
  std::istringstream is(stderr_text);
  std::string last;
  for (std::string l; std::getline(is, l);) {
    // libbcc's load noise is not the reason a tool failed
    if (l.find("sha1 socket") != std::string::npos || l.find("cannot get prog tag") != std::string::npos) continue;
    if (!l.empty()) last = l;
  }
  return last;
}

std::vector<const nlohmann::json*> ToolRun::final_records(const std::string& kind) const {
  std::vector<const nlohmann::json*> all, fin;
  const std::string type = name + "." + kind;
  for (auto& r : records)
    if (r.value("type", "") == type) {
      all.push_back(&r);
      if (r.value("final", false)) fin.push_back(&r);
    }
  return fin.empty() ? all : fin;
}

}  // namespace runbook
