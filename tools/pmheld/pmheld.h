// pmheld: pthread mutex hold times per lock and acquiring stack, from uprobes on
// glibc's pthread_mutex_* and pthread_cond_*wait functions.
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/bpf_plan.h"
#include "common/cgroup.h"
#include "common/histogram.h"
#include "common/metrics.h"
#include "common/options.h"
#include "common/output.h"
#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"
#include "common/stacks.h"
#include "common/table.h"

namespace bpfdiag {
class PprofProfile;
class RunPprof;
class Symbolizer;
}  // namespace bpfdiag
namespace pmheld {

using bpfdiag::hex_addr;  // "0x55d0c0a4a040"

struct Config {
  bool help = false;
  std::vector<uint32_t> pids;  // -p; empty: every process using this machine's libc
  std::optional<bpfdiag::CgroupTarget> cgroup;  // --cgroup / --container: without -p, the libc
                                                // files its processes map are probed
  bool json = false;
  bool csv = false;
  bool ebpf = false;
  bool timestamp = false;      // -T
  bool verbose = false;        // -v: print probe placement
  bool at_symbol = false;      // --probe-at-symbol: no prologue optimisation
  bool contended = false;      // --contended: futex hand-offs, no uprobes
  bool no_hist = false;        // --no-hist
  bool unwind_dwarf = false;   // --unwind=dwarf (default with -p and stacks): .eh_frame
  uint64_t stacks = 3;         // -s: stacks shown per lock; 0: not collected
  uint64_t entries = 10;       // -n: locks shown
  uint64_t stack_storage_size = 16384;  // --stack-storage-size: stack table entries
  std::string sort = "hold_total_ns";   // -S/--sort
  std::string fields;          // --fields (summary table columns)
  bpfdiag::Schedule schedule;  // -i/-c/-d
  std::string svg;             // --svg FILE: flame graph of the run's hold times
  std::string pprof;           // --pprof FILE: the same as a pprof profile
  std::string prometheus;           // --prometheus FILE: metrics at every report (common/metrics.h)
  std::string listen;               // --listen ADDR:PORT: the same over HTTP
};

// The option table (generated --help, USAGE, man page SYNOPSIS).
const bpfdiag::ToolSpec& spec();
const char* help_text();

bpfdiag::Result<Config> parse_args(int argc, char** argv);

std::string bpf_text();
bpfdiag::BpfPlan bpf_plan(const Config& c);

// One acquiring stack of a lock (frames innermost first).
struct StackHold {
  std::vector<std::string> frames;
  bool missing = false;  // stack id lost: shown as [Missed User Stack]
  uint64_t count = 0, total_ns = 0, max_ns = 0;
};

// Everything reported about one mutex in one process.
struct LockHold {
  uint32_t pid = 0;
  std::string comm;
  uint64_t addr = 0;
  std::string symbol;  // data symbol naming the mutex, "" if none (heap, stack)
  uint64_t count = 0, total_ns = 0, max_ns = 0;
  bpfdiag::Histogram hist;
  std::vector<StackHold> stacks;  // by total hold, largest first
  // --contended: threads blocked at the contended unlocks, holds timed exactly
  uint64_t waiters_max = 0, waiters_sum = 0, exact = 0;
};

// --contended: what the mode sees and what it cannot (banner, start record, reports).
extern const char kContendedSees[];

// The data-quality keys of every pmheld record (zeros when nothing happened).
bpfdiag::DataQuality empty_dq(bool contended = false);

// The warning printed when stacks were lost, naming the option that helps ("" if none).
std::string lost_stacks_warning(const Config& c, const bpfdiag::DataQuality& dq);

// --svg: each lock's acquiring stacks as folded stacks, "comm;outer;...;inner;
// lock NAME" valued in microseconds held (the stacks the report keeps, -s).
void add_folded_holds(const std::vector<LockHold>& locks, bpfdiag::FoldedSet& out);
// --pprof (pprof.cpp): the output over the run, and one report's holds as samples
// (holds/count, hold/nanoseconds) by acquiring stack.
bpfdiag::RunPprof pprof_output(const Config& c);
void add_pprof(bpfdiag::PprofProfile& p, const std::vector<LockHold>& locks, const bpfdiag::Symbolizer& sym);

// "cache_lock" or "0x55d0c0a4a040" for anonymous mutexes.
std::string lock_name(const LockHold& l);

// The lock table (text, CSV, JSON, --sort, --fields), configured from `c`.
bpfdiag::Table<LockHold> lock_table(bool contended = false);
bpfdiag::Status configure(bpfdiag::Table<LockHold>& t, const Config& c);

// Renders one report (text, CSV or NDJSON records covering `w`); `locks` in any
// order (sorted here). With --csv the data-quality line goes to `err`.
void render(std::ostream& os, std::ostream& err, const Config& c, std::vector<LockHold> locks,
            const bpfdiag::DataQuality& dq, const bpfdiag::Window& w);

// --prometheus/--listen (metrics.cpp): one report's holds into the counters.
void add_report_metrics(bpfdiag::MetricSet& m, const std::vector<LockHold>& locks);

bpfdiag::Status run(const Config& c);

}  // namespace pmheld
