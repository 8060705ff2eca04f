// runqlen: CPU run queue length, sampled by perf events.
// Files: cli.cpp (option table, BPF flags), model.cpp (time weighting, statistics),
// render.cpp (text and NDJSON), run.cpp (attach, read the maps, run loop).
#pragma once
#include <optional>
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "common/cgroup.h"
#include "common/bpf_plan.h"
#include "common/bpf_counters.h"
#include "common/metrics.h"
#include "common/options.h"
#include "common/output.h"
#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"

namespace runqlen {

struct Config {
  bool help = false;
  bool per_cpu = false;    // -C
  bool occupancy = false;  // -O
  bool timestamp = false;  // -T
  bool cfs_only = false;   // --cfs: BCC's view (the task's own cfs_rq)
  bool json = false;
  std::string prometheus;           // --prometheus FILE: metrics at every report (common/metrics.h)
  std::string listen;               // --listen ADDR:PORT: the same over HTTP
  bool ebpf = false;
  uint64_t freq_hz = 99;  // -F (BCC profile's letter; -f kept as a hidden alias)
  std::optional<bpfdiag::CgroupTarget> cgroup;  // --cgroup/--container: that cgroup's waiting tasks
  bpfdiag::Schedule schedule;
};

const bpfdiag::ToolSpec& tool_spec();
const char* help_text();  // generated from tool_spec()
bpfdiag::Result<Config> parse_args(int argc, char** argv);

// BPF program text and the cflags (BTF offsets) it is compiled with.
std::string bpf_text();
bpfdiag::Result<bpfdiag::BpfPlan> bpf_plan(const Config& c);

// The BPF data-quality counters and their data_quality keys; a report's fixed key set.
const std::vector<bpfdiag::CounterSlot>& counter_table();
bpfdiag::DataQuality empty_quality();

// One interval's samples: queue length -> count, per CPU.
using Hist = std::map<int64_t, uint64_t>;
using PerCpu = std::map<uint32_t, Hist>;

// Time weighting: each CPU's busy-time samples (`busy`) are scaled to the samples
// its busy time would take at `freq_hz`, and its idle time (`idle_ns`, capped at the
// interval) adds idle_ns * freq_hz samples of length 0. Every CPU seen in either map
// is in the result.
PerCpu weigh(const PerCpu& busy, const std::map<uint32_t, uint64_t>& idle_ns, uint64_t interval_ns,
             uint64_t freq_hz);

// Statistics of one section (a CPU or all CPUs together).
struct Stats {
  uint64_t samples = 0;
  double avg = 0, p50 = 0, p99 = 0;
  int64_t max = 0;
  double occupancy_pct = 0;  // % of samples with a queue (length > 0)
};
Stats stats_of(const Hist& h);
Hist merge_cpus(const PerCpu& samples);

// Renders one report (text, or NDJSON: runqlen.cpu per CPU with -C, runqlen.all,
// then runqlen.summary) to `os`. `w` is the report's window (time, length, final).
void render(std::ostream& os, const Config& c, const PerCpu& samples, const bpfdiag::DataQuality& dq,
            const bpfdiag::Window& w);

// The "options" object of the runqlen.start record.
nlohmann::json effective_options(const Config& c);

// --prometheus/--listen (metrics.cpp): one report's samples into the histogram.
void add_report_metrics(bpfdiag::MetricSet& m, const PerCpu& samples);

bpfdiag::Status run(const Config& c);

}  // namespace runqlen
