// The check of a runbook against the suite's tools, as the tool registry lists them
// (common/registry.h): each tool's own option table (ToolSpec) and parser, so
// `tool: lockstat -s 3` is checked by lockstat's own parse_args with the command line
// runbook will run, and whether a tool has -p, --svg or --duration is read from its
// table. A tool's program is taken only from runbook's own directory (never PATH) and
// only when that file and its directories pass open_trusted (common/runbook_file.h).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "common/cli.h"
#include "common/registry.h"
#include "tools/runbook/runbook.h"

namespace runbook {
using namespace bpfdiag;

namespace {

// The name cxxopts reports an option under (its long name, else its short one).
std::string long_name(const OptionSpec& o) { return option_names(o).key(); }

std::string dash_name(const OptionSpec& o) {
  auto n = long_name(o);
  return (n.size() == 1 ? "-" : "--") + n;
}

bool has_option(const ToolSpec& s, const std::string& name) {
  for (auto& o : s.options)
    if (long_name(o) == name) return true;
  return false;
}

// Options a runbook file may not give: runbook sets the output format, the target and
// the schedule itself, and names every file it writes (no option naming a file or
// directory, for reading or writing, is passed through; nor --prometheus/--listen: a
// runbook's window is not continuous mode, and a runbook file may not open a port).
bool forbidden(const OptionSpec& o) {
  static const std::set<std::string> kSetByRunbook{"json",     "csv",  "folded", "pid", "tid",     "interval",
                                                   "count",    "duration", "help", "ebpf", "svg", "children",
                                                   "version",  "pprof", "prometheus", "listen",
                                                   "cgroup",   "container"};
  if (kSetByRunbook.count(long_name(o))) return true;
  for (const char* word : {"FILE", "DIR", "PATH"})
    if (o.arg.find(word) != std::string::npos) return true;
  return false;
}

constexpr uint64_t kSec = 1'000'000'000ULL;

// The tool's program next to runbook (t.exe), or why it cannot run (t.error).
void find_exe(ToolRun& t, const std::string& here) {
  std::string exe = here.empty() ? "" : here + "/" + t.name;
  struct stat lst;
  if (exe.empty() || lstat(exe.c_str(), &lst) != 0) {
    t.error = "not found next to runbook (" + here + ")";
  } else if (auto fd = open_trusted(exe); !fd) {
    t.error = "not run: " + fd.error();
  } else {
    struct stat st{};
    fstat(*fd, &st);
    close(*fd);
    if (!(st.st_mode & S_IXUSR))
      t.error = "not run: " + exe + " is not executable";
    else
      t.exe = exe;
  }
}

// The -p argument a tool is handed ("" for none): the PIDs as given; with --children,
// the same to a tool with a --children of its own (own_children: add it), else the
// PIDs and their descendants at the start, as a list.
const std::string& target_arg(const Config& cfg, const ToolSpec& spec, bool& own_children) {
  own_children = cfg.children && has_option(spec, "children");
  return cfg.children && !own_children ? cfg.pool_arg : cfg.pid_arg;
}

}  // namespace

Status plan_tools(Run& run) {
  const std::string file = run.book.path.empty() ? run.book.name : run.book.path;
  const std::string here = self_exe_dir();
  // Backstop: each tool is given a duration that ends it even if runbook's stop never
  // arrives (runbook killed, and the parent-death signal missed): the window, plus the
  // longest wait for the others to attach, plus a margin.
  const uint64_t window = run.cfg.duration_ns ? run.cfg.duration_ns : run.book.duration_ns;
  const uint64_t backstop_s =
      std::min<uint64_t>((window + kAttachTimeoutNs) / kSec + kBackstopMarginS, 86400);
  for (auto& rt : run.book.tools) {
    const std::string at = file + ":" + std::to_string(rt.line) + ": ";
    const ToolEntry* st = find_tool(suite_tools(), rt.name);
    if (!st) return Error{at + "'" + rt.name + "' is not a tool of the suite (" + tool_names(suite_tools()) + ")"};
    const ToolSpec& spec = st->spec();
    // 1. the file's own arguments against the tool's option table
    std::vector<std::string> own{rt.name};
    own.insert(own.end(), rt.args.begin(), rt.args.end());
    {
      std::vector<char*> av;
      for (auto& a : own) av.push_back(a.data());
      av.push_back(nullptr);
      auto parsed = parse_tool_cli(spec, static_cast<int>(own.size()), av.data());
      if (!parsed) return Error{at + rt.name + ": " + parsed.error()};
      for (auto& o : all_options(spec))
        if (parsed->raw.count(long_name(o)) && forbidden(o))
          return Error{at + rt.name + ": " + dash_name(o) +
                       " is not allowed in a runbook (runbook adds -j, -p and the duration and writes every output file)"};
      auto pos = positionals(parsed->raw);
      if (!pos.empty()) return Error{at + rt.name + ": '" + pos[0] + "': no positional arguments in a runbook (runbook sets the window)"};
    }
    ToolRun t;
    t.name = rt.name;
    t.line = rt.line;
    find_exe(t, here);
    // 2. the command line it will run, through the tool's own parser
    t.argv = {t.exe.empty() ? rt.name : t.exe, "-j"};
    const bool has_pid = has_option(spec, "pid");
    bool own_children = false;
    const std::string& pid_arg = target_arg(run.cfg, spec, own_children);
    if (!pid_arg.empty() && has_pid) {
      t.argv.insert(t.argv.end(), {"-p", pid_arg});
      if (own_children) t.argv.emplace_back("--children");
    } else if (!pid_arg.empty())
      t.whole_machine = true;
    if (has_option(spec, "cgroup")) {
      auto cg = cgroup_args(run.cfg);
      t.argv.insert(t.argv.end(), cg.begin(), cg.end());
    }
    t.argv.insert(t.argv.end(), rt.args.begin(), rt.args.end());
    if (has_option(spec, "svg")) {
      t.own_svg = true;
      t.argv.insert(t.argv.end(), {"--svg", "/proc/self/fd/" + std::to_string(kSvgFd)});
    }
    if (has_option(spec, "pprof")) {
      t.own_pprof = true;
      t.argv.insert(t.argv.end(), {"--pprof", "/proc/self/fd/" + std::to_string(kPprofFd)});
    }
    if (has_option(spec, "duration")) t.argv.insert(t.argv.end(), {"--duration", std::to_string(backstop_s) + "s"});
    std::vector<std::string> check = t.argv;
    check[0] = rt.name;
    if (auto err = st->check(check)) {
      // without -p a tool that requires one (threadpool) is reported as failed, as
      // when it is run; an argument the tool refuses in any case refuses the runbook
      std::vector<std::string> with_pid = check;
      with_pid.insert(with_pid.begin() + 2, {"-p", std::to_string(getpid())});
      // a tool that watches one process (threadpool) given a PID list: not run, and
      // the report says so (never an argument the tool refuses, never a silent gap)
      std::vector<std::string> one_pid = check;
      const bool pid_list = pid_arg.find(',') != std::string::npos && has_pid;
      if (pid_list) one_pid[3] = pid_arg.substr(0, pid_arg.find(','));
      if (run.cfg.pid_arg.empty() && has_pid && !st->check(with_pid)) {
        if (t.error.empty()) t.error = "not run: " + err->message;
      } else if (pid_list && !st->check(one_pid)) {
        if (t.error.empty()) t.error = "not run: " + err->message + " (this runbook was given -p " + pid_arg + ")";
      } else {
        return Error{at + rt.name + ": " + err->message};
      }
    }
    run.tools.push_back(std::move(t));
  }
  return std::nullopt;
}

}  // namespace runbook
