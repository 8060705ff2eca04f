// naptime's option table (-p -t --comm -m, --summary, -j, schedule -d/-i/-c: no
// positional form, as the suite's tools without a BCC namesake), parsing, BPF cflags.
#include "common/bpf_text.h"
#include "common/btf.h"
#include "common/cgroup.h"
#include "common/cli.h"
#include "common/embedded.h"
#include "common/filters.h"
#include "common/proc.h"
#include "common/registry.h"
#include "tools/naptime/naptime.h"

namespace bpfdiag {
extern const EmbeddedFile kBpf_naptime[];
}

namespace naptime {
using namespace bpfdiag;

namespace {
const char kDescription[] =
    "Traces nanosleep(2) and clock_nanosleep(2), where glibc's nanosleep, usleep,\n"
    "sleep and std::this_thread::sleep_for end up. SECONDS is the length requested\n"
    "(a TIMER_ABSTIME target is converted into the length from the call), SLEPT the\n"
    "time until the call returned. NOTE shows the clock of an absolute request\n"
    "(\"MONO abs\"), a clock other than REALTIME/MONOTONIC, \"restarted\" (a signal\n"
    "without handler, e.g. SIGSTOP/SIGCONT, woke it and the kernel resumed it unseen;\n"
    "SLEPT covers the whole sleep) and errors (EINTR: a signal handler interrupted\n"
    "the sleep). PPID/PCOMM: the parent at the time of the call.";

const char kExamples[] =
    "  naptime                # trace every sleep until Ctrl-C\n"
    "  naptime -p 181         # only sleeps of PID 181\n"
    "  naptime --comm java    # only tasks named java\n"
    "  naptime -m 10ms        # only sleeps of at least 10 ms\n"
    "  naptime --cgroup system.slice/nginx.service  # only that service's sleeps\n"
    "  naptime --summary -d 10  # per-process summary and histogram after 10 s\n"
    "  naptime --summary -i 5   # the same every 5 seconds\n"
    "  naptime -j -p 181 -d 5   # JSON records for PID 181, for 5 seconds\n"
    "  naptime --summary -i 15 --prometheus /var/lib/node_exporter/naptime.prom\n"
    "                           # metrics for node_exporter, every 15 s\n";

ToolSpec make_spec() {
  std::vector<OptionSpec> options = {
      opt::pid("only these processes"),
      opt::tid("only these threads"),
      opt::cgroup(),
      opt::container(),
      OptionSpec{"comm", "NAME", "only tasks with this command name (first 15 characters)", "Filters"},
      opt::min("only sleeps requesting at least TIME (default unit us,\nor with a unit: 10ms, 1.5s)"),
      OptionSpec{"summary", "",
                 "per-process totals and a histogram of the time slept\n"
                 "at each report, instead of a line per sleep",
                 "Output"},
      opt::json("NDJSON: naptime.start, a naptime.sleep record per\n"
                "sleep, naptime.process per process, naptime.summary"),
      opt::prometheus(),
      opt::listen(),
      opt::ebpf(),
      opt::help(),
      opt::interval(),
      opt::count(),
      opt::duration(),
  };
  return ToolSpec{"naptime", "trace sleeps: requested and actual length, parent, interruptions.", kDescription,
                  options, kExamples, Positional::None};
}
}  // namespace

const ToolSpec& tool_spec() {
  static const ToolSpec spec = make_spec();
  return spec;
}

namespace {
// The parsed options into a Config; whether the PIDs/TIDs exist is checked after.
Config from_cli(const ParsedCli& p) {
  Config c;
  c.help = p.common.help;
  c.summary = p.raw.count("summary");
  c.json = p.common.json;
  c.ebpf = p.common.ebpf;
  c.pids = p.common.pids;
  c.tids = p.common.tids;
  c.min_ns = p.common.min_ns.value_or(0);
  c.schedule = p.common.schedule;
  c.prometheus = p.common.prometheus;
  c.listen = p.common.listen;
  if (auto n = opt_str(p.raw, "comm")) c.comm = n->substr(0, NAPTIME_COMM_LEN - 1);  // the kernel keeps 15
  return c;
}
}  // namespace

Result<Config> parse_args(int argc, char** argv) {
  auto r = parse_tool_cli(tool_spec(), argc, argv);
  if (!r) return Error{r.error()};
  Config c = from_cli(*r);
  if (c.help) return c;
  if (auto st = check_pids_exist(c.pids)) return *st;
  auto cg = resolve_cgroup_options(r->common, c.pids);
  if (!cg) return Error{cg.error()};
  c.cgroup = *cg;
  for (auto t : c.tids)
    if (!pid_exists(t)) return Error{"no thread with TID " + std::to_string(t)};
  return c;
}

// The registry's entry (common/registry.h): the option table, the parser and what each
// mode attaches.
const ToolEntry& registry_entry() {
  static const ToolEntry e{"naptime", &tool_spec, &check_args<&parse_args>, {{"naptime",
        {"syscalls:sys_enter_nanosleep", "syscalls:sys_exit_nanosleep", "syscalls:sys_enter_clock_nanosleep",
         "syscalls:sys_exit_clock_nanosleep", "syscalls:sys_enter_restart_syscall",
         "syscalls:sys_exit_restart_syscall", "signal:signal_deliver"},
        {"sched:sched_process_exit"}, false, false, "sleeps (nanosleep/clock_nanosleep tracepoints)"}},
      {{"", "--comm x"}, {"", "-m 10"}, {"", "-p $PID", "-t $TID"}}};
  return e;
}

std::string bpf_text() { return with_common_header(kBpf_naptime[0].text); }

BpfPlan filter_plan(const Config& c) {
  BpfPlan p;
  p.id_filter("TGID_OK", c.pids).id_filter("TID_OK", c.tids);
  if (!c.comm.empty()) p.flag("FILTER_COMM");
  if (c.min_ns) p.integer("MIN_NS", c.min_ns, "ULL");
  add_cgroup_filter(p, c.cgroup, false);  // no BTF needed without the task walk
  return p;
}

Result<BpfPlan> bpf_plan(const Config& c) {
  BpfPlan p;
  p.text = bpf_text();
  auto st = add_kernel_offsets(p, {
      {"OFF_TASK_REAL_PARENT", "task_struct", {"real_parent", "parent"}},
      {"OFF_TASK_TGID", "task_struct", {"tgid"}},
      {"OFF_TASK_COMM", "task_struct", {"comm"}},
  });
  if (st) return Error{st->message};
  p.merge(filter_plan(c));
  return p;
}

nlohmann::json start_fields(const Config& c, uint64_t probes) {
  auto opt_ns = [](const std::optional<uint64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json f = start_record_fields(c.pids, c.tids, probes,
                             {{"comm", c.comm.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.comm)},
                              {"min_ns", c.min_ns},
                              {"summary", c.summary},
                              {"interval_ns", opt_ns(c.schedule.interval_ns)},
                              {"count", opt_ns(c.schedule.count)},
                              {"duration_ns", opt_ns(c.schedule.duration_ns)}});
  if (c.cgroup) f["cgroup"] = cgroup_json(c.cgroup);
  return f;
}

}  // namespace naptime
