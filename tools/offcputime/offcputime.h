// offcputime: where threads wait. Off-CPU time per thread and (user, kernel) stack,
// from the sched_switch tracepoint, aggregated in the kernel.
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"
#include "common/stacks.h"

namespace offcputime {

struct Config {
  bool help = false;
  std::vector<uint32_t> pids;   // -p: processes (tgids)
  std::vector<uint32_t> tids;   // -t: threads
  bool user_threads_only = false;    // -u
  bool kernel_threads_only = false;  // -k
  bool user_stacks_only = false;     // -U
  bool kernel_stacks_only = false;   // -K
  bool delimiter = false;            // -d
  bool folded = false;               // -f
  bool per_thread = false;           // --per-thread: "comm-PID/TID" in folded output
  uint64_t min_us = 1;               // -m
  uint64_t max_us = 0;               // -M (0: no maximum)
  std::optional<uint64_t> state;     // --state
  uint64_t stack_storage_size = 16384;
  uint64_t map_size = 32768;         // --map-size: start and counts map entries
  bool json = false;
  bool ebpf = false;
  bpfdiag::Schedule schedule;        // [duration]
};

extern const char kHelp[];

bpfdiag::Result<Config> parse_args(int argc, char** argv);
// Checks against the running system (PIDs exist, TIDs belong to them).
bpfdiag::Status validate_targets(const Config& c);

std::string bpf_text();
bpfdiag::Result<std::vector<std::string>> bpf_cflags(const Config& c);

// One aggregated entry, already symbolized.
struct Entry {
  uint32_t pid = 0;  // tgid
  uint32_t tid = 0;
  std::string comm;
  uint64_t total_ns = 0;
  uint64_t count = 0;
  uint64_t max_ns = 0;
  bpfdiag::Stack stack;
};

struct Report {
  std::vector<Entry> entries;
  bpfdiag::DataQuality dq;
  uint64_t duration_ns = 0;
};

// Text (BCC multi-line), folded, or one NDJSON record. Folded output writes the
// data-quality line to `err` so stdout stays flamegraph input.
void render(std::ostream& os, std::ostream& err, const Config& c, const Report& r);
// Folded lines, merged (same comm and frames summed), values in microseconds.
std::vector<std::string> folded_lines(const Config& c, const std::vector<Entry>& entries);
// The end-of-run warnings (lost stacks, full maps), each naming the option that fixes it.
std::vector<std::string> warnings(const Config& c, const bpfdiag::DataQuality& dq);

bpfdiag::Status run(const Config& c);

}  // namespace offcputime
