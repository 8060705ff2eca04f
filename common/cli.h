// Command-line skeleton shared by every tool: cxxopts with errors as values, the
// shared positional forms ([interval [count]], [duration]), and tool_main(), which
// maps results to exit codes (0 ok, 1 runtime failure, 2 usage, 128+N on signal N
// before anything could be reported).
#pragma once
// cxxopts' std::regex matching recurses once per character and overflows the stack on
// a long argument; its hand-written matcher is used instead (every translation unit
// gets cxxopts through this header, so the choice is the same everywhere).
#define CXXOPTS_NO_REGEX 1
#include <cstdio>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

#include <cxxopts.hpp>

#include "common/timing.h"
#include "common/tracefs.h"
#include "common/parse.h"
#include "common/result.h"
#include "common/runloop.h"

namespace bpfdiag {

// Longest command-line argument accepted (a 4096-entry PID list fits easily).
constexpr size_t kMaxArgLength = 65536;

// Parses argv with `opts` (which must declare a positional "args" vector option).
// Refuses, as usage errors: an argument longer than kMaxArgLength, an option that
// takes a value given twice ("give one comma-separated list" beats silently keeping
// the last), and an empty value for an option that takes one. "-p123,456" is read as
// "-p 123,456" for every short option that takes a value.
Result<cxxopts::ParseResult> parse_cli(cxxopts::Options& opts, int argc, char** argv);
// Adds the positional catch-all; call after declaring the tool's options.
void add_positionals(cxxopts::Options& opts);
std::vector<std::string> positionals(const cxxopts::ParseResult& r);

// Optional string option as a value or nullptr.
inline const std::string* opt_str(const cxxopts::ParseResult& r, const std::string& name) {
  return r.count(name) ? &r[name].as<std::string>() : nullptr;
}

// "[interval [count]]": interval in seconds (or with a unit, 1 ms .. 1 day), count >= 1.
Status parse_interval_count(const std::vector<std::string>& pos, Schedule& s);
// "[duration]": seconds (or with a unit), 1 ms .. 1 day.
Status parse_duration_positional(const std::vector<std::string>& pos, Schedule& s);

// A PID list may name processes that are gone by now: the others are traced. Fails
// ("no process with PID N") only when none of them exists; an empty list passes.
Status check_pids_exist(const std::vector<uint32_t>& pids);
// -p/-t checks of the stack tools: the PIDs (check_pids_exist), each TID exists and,
// with -p, is a thread of one of the PIDs.
Status check_targets(const std::vector<uint32_t>& pids, const std::vector<uint32_t>& tids);
// Removes the PIDs that are not running (missing or zombie) from `pids`, returns them.
std::vector<uint32_t> drop_gone_pids(std::vector<uint32_t>& pids);
// "no process with PID 5", "no process with any of PIDs 5, 6".
std::string gone_pids_message(const std::vector<uint32_t>& gone);

// A usage or runtime message kept to one readable line (long arguments echoed in it
// are cut in the middle).
std::string one_line(const std::string& msg, size_t max_len = 300);

// The suite's version (CMake's BPFDIAG_VERSION), "0.3.0".
const char* suite_version();
// Whether argv asks for --version: the exact word before any "--", wherever it stands
// (like --help, it wins over everything else on the line).
bool version_requested(int argc, char** argv);
// Prints "TOOL (bpfdiag) VERSION" on stdout; the exit code (0, or 1 when stdout
// cannot be written).
int print_version(const char* tool);

// Flushes stdout (FILE* and std::cout); on a write error prints
// "TOOL: cannot write output: <reason>" and returns false.
bool flush_output(const char* tool);
// stdout into a pipe or file: 64 KiB writes, not stdio's 4 KiB (a final report of 9,000
// JSON records was 2,700 writes, each contending with the reader for the pipe's lock);
// a terminal keeps its line buffering. Reports flush themselves when complete.
void full_output_buffer();

namespace detail {
template <typename C, typename = void>
struct has_pids : std::false_type {};
template <typename C>
struct has_pids<C, std::void_t<decltype(std::declval<C&>().pids.begin())>> : std::true_type {};
template <typename C, typename = void>
struct has_pprof : std::false_type {};
template <typename C>
struct has_pprof<C, std::void_t<decltype(std::declval<C&>().pprof.empty())>> : std::true_type {};
template <typename C, typename = void>
struct has_metrics : std::false_type {};
template <typename C>
struct has_metrics<C, std::void_t<decltype(std::declval<C&>().prometheus.empty()),
                                  decltype(std::declval<C&>().listen.empty())>> : std::true_type {};
}  // namespace detail

// --prometheus FILE / --listen ADDR:PORT (common/metrics.h): checked (a bad FILE is a
// usage error: 2) and opened (the socket bound: a port in use is a runtime failure: 1)
// before tracing; 0 when the run can go on. Prints the one-line error itself.
int open_metrics_sinks(const char* tool, const std::string& prometheus, const std::string& listen);
// After the run: 1 (and the line) when the last metrics write failed, else 0.
int metrics_sinks_status(const char* tool);

// --pprof FILE checked before tracing starts (common/pprof.cpp): a usage error.
Status check_output_file(const std::string& option, const std::string& path);

// Shared main(): --version, stop handlers, parse, --help, tracefs, run, and output errors.
// Config must have `bool help`; a `pids` member (-p list) loses the PIDs that are gone
// (named once on stderr) while at least one remains; a `pprof` member (--pprof FILE)
// is checked as an output file (a usage error, before tracing starts).
template <typename Config, typename ParseFn, typename RunFn>
int tool_main(const char* tool, const char* help, int argc, char** argv, ParseFn parse, RunFn run) {
  if (version_requested(argc, argv)) return print_version(tool);
  install_stop_handlers();
  full_output_buffer();
  Result<Config> cfg = parse(argc, argv);
  if (!cfg) {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", tool, one_line(cfg.error()).c_str(), tool);
    return 2;
  }
  Config c = *cfg;
  if (c.help) {
    std::fputs(help, stdout);
    return flush_output(tool) ? 0 : 1;
  }
  if constexpr (detail::has_pids<Config>::value) {
    if (!c.pids.empty()) {
      auto gone = drop_gone_pids(c.pids);
      if (c.pids.empty()) {
        std::fprintf(stderr, "%s: %s (see %s --help)\n", tool, gone_pids_message(gone).c_str(), tool);
        return 2;
      }
      if (!gone.empty()) {
        std::string list;
        for (auto p : gone) list += (list.empty() ? "" : ", ") + std::to_string(p);
        std::fprintf(stderr, "%s: PID %s not found (exited?); tracing the others\n", tool,
                     one_line(list).c_str());
      }
    }
  }
  if constexpr (detail::has_pprof<Config>::value) {
    if (!c.pprof.empty()) {
      if (Status bad = check_output_file("--pprof", c.pprof)) {
        std::fprintf(stderr, "%s: %s (see %s --help)\n", tool, one_line(bad->message).c_str(), tool);
        return 2;
      }
    }
  }
  if constexpr (detail::has_metrics<Config>::value) {
    if (!c.prometheus.empty() || !c.listen.empty())
      if (int rc = open_metrics_sinks(tool, c.prometheus, c.listen)) return rc;
  }
  timing_mark("parse options");
  Status st = ensure_tracefs();  // before any libbcc call, while single-threaded
  timing_mark("mount namespace/tracefs");
  if (!st) st = run(static_cast<const Config&>(c));
  if (st) {
    flush_output(tool);
    std::fprintf(stderr, "%s: %s\n", tool, one_line(st->message, 1000).c_str());
    return 1;
  }
  if (!flush_output(tool)) return 1;
  return metrics_sinks_status(tool);
}

}  // namespace bpfdiag
