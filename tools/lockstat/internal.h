// lockstat internals shared by its source files (not part of the tool's API).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/table.h"
#include "tools/lockstat/lockstat.h"

namespace bpfdiag {
class BpfSession;
}

namespace lockstat {

bpfdiag::Table<LockRow> lock_table(bool uprobes);
bpfdiag::Table<ThreadRow> thread_table(bool uprobes);

// Table configured from -S/--fields/-n.
template <typename Row>
bpfdiag::Status configure(bpfdiag::Table<Row>& t, const Config& c) {
  if (!c.fields.empty())
    if (auto st = t.set_fields(c.fields)) return st;
  if (auto st = t.set_sort(c.sort)) return st;
  t.set_entries(c.entries);
  return std::nullopt;
}

// --uprobes probe-cost calibration (calibrate.cpp). The child is forked before the BPF
// program is built; calibrate_probe_cost() puts its PID in the map calib_pid and runs
// it under the probes, seeds every CPU's probe_cost with the median time of its
// uncontended calls and returns it; the BPF program then moves each CPU's estimate
// with the targets' own uncontended calls. The destructor reaps a child never run.
struct CalibChild {
  pid_t pid = -1;
  int go_fd = -1;
  ~CalibChild();
};
bpfdiag::Result<std::unique_ptr<CalibChild>> start_calibration_child();
bpfdiag::Result<uint64_t> calibrate_probe_cost(bpfdiag::BpfSession& s, CalibChild& child);
// Median of a histogram of 10 ns buckets (bucket midpoint; 0 when empty).
uint64_t median_probe_cost(const std::vector<uint64_t>& hist);
// One CPU's probe-cost estimate (struct probe_cost_est in lockstat.bpf.c).
struct ProbeCostEst {
  uint64_t ns, calls;
};
// The estimate now: the CPUs' estimates weighted by the calls that moved them
// (`calibrated` when none has moved).
uint64_t tracked_probe_cost(bpfdiag::BpfSession& s, uint64_t calibrated);
uint64_t weighted_probe_cost(const std::vector<ProbeCostEst>& per_cpu, uint64_t calibrated);

constexpr uint64_t kUs = 1000ULL, kMs = 1000000ULL, kSec = 1000000000ULL;

}  // namespace lockstat
