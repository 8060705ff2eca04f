// runbook: runs a runbook's tools together over one time window and writes a report
// directory (per-tool NDJSON and stderr, folded stacks, flame graphs, report.md,
// report.html, run.json). No BPF of its own: the tools are child processes.
//
//   cli.cpp       options -> Config
//   launch.cpp    start the tools, wait for every "<tool>.start", the window, stop them
//   findings.cpp  findings and report sections from the tools' own records
//   report.cpp    report.md / report.html from the sections; run.json
//   stacks.cpp    folded stacks and flame graphs from the stack tools' records
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/options.h"
#include "common/result.h"
#include "common/runbook_file.h"

namespace runbook {

struct Config {
  bool help = false;
  bool list = false;
  std::string name;
  std::string pid_arg;             // as given, passed on to every tool
  std::vector<uint32_t> pids;
  uint64_t duration_ns = 0;        // 0: the runbook's own default
  std::string out_dir;             // "" : ./runbook-NAME-YYYYmmdd-HHMMSS
};

extern const bpfdiag::ToolSpec kSpec;
bpfdiag::Result<Config> parse(int argc, char** argv);

// One tool of the run.
struct ToolRun {
  std::string name;
  std::vector<std::string> argv;  // argv[0] = the program's path (or name when not found)
  std::string exe;                // "" : not found
  bool own_svg = false;           // the tool was given --svg (it writes its SVG itself)
  bool whole_machine = false;     // -p was given but the tool has none (e.g. runqlen)
  pid_t pid = -1;
  int out_fd = -1;
  std::string partial;            // stdout bytes after the last newline
  bool started = false;           // its "<tool>.start" record was seen
  bool exited = false;
  int exit_code = -1;             // -1: killed by a signal (exit_signal)
  int exit_signal = 0;
  bool killed = false;            // had to be killed after the window
  std::string error;              // could not be run at all
  std::vector<nlohmann::json> records;
  uint64_t bad_lines = 0;         // stdout lines that are not JSON
  std::string stderr_text;
  std::vector<std::string> files;  // report files written for it (names in the dir)

  bool failed() const { return !error.empty() || exit_code != 0; }
  std::string stderr_last_line() const;
  // Records of `kind` ("lock", "summary", ...): of the final report when there is one.
  std::vector<const nlohmann::json*> final_records(const std::string& kind) const;
};

struct Run {
  Config cfg;
  bpfdiag::RunbookFile book;
  std::vector<std::string> command;  // how runbook was invoked
  std::string dir;
  std::vector<ToolRun> tools;
  uint64_t start_ns = 0, window_start_ns = 0, window_end_ns = 0, end_ns = 0;
  bool interrupted = false;  // Ctrl-C / SIGTERM ended the window early
  bool attach_timeout = false;
};

// launch.cpp: runs everything; returns an error only when nothing could be recorded
// (the report directory cannot be created).
bpfdiag::Status execute(Run& run);
uint64_t realtime_ns();
std::string iso_time(uint64_t realtime_ns);

// A report as both renderers see it.
struct Finding {
  std::string tool;
  std::string text;    // what was found
  std::string number;  // the number behind it, as the tool measured it
  bool problem = true;  // false: measured and fine (a "[x]" line)
  bool failure = false;  // the tool itself failed
};
struct Figure {
  std::string title;
  std::string file;  // SVG file name in the report directory
};
struct Section {
  std::string title;
  std::vector<std::string> lines;       // bullet points
  std::vector<std::string> table_head;  // optional table
  std::vector<std::vector<std::string>> table;
  std::vector<Figure> figures;
  std::string pre;  // preformatted block (commands)
};
struct Report {
  std::string title;
  std::vector<Finding> findings;
  std::vector<Section> sections;
};

// findings.cpp
Report build_report(const Run& run);
std::string fmt_ms(uint64_t ns);
// stacks.cpp: writes <tool>.folded and (unless the tool wrote it) <tool>.svg for every
// tool whose records carry stacks.
void write_stacks(Run& run);
// report.cpp
std::string render_markdown(const Report& r);
std::string render_html(const Report& r, const std::string& dir);
nlohmann::json run_json(const Run& run);
// Writes report.md, report.html, run.json; an error names the file.
bpfdiag::Status write_reports(Run& run);

}  // namespace runbook
