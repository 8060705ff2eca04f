// profile: on-CPU stack sampling (BCC profile's interface). A software CPU-clock perf
// event on every CPU samples the running thread's user and kernel stacks at -F Hz;
// samples are counted per (thread, user stack, kernel stack) in the kernel.
//
//   cli.cpp     the option table (ToolSpec), parsing into Config, BPF cflags
//   model.cpp   entries: merging, per-thread totals, folded lines, warnings, banner
//   render.cpp  text (BCC layout), folded, NDJSON records
//   run.cpp     the skeleton: load, attach, start record, run loop, reports
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bpf_plan.h"
#include "common/metrics.h"
#include "common/options.h"
#include "common/output.h"
#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"
#include "common/stack_tool.h"
#include "common/stacks.h"

namespace bpfdiag {
class PprofProfile;
class RunPprof;
class Symbolizer;
}  // namespace bpfdiag
namespace profile {

// The shared members (-p -t -U -K -f -P --svg -j --ebpf, schedule; delimiter is
// --delimited) are in StackToolConfig.
struct Config : bpfdiag::StackToolConfig {
  bool include_idle = false;            // -I: the idle task (pid 0) too
  uint64_t freq_hz = 49;                // -F
  uint64_t stack_storage_size = 16384;  // --stack-storage-size
  uint64_t map_entries = 65536;         // --map-entries: (thread, stack) pairs counted
  bool jvm_perfmap = false;  // --jvm-perfmap: ask target JVMs for their perf maps first
  bool unwind_dwarf = false;            // --unwind=dwarf (default with -p/-t): user stacks from .eh_frame
  // system-wide user stacks: processes announced as first sampled (announce.h); with
  // -p/-t the targets are read at the start
  bool announce() const { return pids.empty() && tids.empty() && !kernel_stacks_only; }
};

const bpfdiag::ToolSpec& tool_spec();
bpfdiag::Result<Config> parse_args(int argc, char** argv);
std::string bpf_text();
bpfdiag::BpfPlan bpf_plan(const Config& c);

// The data_quality keys of every record (the common ones plus these, always present).
const std::vector<std::string>& dq_keys();

// One aggregated entry, already symbolized.
struct Entry {
  uint32_t pid = 0;  // tgid
  uint32_t tid = 0;
  std::string comm;
  uint64_t samples = 0;
  bpfdiag::Stack stack;
};

struct Report {
  std::vector<Entry> entries;
  bpfdiag::DataQuality dq;
  bpfdiag::Window window;
  uint64_t freq_hz = 0;
};

void merge_identical(std::vector<Entry>& entries);
struct ThreadTotal {
  uint32_t pid = 0, tid = 0;
  std::string comm;
  uint64_t samples = 0;
};
std::vector<ThreadTotal> thread_totals(const std::vector<Entry>& entries);

// Text (BCC multi-line), folded, or NDJSON records (stack records, then the summary).
// Folded output writes the data-quality line to `err` so stdout stays flamegraph input.
void render(std::ostream& os, std::ostream& err, const Config& c, const Report& r);
// Adds the entries' folded stacks to `set` (names per -P), values in samples.
void add_folded(bpfdiag::FoldedSet& set, const Config& c, const std::vector<Entry>& entries);
// --pprof (pprof.cpp): the output over the run (period 1e9/Hz ns), and one report's
// entries as samples (samples/count, cpu/nanoseconds).
bpfdiag::RunPprof pprof_output(const Config& c);
void add_pprof(bpfdiag::PprofProfile& p, const Config& c, const std::vector<Entry>& entries,
               const bpfdiag::Symbolizer& sym);
// Folded lines (offcputime's folding), values in samples.
bpfdiag::FoldedSet folded(const Config& c, const std::vector<Entry>& entries);
// The end-of-run warnings (lost stacks, full maps), each naming the option that fixes it.
std::vector<std::string> warnings(const Config& c, const bpfdiag::DataQuality& dq);
nlohmann::json start_fields(const Config& c, uint64_t cpus);
// What is sampled ("99 Hertz of ... by ... stack"), for the banner and --svg.
std::string traced_text(const Config& c);
std::string banner(const Config& c);

// --prometheus/--listen (metrics.cpp): one report's samples into the counters.
void add_report_metrics(bpfdiag::MetricSet& m, const Report& rep);

bpfdiag::Status run(const Config& c);

}  // namespace profile
