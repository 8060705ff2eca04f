// Command-line skeleton shared by every tool: cxxopts with errors as values, the
// shared positional forms ([interval [count]], [duration]), and tool_main(), which
// maps results to exit codes (0 ok, 1 runtime failure, 2 usage).
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "common/bpf_session.h"
#include "common/parse.h"
#include "common/result.h"
#include "common/runloop.h"

namespace bpfdiag {

// Parses argv with `opts` (which must declare a positional "args" vector option).
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

// Checks that each PID exists ("no process with PID N").
Status check_pids_exist(const std::vector<uint32_t>& pids);

// Shared main(): blocks stop signals, mounts tracefs if needed, parses, prints --help,
// runs. Config must have `bool help`.
template <typename Config, typename ParseFn, typename RunFn>
int tool_main(const char* tool, const char* help, int argc, char** argv, ParseFn parse, RunFn run) {
  block_stop_signals();
  Result<Config> cfg = parse(argc, argv);
  if (!cfg) {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", tool, cfg.error().c_str(), tool);
    return 2;
  }
  if (cfg->help) {
    std::fputs(help, stdout);
    return 0;
  }
  Status st = ensure_tracefs();  // before any libbcc call, while single-threaded
  if (!st) st = run(*cfg);
  if (st) {
    std::fprintf(stderr, "%s: %s\n", tool, st->message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace bpfdiag
