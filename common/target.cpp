#include "common/target.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include "common/proc.h"

namespace bpfdiag {

std::optional<uint64_t> proc_start_time(uint32_t pid) {
  if (pid == 0) return std::nullopt;
  auto st = read_proc_stat("/proc/" + std::to_string(pid) + "/stat");
  if (!st) return std::nullopt;
  return st->start_time;
}

namespace {

// dev+inode of the executable; false while it cannot be read (a zombie leader has no
// mm, so no exe, while its threads may still run).
bool exe_id(uint32_t pid, uint64_t& dev, uint64_t& ino) {
  struct stat st;
  if (stat(("/proc/" + std::to_string(pid) + "/exe").c_str(), &st) != 0) return false;
  dev = st.st_dev;
  ino = st.st_ino;
  return true;
}

std::string join_pids(const std::vector<uint32_t>& v) {
  std::string s;
  for (auto p : v) s += (s.empty() ? "" : ", ") + std::to_string(p);
  return s;
}

}  // namespace

TargetWatch::TargetWatch(const std::vector<uint32_t>& pids, ExecFn on_exec, std::optional<uint64_t> named_at)
    : on_exec_(std::move(on_exec)) {
  const uint64_t self_start =
      named_at ? *named_at : proc_start_time(static_cast<uint32_t>(getpid())).value_or(UINT64_MAX);
  for (uint32_t pid : pids) {
    Target t;
    t.pid = pid;
    auto start = proc_start_time(pid);
    // started after this tool: the PID was reused since the user named it
    t.gone = !start || *start > self_start || !proc_running(pid);
    if (start) t.start = *start;
    exe_id(pid, t.exe_dev, t.exe_ino);
    t.comm = proc_comm(pid);
    live_ += !t.gone;
    targets_.push_back(std::move(t));
  }
}

bool TargetWatch::check(uint64_t min_interval_ns) {
  if (targets_.empty()) return false;
  const uint64_t now = monotonic_ns();
  if (last_check_ && now - last_check_ < min_interval_ns) return all_gone();
  last_check_ = now;
  for (auto& t : targets_) {
    if (t.gone) continue;
    auto start = proc_start_time(t.pid);
    if (!start || *start != t.start || !proc_running(t.pid)) {
      t.gone = true;
      --live_;
      continue;
    }
    uint64_t dev = 0, ino = 0;
    if (!exe_id(t.pid, dev, ino)) continue;
    std::string comm = proc_comm(t.pid);
    if (dev != t.exe_dev || ino != t.exe_ino || comm != t.comm) {
      t.exe_dev = dev;
      t.exe_ino = ino;
      t.comm = comm;
      if (on_exec_) on_exec_(t.pid);
    }
  }
  return all_gone();
}

std::vector<uint32_t> TargetWatch::exited() const {
  std::vector<uint32_t> v;
  for (const auto& t : targets_)
    if (t.gone) v.push_back(t.pid);
  return v;
}

std::vector<uint32_t> TargetWatch::live() const {
  std::vector<uint32_t> v;
  for (const auto& t : targets_)
    if (!t.gone) v.push_back(t.pid);
  return v;
}

std::string TargetWatch::note() const {
  auto gone = exited();
  if (gone.empty()) return "";
  return std::string(gone.size() == 1 ? "PID " : "PIDs ") + join_pids(gone) + " exited";
}

void TargetWatch::attach(RunHooks& hooks) {
  if (targets_.empty()) return;
  auto prev_stop = hooks.should_stop;
  auto announced = std::make_shared<std::vector<uint32_t>>(exited());
  hooks.should_stop = [this, prev_stop, announced]() {
    bool done = check(100000000ULL);
    if (!done) {  // some left while others remain: say so now
      std::vector<uint32_t> fresh;
      for (uint32_t p : exited())
        if (std::find(announced->begin(), announced->end(), p) == announced->end()) fresh.push_back(p);
      if (!fresh.empty()) {
        std::fprintf(stderr, "%s: PID %s exited; still tracing %s\n", program_invocation_short_name,
                     join_pids(fresh).c_str(), join_pids(live()).c_str());
        std::fflush(stderr);
        announced->insert(announced->end(), fresh.begin(), fresh.end());
      }
    }
    bool other = prev_stop && prev_stop();
    return done || other;
  };
  auto prev_report = hooks.report;
  hooks.report = [this, prev_report](bool final) {
    if (prev_report) prev_report(final);
    if (final && all_gone()) {
      std::cout.flush();
      std::fflush(stdout);
      std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, note().c_str());
      std::fflush(stderr);
    }
  };
}

}  // namespace bpfdiag
