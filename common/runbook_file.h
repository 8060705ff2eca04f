// Runbook files: a runbook is a small declarative text file naming the tools to run
// together over one time window (see man 8 runbook, "Runbook files"):
//
//   # slow-service: a service is slow; where does its time go?
//   title: Slow service
//   summary: pool health, where threads wait, locks, run queue and on-CPU stacks
//   tool: threadpool
//   tool: lockstat -s 3
//   wait: window            (default; "exit": the tools end on their own, e.g. doctor)
//   duration: 10s           (default window when -d is not given)
//
// Files are NAME.runbook in the runbook directories: $BPFDIAG_RUNBOOKS (':'-separated),
// then <dir of the executable>/../share/bpfdiag/runbooks (the build tree's bin/ and an
// installed sbin/ both have one).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

struct RunbookTool {
  std::string name;               // a suite program, found next to runbook or in PATH
  std::vector<std::string> args;  // extra arguments from the file
};

struct RunbookFile {
  std::string name;  // file name without .runbook
  std::string path;
  std::string title;
  std::string summary;
  bool wait_exit = false;                   // wait: exit
  uint64_t duration_ns = 10'000'000'000ULL;  // duration:
  std::vector<RunbookTool> tools;
};

// Parses a runbook's text; errors name the line ("line 3: unknown key 'tools'").
Result<RunbookFile> parse_runbook(const std::string& name, const std::string& text);

// The directory holding the running executable ("" if unknown).
std::string self_exe_dir();
// Where runbooks are looked up, in order (existing directories only).
std::vector<std::string> runbook_dirs();
// NAME (a name in runbook_dirs(), or a path containing '/') parsed.
Result<RunbookFile> load_runbook(const std::string& name);
// Every runbook found (first directory wins for a name), sorted by name; files that do
// not parse are returned as errors in `bad`.
std::vector<RunbookFile> list_runbooks(std::vector<std::string>* bad = nullptr);

}  // namespace bpfdiag
