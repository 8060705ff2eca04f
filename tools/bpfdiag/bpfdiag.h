// bpfdiag: one command for the suite. `bpfdiag TOOL ARGS...` runs the tool of that name
// from the directory holding bpfdiag's own executable (/proc/self/exe: the build
// tree's bin/, or /usr/libexec/bpfdiag installed, where /usr/sbin/bpfdiag is a
// symbolic link to it), never from PATH; the program is opened with open_trusted (it
// and every directory above it belong to root or the caller and are writable by no
// one else) and run from that descriptor (fexecve), so what was checked is what runs,
// with the same argv after the name and the same process: its exit status and its
// signals are the tool's own.
#pragma once
#include <string>
#include <vector>

#include "common/result.h"

namespace bpfdiag_cmd {

// One command of the suite: its name and the summary its --help starts with.
struct Command {
  std::string name;
  std::string summary;
};

// The suite's commands, from CMake's TOOLS and UTILS lists (generated at build time
// from each program's own --help).
const std::vector<Command>& commands();

// What a command line asks for.
struct Request {
  enum Kind { Help, Version, Run } kind = Help;
  std::string tool;               // Run: the command's name
  std::vector<std::string> args;  // Run: argv for the tool (args[0] = its name)
};

// Parses bpfdiag's own command line: no arguments, -h/--help or `help` list the
// commands; `help NAME` is NAME --help; --version; NAME ARGS... runs NAME with ARGS.
// Errors (one line): an unknown option or command.
bpfdiag::Result<Request> parse_request(const std::vector<std::string>& argv,
                                       const std::vector<Command>& cmds);

// The --help text: summary, USAGE, OPTIONS, COMMANDS (name and summary), EXAMPLES.
std::string help_text(const std::vector<Command>& cmds);

}  // namespace bpfdiag_cmd
