// --uprobes probe-cost calibration (see "Probe cost" in bpf_sources/lockstat.bpf.c).
//
// Every call timed by the uprobe/uretprobe pair also contains part of the probes' own
// cost: after the entry handler reads the clock the kernel still finishes the entry
// trap and returns to user space, and the return probe traps into the kernel again
// before its handler reads the clock. On MariaDB that is most of what --uprobes
// reported (millions of uncontended calls, a few hundred ns each). So before the
// targets are probed, a child of lockstat makes kCalls uncontended
// pthread_mutex_lock calls under the same handlers; the median of their times is the
// cost each target call is shortened by at first; each CPU's estimate then follows the
// targets' own uncontended calls (see "Probe cost" in bpf_sources/lockstat.bpf.c).
// The start record's probe_cost_ns is the calibration, a report's the estimate then.
#include <bcc/BPF.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "common/bpf_session.h"
#include "common/pthread_probes.h"
#include "tools/lockstat/internal.h"

namespace lockstat {
using namespace bpfdiag;

namespace {
constexpr int kCalls = 20000;
constexpr int kBuckets = 1024;  // LS_CALIB_BUCKETS, 10 ns each
constexpr uint64_t kBucketNs = 10;

[[noreturn]] void child_main(int go_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  prctl(PR_SET_NAME, "lockstat-calib");
  char b = 0;
  ssize_t n;
  do n = read(go_fd, &b, 1); while (n < 0 && errno == EINTR);
  if (n != 1) _exit(0);  // lockstat gave up (or exited): nothing to do
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  for (int i = 0; i < kCalls; ++i) {
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
  }
  _exit(0);
}
}  // namespace

CalibChild::~CalibChild() {
  if (go_fd >= 0) close(go_fd);  // an idle child exits on EOF
  if (pid > 0) {
    kill(pid, SIGKILL);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

Result<std::unique_ptr<CalibChild>> start_calibration_child() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Error{std::string("cannot calibrate --uprobes: pipe: ") + std::strerror(errno)};
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]), close(fds[1]);
    return Error{std::string("cannot calibrate --uprobes: fork: ") + std::strerror(errno)};
  }
  if (pid == 0) {
    close(fds[1]);
    child_main(fds[0]);
  }
  close(fds[0]);
  auto c = std::make_unique<CalibChild>();
  c->pid = pid, c->go_fd = fds[1];
  return c;
}

uint64_t median_probe_cost(const std::vector<uint64_t>& hist) {
  uint64_t total = 0, seen = 0;
  for (uint64_t h : hist) total += h;
  if (!total) return 0;
  for (size_t b = 0; b < hist.size(); ++b)
    if ((seen += hist[b]) * 2 >= total) return b * kBucketNs + kBucketNs / 2;
  return 0;
}

Result<uint64_t> calibrate_probe_cost(BpfSession& s, CalibChild& child) {
  const std::string why = "cannot calibrate --uprobes (rerun, or see OVERHEAD in lockstat(8)): ";
  auto lib = find_pthread_lib(static_cast<uint32_t>(child.pid));
  if (!lib) return Error{why + lib.error()};
  auto pts = resolve_pthread_probes(*lib, {PthreadFn::MutexLock}, {});
  if (!pts) return Error{why + pts.error()};
  if (!s.get_array_table<uint32_t>("calib_pid").update_value(0, static_cast<uint32_t>(child.pid)).ok())
    return Error{why + "cannot write the BPF map calib_pid"};
  if (auto st = attach_pthread_probes(s, *lib, *pts, {{PthreadFn::MutexLock, "on_lock", "on_lock_ret"}}))
    return Error{why + st->message};
  char go = 'g';
  bool ran = write(child.go_fd, &go, 1) == 1;
  int status = 0;
  while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  child.pid = -1;
  for (const auto& p : *pts)  // the child is gone; its probes would only cost the targets
    for (bool ret : {false, true}) s.detach_uprobe_at(lib->probe_path(), p.sym_vaddr + p.offset, ret, lib->pid);
  if (!ran || !WIFEXITED(status)) return Error{why + "the calibration process did not run"};
  std::vector<uint64_t> hist(kBuckets, 0);
  auto t = s.get_array_table<uint64_t>("calib");
  for (int i = 0; i < kBuckets; ++i) t.get_value(i, hist[i]);
  uint64_t calls = 0;
  for (uint64_t h : hist) calls += h;
  if (calls < kCalls / 2) return Error{why + "only " + std::to_string(calls) + " of " + std::to_string(kCalls) + " calls seen"};
  uint64_t cost = median_probe_cost(hist);
  auto pc = s.get_percpu_array_table<ProbeCostEst>("probe_cost");
  std::vector<ProbeCostEst> seed(ebpf::BPFTable::get_possible_cpu_count(), ProbeCostEst{cost, 0});
  if (!pc.update_value(0, seed).ok()) return Error{why + "cannot write probe_cost"};
  return cost;
}

uint64_t tracked_probe_cost(BpfSession& s, uint64_t calibrated) {
  std::vector<ProbeCostEst> per_cpu;
  if (!s.get_percpu_array_table<ProbeCostEst>("probe_cost").get_value(0, per_cpu).ok())
    return calibrated;
  return weighted_probe_cost(per_cpu, calibrated);
}

uint64_t weighted_probe_cost(const std::vector<ProbeCostEst>& per_cpu, uint64_t calibrated) {
  unsigned __int128 sum = 0;
  uint64_t calls = 0;
  for (const auto& e : per_cpu) sum += static_cast<unsigned __int128>(e.ns) * e.calls, calls += e.calls;
  return calls ? static_cast<uint64_t>(sum / calls) : calibrated;
}

}  // namespace lockstat
