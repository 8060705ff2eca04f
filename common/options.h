// The suite's one command-line vocabulary, declared once. A tool describes itself as
// a ToolSpec (name, summary, description, options, examples); from that one table:
//  - `--help` and its USAGE line are generated (render_help), so help, man page
//    SYNOPSIS (checked by tests/integration/test_docs.py) and parsing never disagree;
//  - the options are declared to cxxopts and parsed (parse_tool_cli), and the options
//    every tool shares are read into CommonOptions with the same rules everywhere.
//
// Shared vocabulary (BCC's flags where BCC has the tool):
//   -p/--pid PID[,PID]  -t/--tid TID[,TID]  -U/--user-stacks-only  -K/--kernel-stacks-only
//   -f/--folded  -P/--per-thread  -T/--timestamp  -j/--json  --csv  -S/--sort KEY
//   --fields LIST  -n/--entries N  -s/--stacks N  -m/--min TIME  -M/--max TIME  --svg FILE
//   --pprof FILE
//   --ebpf  -v/--verbose  -h/--help  --version (added after -h/--help by all_options:
//   every command with --help has it)
// Schedule (one grammar): -i/--interval TIME, -c/--count N, -d/--duration TIME, and,
// where BCC has it, the positional form ([interval [count]] or [duration]).
//
//   const ToolSpec spec{"naptime", "trace sleeps...", description,
//                       {opt::pid("only these processes"), opt::json("..."), ...},
//                       examples, Positional::Duration};
//   auto r = parse_tool_cli(spec, argc, argv);   // Result<ParsedCli>
//   r->common.pids, r->common.schedule, r->raw.count("summary") ...
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/cli.h"

namespace bpfdiag {

struct OptionSpec {
  std::string flags;  // cxxopts form: "p,pid" or "ebpf"
  std::string arg;    // value placeholder, e.g. "PID[,PID]"; empty: a flag
  std::string help;   // may hold '\n' for continuation lines
  std::string group = "Output";  // help section: "Filters", "Output", "Schedule", ...
  bool hidden = false;           // accepted (an older name) but not listed in --help
  std::string alias_of = {};     // an older name of this option (its key: "frequency"):
                                 // ParsedCli::value and the shared options read either
};

// Which positional arguments a tool accepts.
enum class Positional {
  None,           // none (schedule only through -i/-c/-d)
  IntervalCount,  // [interval [count]] (BCC runqlen and friends)
  Duration,       // [duration] (BCC offcputime, profile)
  File,           // [FILE] an input file (converters), in CommonOptions::file
  Name,           // NAME: what to run (runbook), in CommonOptions::file
};

struct ToolSpec {
  std::string name;
  std::string summary;      // one line, after "NAME - "
  std::string description;  // paragraphs after USAGE
  std::vector<OptionSpec> options;
  std::string examples;  // lines "  tool -p 181      # what it does"
  Positional positional = Positional::None;
};

// The standard options. Each tool picks the ones it has; help texts may be specialised.
namespace opt {
OptionSpec pid(std::string help = "only these processes");
OptionSpec tid(std::string help = "only these threads");
// --cgroup PATH, --container ID (group "Filters"): only tasks in this cgroup v2 directory
// (or below it) / in this container's cgroup; resolved by common/cgroup.h.
OptionSpec cgroup();
OptionSpec container();
OptionSpec user_stacks_only(std::string help = "user space stacks only");
OptionSpec kernel_stacks_only(std::string help = "kernel stacks only");
OptionSpec folded(std::string help = "folded output for flame graphs (flamegraph.pl, speedscope)");
OptionSpec per_thread(std::string help);
OptionSpec timestamp(std::string help = "print a timestamp (HH:MM:SS) with each report");
OptionSpec json(std::string help);
OptionSpec csv(std::string help = "tables as CSV (raw values, times in ns)");
OptionSpec sort(std::string help);
OptionSpec fields(std::string help);
OptionSpec entries(std::string help);
OptionSpec stacks(std::string help);
OptionSpec min(std::string help);
OptionSpec max(std::string help);
OptionSpec interval();
OptionSpec count();
OptionSpec duration();
// --svg FILE: every stack tool's interactive flame graph of its final report
// (common/flamegraph.h), written when the run ends.
OptionSpec svg(std::string help = "write a flame graph of the final report to FILE");
// --pprof FILE: the same window as a gzip-compressed pprof profile (common/pprof.h),
// for go tool pprof, Pyroscope and Parca; checked before tracing (tool_main).
OptionSpec pprof(std::string help);
// Continuous mode's metrics (common/metrics.h): --prometheus FILE (node_exporter's
// textfile collector, replaced atomically at every report) and --listen ADDR:PORT (an
// HTTP endpoint, GET /metrics, loopback unless another address is given); both are
// checked and opened before tracing (tool_main).
OptionSpec prometheus();
OptionSpec listen();
OptionSpec ebpf();
OptionSpec verbose(std::string help = "say where probes were placed and what was skipped");
OptionSpec help();
// --version: "TOOL (bpfdiag) X.Y.Z" and exit 0 (printed by tool_main, see cli.h
// version_requested); never declared by a tool: all_options adds it after -h/--help.
OptionSpec version();
// A hidden older name ("f", "map-size") of `current`, with its argument and group.
OptionSpec older_name(std::string flags, const OptionSpec& current);
// --unwind=fp|dwarf (parsed by common/unwind_maps unwind_dwarf_option)
// --jvm-perfmap: ask each target HotSpot JVM for its perf map (common/jvm_attach.h).
OptionSpec jvm_perfmap();
OptionSpec unwind(std::string help = "user stacks: dwarf (.eh_frame tables; the default\n"
                                     "with -p/-t) or fp (frame pointers; the default\n"
                                     "system-wide)");
}  // namespace opt

// The shared options as parsed; fields of options a tool does not declare stay empty.
struct CommonOptions {
  bool help = false;
  bool json = false;
  bool csv = false;
  bool ebpf = false;
  bool verbose = false;
  bool timestamp = false;
  bool folded = false;
  bool per_thread = false;
  bool user_stacks_only = false;
  bool kernel_stacks_only = false;
  std::vector<uint32_t> pids;
  std::vector<uint32_t> tids;
  std::string cgroup;     // --cgroup PATH as given ("": none); common/cgroup.h resolves it
  std::string container;  // --container ID as given ("": none)
  std::string sort;    // empty: the tool's default
  std::string fields;  // empty: the tool's default
  std::optional<uint64_t> entries;
  std::optional<uint64_t> stacks;
  std::optional<uint64_t> min_ns;  // -m, default unit us
  std::optional<uint64_t> max_ns;  // -M, default unit us
  Schedule schedule;
  std::string file;  // Positional::File
  std::string svg;   // --svg FILE; empty: none
  std::string pprof; // --pprof FILE; empty: none
  std::string prometheus;  // --prometheus FILE; empty: none
  std::string listen;      // --listen ADDR:PORT; empty: none
};

struct ParsedCli {
  cxxopts::ParseResult raw;  // for the tool's own options
  CommonOptions common;
  std::map<std::string, std::string> given_as;  // option key -> the older name it was given under

