// One exec and exit policy for every tool that traces processes named with -p.
//
// A target is the process a PID named when the tool started, identified by PID *and*
// start time (/proc/PID/stat field 22), so a PID the kernel hands to a new process is
// never mistaken for the target. A target is gone when /proc/PID is missing, its start
// time changed, or it is a zombie with no live thread left. An exec keeps the PID and
// start time but changes the executable (dev+inode of /proc/PID/exe) and usually the
// comm: the tool is told so it can refresh symbols and names.
//
// Policy (shared by every -p tool): when every target is gone the run ends with the
// final report, followed by one line on stderr "TOOL: PID N exited"; while some remain,
// a target's exit is said on stderr and tracing goes on.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/runloop.h"

namespace bpfdiag {

// Start time of a process in clock ticks after boot (/proc/PID/stat field 22).
std::optional<uint64_t> proc_start_time(uint32_t pid);

class TargetWatch {
 public:
  using ExecFn = std::function<void(uint32_t pid)>;
  // Records each PID's identity now. An empty list watches nothing and never stops
  // the run (system-wide tracing). A PID whose process started after this tool did is
  // already someone else's: it counts as gone from the start (`named_at`: start time,
  // in the same clock ticks, of the moment the PIDs were named; default: this
  // process's own start).
  explicit TargetWatch(const std::vector<uint32_t>& pids, ExecFn on_exec = nullptr,
                       std::optional<uint64_t> named_at = std::nullopt);

  // Re-reads every remaining target: calls on_exec for one that exec'd since the last
  // check and marks the ones that are gone. Returns true when every target is gone
  // (never for an empty list). `min_interval_ns` rate-limits the /proc reads.
  bool check(uint64_t min_interval_ns = 0);
  bool all_gone() const { return !targets_.empty() && live_ == 0; }
  bool empty() const { return targets_.empty(); }
  std::vector<uint32_t> exited() const;  // in the order given
  std::vector<uint32_t> live() const;
  // "PID 123 exited", "PIDs 1, 2 exited"; "" when none exited.
  std::string note() const;

  // Wires the policy into a run loop: should_stop (an existing one is kept and
  // consulted too) ends the run once every target is gone, checking /proc at most every
  // 100 ms; after the final report, "TOOL: PID N exited" is printed on stderr (TOOL is
  // the program's name). A target leaving while others remain is said on stderr at once.
  // The TargetWatch must outlive run_loop.
  void attach(RunHooks& hooks);

 private:
  struct Target {
    uint32_t pid = 0;
    uint64_t start = 0;
    uint64_t exe_dev = 0, exe_ino = 0;
    std::string comm;
    bool gone = false;
  };
  std::vector<Target> targets_;
  size_t live_ = 0;
  ExecFn on_exec_;
  uint64_t last_check_ = 0;
};

}  // namespace bpfdiag
