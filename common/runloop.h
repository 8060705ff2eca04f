// Process lifecycle shared by every tool: SIGINT, SIGTERM and the end of a duration
// all lead to the final report; interval ticks in between.
#pragma once
#include <signal.h>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bpfdiag {

// Stop signals (SIGINT, SIGTERM, SIGHUP) work at every point of a run:
//  - until the run loop starts (parsing, compiling, attaching) nothing exists to report
//    and nothing attached outlives the process (every probe and program is held by a
//    file descriptor), so a stop signal removes the registered temp files and ends the
//    process at once with exit 128+signal (130 for Ctrl-C);
//  - once the run loop has started, it asks the loop to stop and print the final
//    report; blocking system calls return EINTR instead of holding the report up. A
//    second stop signal while the report is being made ends the process at once.
// SIGUSR1 asks for a report boundary: the run loop prints an interval report (final
// false) at once, so the next report covers only what came after the signal (runbook
// sends it to every tool when its window starts). Before the loop starts it is kept
// for the loop; it does not count towards -c.
// Call at the start of main(), before any thread exists (tool_main does).
void install_stop_handlers();
// From now on a stop signal asks for the final report instead of ending the process.
// run_loop() calls it, and so does the tool skeleton once the tool's attach phase is
// over (attach_phase_done, common/tool.h): the tool then has something to report, even
// if the signal lands before the loop.
void enter_reporting();
// The stop signal received since the run loop started, or 0.
int stop_signal();
// A stop signal asks for the final report within about a second: work the report can
// do without (loading symbol tables of processes and files not seen before) stops
// once the process has spent kStopBudgetNs of CPU time after the signal (CPU time, not
// wall time: on a merely loaded machine the wall clock runs while we wait for a CPU,
// and a wall budget dropped the names of an ordinary report), and what it would have
// named is shown unnamed and counted (symbolize_skipped). True once that budget is
// spent; never for a run that ends by its duration or count.
constexpr uint64_t kStopBudgetNs = 500000000ULL;
bool past_stop_deadline();
// Paths a stop signal before the run loop removes (a directory with everything in it,
// however far it has been written); replaces any earlier list. An empty list clears it.
void register_temp_paths(const std::vector<std::string>& paths);
// Holds the stop signals back while alive (they are delivered when it ends), e.g. from
// creating a temp dir until it is registered, so no signal lands in between.
class StopSignalsBlocked {
 public:
  StopSignalsBlocked();
  ~StopSignalsBlocked();
  StopSignalsBlocked(const StopSignalsBlocked&) = delete;
  StopSignalsBlocked& operator=(const StopSignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

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

// SIGUSR1 report boundaries run_loop has reported so far (runbook sends one when its
// window starts: what came before is the tools' startup, not the window).
uint64_t report_boundaries();
// monotonic_ns() when the last of them was reported (0: none yet).
uint64_t last_boundary_ns();
// Whether a report (a stop signal, or a SIGUSR1 boundary) is waiting for run_loop:
// long work between reports checks it and stops early.
bool report_pending();

// " for 5 s." with a duration, "... Hit Ctrl-C to end." otherwise: the end of every
// tool's "Tracing ..." banner.
std::string banner_until(const Schedule& s);

uint64_t monotonic_ns();
uint64_t realtime_ns();

}  // namespace bpfdiag
