// Runs the runbook's tools: one child process each (own process group, stdout a
// pipe, stderr a file), a window that starts once every tool's "<tool>.start" record
// has arrived (SIGUSR1 to each: a report boundary, so the final report covers the
// window), then SIGINT to each (every tool prints its final report on SIGINT).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/runloop.h"
#include "tools/runbook/runbook.h"

namespace runbook {
using namespace bpfdiag;

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

constexpr uint64_t kSec = 1'000'000'000ULL;
constexpr uint64_t kAttachTimeout = 120 * kSec;  // BPF compiles of 5 tools on a busy box
constexpr uint64_t kStopTimeout = 60 * kSec;

bool executable(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}

// The suite's program: next to runbook first, then PATH.
std::string find_program(const std::string& name) {
  std::string here = self_exe_dir();
  if (!here.empty() && executable(here + "/" + name)) return here + "/" + name;
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  for (std::string d; std::getline(ss, d, ':');)
    if (!d.empty() && executable(d + "/" + name)) return d + "/" + name;
  return "";
}

// Output of `exe --help` (no BPF is loaded for --help).
std::string help_text(const std::string& exe) {
  std::string cmd = "'" + exe + "' --help 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

Status make_dir(const std::string& dir) {
  std::string cur;
  std::stringstream ss(dir);
  if (!dir.empty() && dir[0] == '/') cur = "/";
  for (std::string part; std::getline(ss, part, '/');) {
    if (part.empty()) continue;
    cur += part + "/";
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      return Error{"cannot create " + cur + ": " + std::strerror(errno)};
  }
  return std::nullopt;
}

void handle_line(ToolRun& t, const std::string& line, std::ofstream& ndjson) {
  ndjson << line << "\n";
  ndjson.flush();
  if (line.empty()) return;
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    ++t.bad_lines;
    return;
  }
  if (j.value("type", "") == t.name + ".start") t.started = true;
  t.records.push_back(std::move(j));
}

void drain(ToolRun& t, std::ofstream& ndjson) {
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

void spawn(ToolRun& t, const std::string& dir) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    t.error = std::string("pipe: ") + std::strerror(errno);
    return;
  }
  std::string err_path = dir + "/" + t.name + ".stderr.txt";
  pid_t pid = fork();
  if (pid < 0) {
    t.error = std::string("fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    setpgid(0, 0);  // Ctrl-C reaches runbook only; it stops the tools itself
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    int in = open("/dev/null", O_RDONLY);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || err < 0) _exit(126);
    dup2(in, 0);
    dup2(fds[1], 1);
    dup2(err, 2);
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
void pump(Run& run, std::vector<std::ofstream>& out, int ms) {
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

Status execute(Run& run) {
  if (auto st = make_dir(run.dir)) return st;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  for (auto& rt : run.book.tools) {
    ToolRun t;
    t.name = rt.name;
    t.exe = find_program(rt.name);
    t.argv = {t.exe.empty() ? rt.name : t.exe, "-j"};
    const std::string help = t.exe.empty() ? "" : help_text(t.exe);
    // -p goes to the tools that have it (runqlen measures CPUs, not processes)
    if (!run.cfg.pid_arg.empty() && (t.exe.empty() || help.find("--pid") != std::string::npos))
      t.argv.insert(t.argv.end(), {"-p", run.cfg.pid_arg});
    else if (!run.cfg.pid_arg.empty())
      t.whole_machine = true;
    t.argv.insert(t.argv.end(), rt.args.begin(), rt.args.end());
    if (t.exe.empty()) {
      t.error = rt.name + " not found next to runbook (" + self_exe_dir() + ") or in PATH";
    } else if (help.find("--svg") != std::string::npos) {
      t.own_svg = true;
      t.argv.insert(t.argv.end(), {"--svg", run.dir + "/" + t.name + ".svg"});
    }
    run.tools.push_back(std::move(t));
  }
  std::vector<std::ofstream> out(run.tools.size());
  run.start_ns = realtime_ns();
  for (size_t i = 0; i < run.tools.size(); ++i) {
    auto& t = run.tools[i];
    if (!t.error.empty()) continue;
    out[i].open(run.dir + "/" + t.name + ".ndjson", std::ios::trunc);
    t.files.push_back(t.name + ".ndjson");
    t.files.push_back(t.name + ".stderr.txt");
    spawn(t, run.dir);
  }
  std::fprintf(stderr, "runbook %s: starting %zu tools; report in %s\n", run.book.name.c_str(), run.tools.size(),
               run.dir.c_str());

  // 1. every tool attached (or ended)
  const uint64_t t0 = monotonic_ns();
  for (;;) {
    bool waiting = false;
    for (auto& t : run.tools)
      if (running(t) && !t.started && !t.exited) waiting = true;
    if (!waiting || g_stop) break;
    if (monotonic_ns() - t0 > kAttachTimeout) {
      run.attach_timeout = true;
      break;
    }
    pump(run, out, 100);
  }
  // 2. the window. Each tool has traced since its own attach, the first ones through
  // the others' startup (BPF compiles: CPU load a run-queue tool would report);
  // SIGUSR1 makes each print a report boundary now, so its final report covers the
  // window only (common/runloop.h).
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
  // 3. stop: SIGINT makes every tool print its final report
  for (auto& t : run.tools)
    if (t.pid > 0 && !t.exited) kill(t.pid, SIGINT);
  const uint64_t s0 = monotonic_ns();
  for (;;) {
    bool any = false;
    for (auto& t : run.tools) any = any || running(t);
    if (!any) break;
    if (monotonic_ns() - s0 > kStopTimeout) {
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
      break;
    }
    pump(run, out, 100);
  }
  run.end_ns = realtime_ns();
  for (auto& t : run.tools) {
    if (t.pid <= 0) continue;
    std::ifstream in(run.dir + "/" + t.name + ".stderr.txt");
    std::stringstream ss;
    ss << in.rdbuf();
    t.stderr_text = ss.str();
  }
  return std::nullopt;
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
