// runbook: runs a runbook's tools together over one time window and writes a report
// directory (per-tool NDJSON and stderr, folded stacks, flame graphs, report.md,
// report.html, run.json). No BPF of its own: the tools are child processes.
//
//   cli.cpp       options -> Config
//   registry.cpp  a runbook's tools checked against the tool registry (common/registry.h:
//                 each tool's option table and own parser) and their command lines built
//   outdir.cpp    the report directory (created fresh) and its files (O_EXCL, O_NOFOLLOW)
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

#include "common/cgroup.h"
#include "common/options.h"
#include "common/output.h"
#include "common/result.h"
#include "common/runbook_file.h"

namespace runbook {

struct Config {
  bool help = false;
  bool list = false;
  std::string name;
  std::string pid_arg;             // as given, passed on to every tool
  std::vector<uint32_t> pids;
  // --children: the PIDs' descendants too. A tool with --children of its own gets
  // "-p PID_ARG --children"; the others "-p POOL_ARG": the PIDs and their descendants
  // at the start.
  bool children = false;
  std::string pool_arg;
  // --cgroup/--container, resolved here (exit 2 when bad) and passed to every tool
  // that has the option (cgroup_args)
  std::optional<bpfdiag::CgroupTarget> cgroup;
  uint64_t duration_ns = 0;        // 0: the runbook's own default
  std::string out_dir;             // "" : ./runbook-NAME-YYYYmmdd-HHMMSS-RANDOM
};

constexpr uint64_t kAttachTimeoutNs = 120'000'000'000ULL;  // BPF compiles of 5 tools on a busy box
constexpr uint64_t kBackstopMarginS = 30;  // a tool's --duration: window + attach timeout + this
constexpr int kSvgFd = 3;  // a tool's --svg is /proc/self/fd/3: a file runbook created
constexpr int kPprofFd = 4;  // a tool's --pprof is /proc/self/fd/4: TOOL.pb.gz, runbook's

extern const bpfdiag::ToolSpec kSpec;
// What a tool is handed for the runbook's cgroup: {"--container", FULL_ID} or
// {"--cgroup", PATH}; empty without one.
std::vector<std::string> cgroup_args(const Config& c);
bpfdiag::Result<Config> parse(int argc, char** argv);

// One tool of the run.
struct ToolRun {
  std::string name;
  int line = 0;                   // its "tool:" line in the runbook
  std::string base;               // its files: BASE.ndjson, .stderr.txt, .folded, .svg (the
                                  // name; NAME-2 for a second run of a tool)
  std::vector<std::string> argv;  // argv[0] = the program's path (or name when not found)
  std::string exe;                // "" : not found
  bool own_svg = false;           // the tool was given --svg (it writes its SVG itself)
  int svg_fd = -1;                // with own_svg: TOOL.svg, created by runbook
  bool own_pprof = false;         // the tool was given --pprof (a pprof profile of the window)
  int pprof_fd = -1;              // with own_pprof: TOOL.pb.gz, created by runbook
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
  std::string dir;                   // as shown
  int dir_fd = -1;                   // every report file is opened relative to it
  std::vector<ToolRun> tools;
  uint64_t start_ns = 0, window_start_ns = 0, window_end_ns = 0, end_ns = 0;
  bool interrupted = false;  // Ctrl-C / SIGTERM ended the window early
  bool attach_timeout = false;
  std::string report_md;  // as written
};

// registry.cpp: the suite's tools are the registry's (common/registry.h suite_tools()).
// Checks run.book against the suite and fills run.tools with each tool's program and
// command line: "FILE:LINE: ..." when a tool is not the suite's, or an argument is
// unknown to the tool, refused by its parser, or one runbook sets itself (-j, -p, the
// schedule, --svg, any option naming a file). A program that is missing or not
// trusted, or a tool that needs -p when none was given, is a tool error (not run).
bpfdiag::Status plan_tools(Run& run);

// outdir.cpp. The report directory: -o DIR is created (mode 0700; its missing parents
// 0755) or, if it exists, must be an empty directory (not a symbolic link) owned by
// this user and writable by no one else; the default name gets a random suffix and is
// created exclusively. Sets run.dir_fd.
bpfdiag::Status open_report_dir(Run& run);
// NAME created in the report directory (O_CREAT|O_EXCL|O_NOFOLLOW, 0644, O_CLOEXEC);
// -1 and errno when it cannot be.
int create_report_file(const Run& run, const std::string& name);
using bpfdiag::write_all;  // common/output.h
// Creates NAME and writes TEXT; an error names the file.
bpfdiag::Status write_report_file(const Run& run, const std::string& name, const std::string& text);
// NAME of the report directory ("" when absent), never through a symbolic link.
std::string read_report_file(int dir_fd, const std::string& name);

// launch.cpp: runs every tool of run.tools (plan_tools) into run.dir_fd.
void execute(Run& run);
uint64_t realtime_ns();
std::string iso_time(uint64_t realtime_ns);

// A report as both renderers see it.
struct Finding {
  std::string tool;
  std::string text;    // what was found
  std::string number;  // the number behind it, as the tool measured it
  bool problem = true;  // false: measured and fine (a "[x]" line)
  bool failure = false;  // the tool itself failed
  // Context, not a finding: waiting for work, timed sleeps, condition waits, event-loop
  // idling. Listed apart, after the findings, never ranked among them.
  bool context = false;
  // What ranks it (rank.cpp): the thread time it explains (a wait's total, a pool's
  // blocked time), its longest single event, and what it is about, to merge the same
  // wait seen by two tools.
  uint64_t impact_ns = 0;
  uint64_t max_event_ns = 0;
  std::string lock;                 // lockstat/pmheld: the lock's name
  std::vector<std::string> frames;  // the innermost user frames of its stack or site
  // Set by rank_findings():
  bool one_off = false;   // one event is most of its time
  bool follows = false;   // pmheld: ranked right after lockstat's finding for its lock
  std::string weakened;   // its tool's losses ("lost_events 18"), "" when none
};
struct Figure {
  std::string title;
  std::string file;  // SVG file name in the report directory
  std::string pprof;  // the same stacks as a pprof profile (TOOL.pb.gz), "" if none
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
  std::vector<Finding> findings;  // ranked (rank_findings); context ones last
  std::string ranked_by;          // how findings are ranked, said above them
  std::vector<Section> sections;
};

// findings.cpp
Report build_report(const Run& run);
// rank.cpp: the findings ordered by impact (failures first, then problems by the thread
// time they explain, one-off events after sustained ones, then the fine ones), the same
// wait seen by two tools said once, each tool's losses next to its findings, and the
// share of the target's thread time each explains where a tool measured that time.
struct ThreadTime {
  uint64_t ns = 0;      // 0: no tool measured it
  std::string source;   // how it was measured, for the report
  std::string unit;     // "thread time", or "off-CPU time" when on-CPU time is unknown
};
ThreadTime thread_time(const Run& run);
std::string losses_text(const ToolRun& t);  // "lost_events 18, map_full 2", "" when none
void rank_findings(const Run& run, Report& rep);
std::string fmt_ms(uint64_t ns);
// stacks.cpp: writes <tool>.folded and (unless the tool wrote it) <tool>.svg for every
// tool whose records carry stacks.
void write_stacks(Run& run);
// report.cpp
std::string render_markdown(const Report& r);
std::string render_html(const Report& r, int dir_fd);  // flame graphs read from the directory
nlohmann::json run_json(const Run& run);
nlohmann::json findings_json(const Report& rep);  // run.json's "findings"
// Writes report.md, report.html, run.json; an error names the file.
bpfdiag::Status write_reports(Run& run);

}  // namespace runbook
