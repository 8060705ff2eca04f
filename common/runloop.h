// Process lifecycle shared by every tool: SIGINT, SIGTERM and the end of a duration
// all lead to the final report; interval ticks in between.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

namespace bpfdiag {

// Blocks SIGINT/SIGTERM/SIGHUP so they are only consumed by the run loop. Call at the
// start of main(), before any thread exists.
void block_stop_signals();

struct Schedule {
  std::optional<uint64_t> interval_ns;  // periodic reports; none: only the final one
  std::optional<uint64_t> count;        // stop after this many interval reports
  std::optional<uint64_t> duration_ns;  // stop after this long
};

struct RunHooks {
  // Waits for and handles events for at most timeout_ms (e.g. perf buffer poll).
  // When absent the loop just sleeps (still wakes at once on a signal).
  std::function<void(int timeout_ms)> poll;
  // Interval report (final == false) or the final report (final == true).
  std::function<void(bool final)> report;
  // Checked after every poll; returning true ends the run (e.g. target exited).
  std::function<bool()> should_stop;
};

// Runs until a stop signal, the duration, or `count` intervals. Returns the signal
// number that stopped it, or 0.
int run_loop(const Schedule& s, const RunHooks& hooks);

uint64_t monotonic_ns();
uint64_t realtime_ns();

}  // namespace bpfdiag
