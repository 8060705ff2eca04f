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
// program is built (its PID is the program's CALIB_PID); calibrate_probe_cost() runs
// it under the probes, writes the median time of its uncontended calls to the
// program's probe_cost and returns it. The destructor reaps a child never run.
struct CalibChild {
  pid_t pid = -1;
  int go_fd = -1;
  ~CalibChild();
};
bpfdiag::Result<std::unique_ptr<CalibChild>> start_calibration_child();
bpfdiag::Result<uint64_t> calibrate_probe_cost(bpfdiag::BpfSession& s, CalibChild& child);
// Median of a histogram of 10 ns buckets (bucket midpoint; 0 when empty).
uint64_t median_probe_cost(const std::vector<uint64_t>& hist);

constexpr uint64_t kUs = 1000ULL, kMs = 1000000ULL, kSec = 1000000000ULL;

}  // namespace lockstat
