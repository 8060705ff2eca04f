// Startup phase timing: BPFDIAG_TIMING=1 in the environment makes every tool print,
// when it announces that its probes are attached, how long each startup phase took
// (one line per phase on stderr). Off by default; a mark costs a getenv once and a
// clock read.
#pragma once
#include <string>

namespace bpfdiag {

// Records the end of phase `name` at the current time.
void timing_mark(const std::string& name);
// Records the end of phase `name` at `monotonic_ns` (CLOCK_MONOTONIC; 0: not recorded),
// a time taken earlier where no mark could be made (a signal handler).
void timing_mark_at(const std::string& name, uint64_t monotonic_ns);
// True when BPFDIAG_TIMING is set (to skip building names nobody will see).
bool timing_on();

// With BPFDIAG_TIMING set: prints the phases recorded so far to stderr, each with its
// own duration and the time since the process started, then forgets them.
void timing_report();

}  // namespace bpfdiag
