// offcputime: where threads wait. Off-CPU time per thread and (user, kernel) stack,
// from the sched_switch tracepoint, aggregated in the kernel.
//
//   cli.cpp           the option table (ToolSpec), parsing into Config, BPF cflags
//   stack_tables.cpp  stack table sizing (reading them: common/stack_reader)
//   model.cpp         entries: merging, per-thread totals, folded lines, warnings
//   render.cpp        text (BCC layout), folded, NDJSON records
//   run.cpp           the skeleton: load, attach, start record, run loop, reports
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bpf_plan.h"
#include "common/options.h"
#include "common/output.h"
#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"
#include "common/stack_tool.h"
#include "common/stacks.h"
#include "common/declared_waits.h"
#include "common/metrics.h"
#include "common/wait_sites.h"

namespace bpfdiag {
class PprofProfile;
class RunPprof;
class Symbolizer;
}  // namespace bpfdiag
namespace ebpf {
class BPFStackTable;
}  // namespace ebpf
namespace bpfdiag {
class BpfSession;
}

namespace offcputime {

// The shared members (-p -t -U -K -f -P --svg -j --ebpf, schedule; delimiter is -d,
// BCC's "delimited", and the duration is --duration) are in StackToolConfig.
struct Config : bpfdiag::StackToolConfig {
  bool user_threads_only = false;    // -u
  bool kernel_threads_only = false;  // -k
  uint64_t min_ns = 1000;            // -m (default unit us; default 1 us)
  uint64_t max_ns = 0;               // -M (0: no maximum)
  std::optional<uint64_t> state;     // --state
  uint64_t stack_storage_size = 0;   // --stack-storage-size; 0: auto_stack_storage()
  uint64_t map_entries = 32768;      // --map-entries: start/counts/seen map entries
  bool jvm_perfmap = false;  // --jvm-perfmap: ask target JVMs for their perf maps first
  bool unwind_dwarf = false;         // --unwind=dwarf (default with -p/-t): user stacks from .eh_frame
  bool waker = false;                // --waker: who woke each thread (sched_waking), BCC's offwaketime
};

const bpfdiag::ToolSpec& tool_spec();

bpfdiag::Result<Config> parse_args(int argc, char** argv);
// Checks against the running system (PIDs exist, TIDs belong to them).
bpfdiag::Status validate_targets(const Config& c);

std::string bpf_text();

// Stack table sizing. Distinct stacks grow with the threads traced; a stack that
// collides in the primary table (a stack map: one stack per hash bucket) goes to the
// overflow map (keyed by the frames: no collisions; preallocated, ~580 bytes each).
constexpr uint64_t kDefaultStackStorage = 16384;   // smallest automatic size
constexpr uint64_t kMaxAutoStackStorage = 131072;  // ~135 MB of kernel memory (1 KB each)
constexpr uint64_t kStacksPerThread = 128;
// Power of two >= threads * kStacksPerThread, within the bounds above.
uint64_t auto_stack_storage(uint64_t threads);
uint64_t overflow_storage_size(uint64_t stack_storage_size);
// Threads the filters select now: -t TIDs, threads of the -p PIDs, or every task.
uint64_t count_traced_threads(const Config& c);
bpfdiag::Result<bpfdiag::BpfPlan> bpf_plan(const Config& c);

// The data_quality keys of every record (the common ones plus these, always present).
const std::vector<std::string>& dq_keys();

// --waker: who ended an off-CPU period (bpf_sources/offcputime_shared.h offcpu_waker).
enum class WakerKind {
  Unseen,     // blocked, but no wakeup was recorded for it ("[unknown]"; data_quality waker_unseen)
  Task,       // a thread, from its own context: pid, tid, comm, stack
  Interrupt,  // an interrupt or softirq (a timer, a device): kernel stack only
  Preempted,  // switched out runnable: nobody woke it
};
const char* waker_kind_name(WakerKind k);  // "unknown", "task", "interrupt", "preempted"
struct Waker {
  WakerKind kind = WakerKind::Unseen;
  uint32_t pid = 0, tid = 0;  // Task only
  std::string comm;           // Task only
  bpfdiag::Stack stack;       // frames innermost first (an interrupt's: up to its entry)
  // The waker's name as the views show it: its comm, or [interrupt], [preempted], [unknown].
  std::string name() const;
  bool operator<(const Waker& o) const;
};

// One aggregated entry, already symbolized.
struct Entry {
  uint32_t pid = 0;  // tgid
  uint32_t tid = 0;
  std::string comm;
  uint64_t total_ns = 0;
  uint64_t count = 0;
  uint64_t max_ns = 0;
  bpfdiag::Stack stack;
  // What the wait is, by the wait-site rules (common/wait_sites) over its kernel then
  // user frames, innermost first: set by classify_waits().
  bpfdiag::WaitVerdict wait;
  // The wait the software declared in flight at the switch-out (common/declared_waits
  // id; 0: none) and, once classified, its rule's origin.
  uint64_t declared = 0;
  std::string declared_origin;
  // Switched out runnable (preempted or yielded): waiting for a CPU, not blocked. Its
  // class is "cpu" whatever its stack says.
  bool runnable = false;
  Waker waker;  // --waker
};

struct Report {
  std::vector<Entry> entries;
  bpfdiag::DataQuality dq;
  bpfdiag::Window window;  // time_ns (realtime at the end), interval_ns, final
};

// Each entry's wait verdict (Entry::wait) from the suite's wait-site rules.
// A declared wait (Entry::declared, named by `declared`) is the software's own word on
// what the wait is and decides before the stack's rules.
void classify_waits(std::vector<Entry>& entries,
                    const std::function<const bpfdiag::DeclaredName*(uint64_t)>& declared = {});
// Off-CPU time by wait class ("lock", "io", "idle", ..., "unclassified").
std::map<std::string, uint64_t> wait_class_totals(const std::vector<Entry>& entries);
// Entries that render the same (same thread, comm and frames) become one.
void merge_identical(std::vector<Entry>& entries);
// Per-thread totals, by (pid, tid).
struct ThreadTotal {
  uint32_t pid = 0, tid = 0;
  std::string comm;
  uint64_t total_ns = 0, count = 0;
};
std::vector<ThreadTotal> thread_totals(const std::vector<Entry>& entries);

// Text (BCC multi-line), folded, or NDJSON records (stack records, then the summary).
// Folded output writes the data-quality line to `err` so stdout stays flamegraph input.
void render(std::ostream& os, std::ostream& err, const Config& c, const Report& r);
// Adds the entries' folded stacks to `set` (names per -P), values in ns.
void add_folded(bpfdiag::FoldedSet& set, const Config& c, const std::vector<Entry>& entries);
// --pprof (pprof.cpp): the output over the run, and one report's entries as samples
// (off_cpu/nanoseconds, off_cpu_periods/count); `waker`: the waker in labels (pprof.cpp).
bpfdiag::RunPprof pprof_output(const Config& c);
void add_pprof(bpfdiag::PprofProfile& p, const std::vector<Entry>& entries, const bpfdiag::Symbolizer& sym,
               bool waker = false);
// --waker's folded frames after the wakee's, BCC offwaketime's convention: "--", the
// waker's kernel frames then user frames, innermost first ("-" between them), then its
// name (e.g. "--;try_to_wake_up;...;waker_signal_fn;main;B").
std::string waker_folded_suffix(const Waker& w);
// True when a wakeup's kernel frames show an interrupt or softirq (BPF records every
// waker as the current task; this tells the ones that merely interrupted it).
bool interrupt_frames(const std::vector<std::string>& kernel);
// A Task waker whose kernel frames show an interrupt becomes Interrupt: no pid, tid,
// comm or user stack, its kernel frames cut at the interrupt's entry.
void classify_waker(Waker& w);
// An interrupt's kernel frames up to its entry (asm_sysvec_*, asm_common_interrupt...):
// what it interrupted is not part of the wakeup.
void trim_interrupted(std::vector<std::string>& kernel);
// Off-CPU time by waker kind (the summary's waker_kind_total_ns).
std::map<std::string, uint64_t> waker_kind_totals(const std::vector<Entry>& entries);
// Folded lines, merged (same name and frames summed), values in microseconds.
std::vector<std::string> folded_lines(const Config& c, const std::vector<Entry>& entries);
// The end-of-run warnings (lost stacks, full maps), each naming the option that fixes it.
std::vector<std::string> warnings(const Config& c, const bpfdiag::DataQuality& dq);
// The "offcputime.start" fields: filters and the effective options.
nlohmann::json start_fields(const Config& c, uint64_t probes);
// "Tracing off-CPU time (us) of ... by ... stack..." (stderr, once attached).
// What is traced ("off-CPU time (us) of ... by ... stack"), for the banner and --svg.
std::string traced_text(const Config& c);
std::string banner(const Config& c);

// --prometheus/--listen (metrics.cpp): one report's entries into the counters.
void add_report_metrics(bpfdiag::MetricSet& m, const std::vector<Entry>& entries);

bpfdiag::Status run(const Config& c);

}  // namespace offcputime
