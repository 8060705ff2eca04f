// runbook's command line.
#include <unistd.h>

#include <set>

#include "common/parse.h"
#include "common/proc.h"
#include "tools/runbook/runbook.h"

namespace runbook {
using namespace bpfdiag;

const ToolSpec kSpec{
    "runbook",
    "run a troubleshooting runbook: several tools, one window, one report.",
    "Starts the runbook's tools at once (the suite's programs in runbook's own\n"
    "directory, never PATH), each with -j and the same -p, waits until every tool\n"
    "has attached, traces for DURATION (or until Ctrl-C) and writes a report\n"
    "directory: each tool's NDJSON and stderr, folded stacks and flame graphs (SVG),\n"
    "report.md, report.html (self-contained, opens from disk) and run.json (what\n"
    "ran, so it can be repeated). The report starts with the findings, one line each\n"
    "with the number behind it and the tool that measured it. A tool that fails is\n"
    "reported with its error; the report is still written. The tools end when\n"
    "runbook does. Runbooks are small files NAME.runbook in share/bpfdiag/runbooks\n"
    "(or $BPFDIAG_RUNBOOKS). A runbook is code run as root: the file and every\n"
    "directory above it must belong to root or you and be writable by no one else,\n"
    "it names only the suite's tools, and their arguments must pass the tool's own\n"
    "parser. See man 8 runbook.",
    {opt::pid("trace these processes (passed to every tool)"),
     opt::cgroup(),
     opt::container(),
     OptionSpec{"children", "",
                "with -p: their child processes too (threadpool: one\n"
                "pool; the other tools: the PIDs and their children)",
                "Filters"},
     OptionSpec{"d,duration", "TIME", "the window (default unit s; default 10 s)", "Schedule"},
     OptionSpec{"o,output", "DIR",
                "report directory, created (or an empty one of yours;\n"
                "default: ./runbook-NAME-DATE-TIME-RANDOM)"},
     OptionSpec{"l,list", "", "list the runbooks and their tools"}, opt::help()},
    "  runbook --list                       # the runbooks and what they run\n"
    "  runbook slow-service -p 181          # pool, waits, locks, CPU of PID 181\n"
    "  runbook slow-service -p 181 --children   # PID 181 and its worker processes\n"
    "  runbook lock-contention -p 181 -d 30 -o /tmp/locks   # 30 s window\n"
    "  runbook cpu-saturation -d 5          # the whole machine for 5 seconds\n"
    "  runbook slow-service --container 3f2a9c1d8e7b   # one container, every tool\n"
    "  runbook sleepy-process -p 181        # who sleeps, and where threads block\n"
    "  runbook doctor -p 181                # can this machine trace PID 181?\n",
    Positional::Name};

std::vector<std::string> cgroup_args(const Config& c) {
  if (!c.cgroup) return {};
  if (!c.cgroup->container.empty()) return {"--container", c.cgroup->container};
  return {"--cgroup", c.cgroup->path};
}

Result<Config> parse(int argc, char** argv) {
  auto r = parse_tool_cli(kSpec, argc, argv);
  if (!r) return Error{r.error()};
  Config c;
  c.help = r->common.help;
  c.list = r->raw.count("list") > 0;
  c.name = r->common.file;
  c.pids = r->common.pids;
  if (auto v = opt_str(r->raw, "pid")) c.pid_arg = *v;
  c.children = r->raw.count("children") > 0;
  c.duration_ns = r->common.schedule.duration_ns.value_or(0);
  if (auto v = opt_str(r->raw, "output")) c.out_dir = *v;
  if (c.help) return c;
  if (c.list) {
    if (!c.name.empty()) return Error{"--list takes no runbook name"};
    return c;
  }
  if (c.name.empty()) return Error{"which runbook? (runbook --list names them)"};
  if (!c.pids.empty()) {
    std::vector<uint32_t> alive;
    for (auto p : c.pids)
      if (pid_exists(p)) alive.push_back(p);
    if (alive.empty()) return Error{"no such process: " + c.pid_arg};
  }
  if (c.children && c.pids.empty()) return Error{"--children needs -p PID"};
  auto cg = resolve_cgroup_options(r->common, c.pids);
  if (!cg) return Error{cg.error()};
  c.cgroup = *cg;
  c.pool_arg = c.pid_arg;
  if (c.children) {  // the tools without --children get the pool as a list (at most kMaxIdList)
    std::set<uint32_t> seen(c.pids.begin(), c.pids.end());
    for (auto p : c.pids)
      for (auto k : proc_descendants(p, kMaxIdList))
        if (seen.size() < kMaxIdList && seen.insert(k).second) c.pool_arg += "," + std::to_string(k);
  }
  return c;
}

}  // namespace runbook
