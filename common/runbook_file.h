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
// then <dir of the executable>/../share/bpfdiag/runbooks (the build tree's bin/) and
// <dir of the executable>/../../share/bpfdiag/runbooks (installed: <prefix>/libexec/bpfdiag).
//
// A runbook is code run as root: its file and every directory from / down to it must
// be owned by root or the invoking user and writable by no one else (open_trusted);
// a directory that fails is skipped by list_runbooks (with a warning) and refused by
// load_runbook when it is the one holding the named runbook. Which programs a "tool:"
// line may name, and its arguments, are checked by runbook itself (tools/runbook).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

struct RunbookTool {
  std::string name;               // a program of the suite (checked by runbook)
  std::vector<std::string> args;  // extra arguments from the file
  int line = 0;                   // its line in the file
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

// Opens PATH (a regular file, or with `directory` a directory) as something root may
// act on: PATH resolved (realpath), then walked from / one component at a time with
// O_NOFOLLOW, each directory and the file itself checked on its descriptor: owned by
// root or getuid(), not group- or world-writable (a sticky world-writable directory
// such as /tmp is refused too: anyone may have put the file there). Returns the open
// descriptor (O_RDONLY, O_CLOEXEC); an error is one line naming what failed.
Result<int> open_trusted(const std::string& path, bool directory = false);

// The directory holding the running executable ("" if unknown).
std::string self_exe_dir();

struct RunbookDir {
  std::string path;
  std::string untrusted;  // why open_trusted refused it; "" : trusted
};
// Where runbooks are looked up, in order (existing directories only, trusted or not).
std::vector<RunbookDir> runbook_dirs();
// NAME (a name in runbook_dirs(), or a path containing '/') read through
// open_trusted and parsed.
Result<RunbookFile> load_runbook(const std::string& name);
// Every runbook found in the trusted directories (first directory wins for a name),
// sorted by name; files that do not parse, and directories skipped as untrusted, are
// returned as one-line messages in `bad`.
std::vector<RunbookFile> list_runbooks(std::vector<std::string>* bad = nullptr);

}  // namespace bpfdiag
