// The suite's tool registry: every tool's name, option table (ToolSpec), own parser and
// modes, with what each mode attaches. Read by doctor (its tool/mode matrix and
// `doctor --list`), runbook (which tools a runbook may name, and their parsers), the
// unit tests and, through `doctor --list -j`, the integration tests and the man-page
// lint (tests/integration/test_docs.py).
//
// Each tool declares its entry once, next to its option table (tools/<tool>/cli.cpp):
//
//   const bpfdiag::ToolEntry& registry_entry() {
//     static const bpfdiag::ToolEntry e{"naptime", &tool_spec, &bpfdiag::check_args<&parse_args>,
//                                       {{"naptime", {tracepoints...}, {raw...}, false, false, "sleeps"}}};
//     return e;
//   }
//
// and the build collects them: CMake generates gen/suite_tools.cpp from its TOOLS list
// (one reference per tool, so the linker cannot drop an entry), which defines
// suite_tools(). common/ includes no tool header.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/options.h"
#include "common/result.h"

namespace bpfdiag {

// What one mode of a tool needs from the kernel, as the tool attaches it.
struct ModeNeeds {
  std::string mode;                          // how it is run: "lockstat -K"
  std::vector<std::string> tracepoints;      // "category:name", attached as tracepoints
  std::vector<std::string> raw_tracepoints;  // "category:name", attached as raw tracepoints
  bool perf_cpu_clock = false;               // software cpu-clock perf events on every CPU
  bool uprobes = false;                      // uprobes (on libc's pthread functions)
  std::string gives;                         // what the mode gives when it works

  bool needs_tracefs() const { return !tracepoints.empty() || !raw_tracepoints.empty(); }
  bool empty() const { return !needs_tracefs() && !perf_cpu_clock && !uprobes; }
};

struct ToolEntry {
  std::string name;
  const ToolSpec& (*spec)();
  // The tool's own parse_args on a command line (argv[0] = the tool's name).
  Status (*check)(const std::vector<std::string>& argv);
  std::vector<ModeNeeds> modes;
  // The command-line choices that change the compiled BPF program, one list of
  // alternatives per axis ("" = the option left out; $PID/$TID: a live multi-threaded
  // process and one of its threads). scripts/check-bpf-variants compiles the program of
  // every combination the tool's parser accepts, at build time. Options that only
  // change a constant's value (sizes, -M bounds) are left out.
  std::vector<std::vector<std::string>> bpf_variants;
};

// Every tool of the suite, in CMake's TOOLS order (defined by the generated
// gen/suite_tools.cpp: link the suite_registry library to use it).
const std::vector<const ToolEntry*>& suite_tools();
// The entry named `name`, or nullptr.
const ToolEntry* find_tool(const std::vector<const ToolEntry*>& tools, const std::string& name);
// "runqlen naptime ...".
std::string tool_names(const std::vector<const ToolEntry*>& tools);

// Runs a parser (Result<Config> (*)(int, char**)) on argv, keeping only the verdict.
template <auto Parse>
Status check_args(const std::vector<std::string>& argv) {
  std::vector<std::string> copy = argv;  // parsers take char**
  std::vector<char*> av;
  for (auto& a : copy) av.push_back(a.data());
  av.push_back(nullptr);
  auto r = Parse(static_cast<int>(copy.size()), av.data());
  if (!r) return Error{r.error()};
  return std::nullopt;
}

// The registry as JSON: one object per tool with name, summary, usage (usage_line),
// options (short, long, arg, group; hidden ones left out) and modes with their needs.
nlohmann::json tool_json(const ToolEntry& t);

}  // namespace bpfdiag
