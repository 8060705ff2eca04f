// naptime: trace sleeps (nanosleep and clock_nanosleep) with the requested length, the
// time actually slept, the parent process, and whether the sleep was interrupted.
//
//   cli.cpp     the option table (ToolSpec), parsing into Config, BPF cflags
//   model.cpp   decoding events, clock and errno names, per-process totals
//   render.cpp  text lines and tables, NDJSON records
//   run.cpp     the skeleton: load, attach, start record, run loop, reports
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <linux/types.h>

#include <nlohmann/json.hpp>

#include "common/bpf_plan.h"
#include "common/cgroup.h"
#include "common/histogram.h"
#include "common/metrics.h"
#include "common/options.h"
#include "common/output.h"
#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"

extern "C" {
#include "naptime_shared.h"
}

namespace naptime {

struct Config {
  bool help = false;
  bool summary = false;  // --summary: per-process tables instead of a line per sleep
  bool json = false;
  std::string prometheus;           // --prometheus FILE: metrics at every report (common/metrics.h)
  std::string listen;               // --listen ADDR:PORT: the same over HTTP
  bool ebpf = false;
  std::vector<uint32_t> pids;  // -p
  std::vector<uint32_t> tids;  // -t
  std::optional<bpfdiag::CgroupTarget> cgroup;  // --cgroup / --container
  std::string comm;            // --comm (at most 15 characters, as the kernel keeps)
  uint64_t min_ns = 0;         // -m: minimum requested length
  bpfdiag::Schedule schedule;  // -d, -i, -c
};

const bpfdiag::ToolSpec& tool_spec();

bpfdiag::Result<Config> parse_args(int argc, char** argv);

// BPF program text and the cflags (BTF offsets, filters) it is compiled with.
std::string bpf_text();
bpfdiag::Result<bpfdiag::BpfPlan> bpf_plan(const Config& c);
// The filter defines alone (no BTF needed), for tests.
bpfdiag::BpfPlan filter_plan(const Config& c);

// Offsets of the clocks that absolute requests may use, from CLOCK_MONOTONIC.
struct ClockOffsets {
  int64_t realtime_ns = 0;
  int64_t tai_ns = 0;
};
ClockOffsets measure_clock_offsets();

// "CLOCK_MONOTONIC", ... ("CLOCK_<id>" for unknown ids).
std::string clock_name(int32_t clock);
// "EINTR", "EINVAL", ... for a syscall return value (0 -> ""). The kernel's internal
// restart codes keep their kernel names ("ERESTART_RESTARTBLOCK"): user space never
// sees them; they only appear for a thread that died inside an interrupted sleep.
std::string errno_name(int64_t ret);

// One traced sleep, decoded from a naptime_event.
struct Sleep {
  uint64_t time_ns = 0;  // CLOCK_REALTIME at exit of the call
  uint32_t pid = 0, tid = 0, ppid = 0;
  std::string comm, pcomm;
  std::string syscall;  // "nanosleep" or "clock_nanosleep"
  int32_t clock = 1;
  bool abstime = false;
  std::optional<uint64_t> requested_ns;  // relative length; none if not knowable
  uint64_t slept_ns = 0;
  int64_t ret = 0;         // what user space saw (-EINTR after a signal handler)
  int64_t kernel_ret = 0;  // the kernel's raw code at the first exit (e.g. -516)
  bool interrupted = false;  // any error, including a signal handler (EINTR)
  bool restarted = false;    // resumed by the kernel after a signal without handler
                             // (SIGSTOP/SIGCONT, ptrace): invisible to the application
};
Sleep decode(const naptime_event& ev, const ClockOffsets& off);

// The data_quality keys of every record (the common ones plus these, always present).
const std::vector<std::string>& dq_keys();

// Per-process totals for the summary.
struct ProcStats {
  std::string comm;
  uint64_t count = 0, interrupted = 0, restarted = 0;
  uint64_t requested_ns = 0, slept_ns = 0;
  bpfdiag::Histogram slept;  // ns
};

// The totals of one report (an interval, or the whole run).
class Summary {
 public:
  void add(const Sleep& s);
  const std::map<uint32_t, ProcStats>& procs() const { return procs_; }
  const bpfdiag::Histogram& all() const { return all_; }        // ns
  const bpfdiag::Histogram& all_us() const { return all_us_; }  // the same in us
  uint64_t count() const { return all_.count(); }
  uint64_t interrupted() const { return interrupted_; }
  uint64_t restarted() const { return restarted_; }
  uint64_t requested_ns() const { return requested_ns_; }
  uint64_t slept_ns() const { return slept_ns_; }

 private:
  std::map<uint32_t, ProcStats> procs_;
  bpfdiag::Histogram all_, all_us_;
  uint64_t interrupted_ = 0, restarted_ = 0, requested_ns_ = 0, slept_ns_ = 0;
};

// Column header of the per-sleep text output.
void render_header(std::ostream& os);
// One sleep: a text line or a "naptime.sleep" NDJSON record carrying `dq`, the data
// quality counted so far (not flushed: the run loop flushes once per batch of events).
void render_sleep(std::ostream& os, const Config& c, const Sleep& s, const bpfdiag::DataQuality& dq);
// A report (interval or final): text tables (--summary) and the data quality line; in
// JSON a "naptime.process" record per process, then "naptime.summary".
void render_report(std::ostream& os, const Config& c, const Summary& sum, const bpfdiag::DataQuality& dq,
                   const bpfdiag::Window& w);
// The "naptime.start" fields: filters and the effective options.
nlohmann::json start_fields(const Config& c, uint64_t probes);

// --prometheus/--listen (metrics.cpp): one sleep into the counters and the histogram.
void add_sleep_metrics(bpfdiag::MetricSet& m, const Sleep& s);

bpfdiag::Status run(const Config& c);

}  // namespace naptime