  // An option's value, also when it was given under an older name (OptionSpec::alias_of);
  // nullptr when not given.
  const std::string* value(const std::string& key) const;
};

// Parses argv against the spec: parse_cli's rules (one value per option, no empty
// values, argument length cap), then the shared options (-p/-t lists, -n/-s counts,
// -m/-M durations, the schedule: -i/-c/-d or the spec's positional form, not both;
// -c needs an interval). -U with -K, --csv with -j are refused, and so is an option
// given under both its names. Usage errors only:
// whether PIDs exist is checked by tool_main.
Result<ParsedCli> parse_tool_cli(const ToolSpec& spec, int argc, char** argv);

// The options a tool has, as listed in --help, the USAGE line and the registry and as
// parsed: the spec's own, with opt::version() right after -h/--help.
std::vector<OptionSpec> all_options(const ToolSpec& spec);

// An option's names: "p,pid" -> {"p", "pid"}, "ebpf" -> {"", "ebpf"}, "f" -> {"f", ""}.
struct OptionNames {
  std::string short_name, long_name;
  // the name cxxopts reports it under: the long name, else the short one
  const std::string& key() const { return long_name.empty() ? short_name : long_name; }
  // "-p/--pid", "--ebpf", "-f"
  std::string display() const;
};
OptionNames option_names(const OptionSpec& o);

// The generated --help: "NAME - summary", USAGE, description, OPTIONS by group,
// positional arguments, EXAMPLES.
std::string render_help(const ToolSpec& spec);
// "name [-h] [-p PID[,PID]] ... [interval [count]]", as the man page SYNOPSIS.
std::string usage_line(const ToolSpec& spec);

}  // namespace bpfdiag
