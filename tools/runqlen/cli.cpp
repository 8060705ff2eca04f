// runqlen command line: the option table (generated --help), parsing, BPF flags.
#include "common/bpf_text.h"
#include "common/btf.h"
#include <bpf/libbpf.h>

#include <algorithm>

#include "common/cgroup.h"
#include "common/cli.h"
#include "common/tool_config.h"
#include "common/embedded.h"
#include "common/registry.h"
#include "tools/runqlen/runqlen.h"

extern "C" {
#include <linux/types.h>

#include "runqlen_shared.h"
}

namespace bpfdiag {
extern const EmbeddedFile kBpf_runqlen[];
}

namespace runqlen {
using namespace bpfdiag;

namespace {
const OptionSpec kFrequency{"F,frequency", "HZ", "sample frequency per CPU (1-10000, default 99)", "Sampling"};
}  // namespace

const ToolSpec& tool_spec() {
  static const ToolSpec spec{
      "runqlen",
      "summarize CPU run queue length as a histogram, by sampling.",
      "Reports how many tasks wait for each CPU: the CPU's run queue (every scheduling\n"
      "class, whole CPU even inside cgroups) minus the task that is running. Idle CPUs\n"
      "take no samples; their idle time (from sched_switch) counts as length 0 at the\n"
      "sampling rate, so every CPU is weighted by time. With --cgroup or --container:\n"
      "how many of that cgroup's tasks wait for each CPU, counted from their wake-ups,\n"
      "preemptions and switches (any scheduling class, no cpu controller needed).",
      {
          opt::timestamp("include a timestamp on each interval report"),
          OptionSpec{"O,runqocc", "", "report run queue occupancy (% of samples with a queue)", "Output"},
          OptionSpec{"C,cpus", "", "show a separate histogram for each CPU", "Output"},
          kFrequency,
          opt::older_name("f", kFrequency),
          OptionSpec{"cfs", "", "BCC's view: the sampled task's own CFS queue only", "Sampling"},
          opt::cgroup(),
          opt::container(),
          opt::json("NDJSON: runqlen.all (runqlen.cpu per CPU with -C), then\n"
                    "runqlen.summary, per report"),
          opt::interval(),
          opt::count(),
          opt::duration(),
          opt::prometheus(),
          opt::listen(),
          opt::ebpf(),
          opt::help(),
      },
      "  runqlen            # summarize run queue length as a histogram, until Ctrl-C\n"
      "  runqlen 1 10       # print 1 second summaries, 10 times\n"
      "  runqlen -T 1       # 1s summaries with timestamps\n"
      "  runqlen -O 5       # run queue occupancy every 5 seconds\n"
      "  runqlen -C         # a histogram per CPU\n"
      "  runqlen --cgroup system.slice/nginx.service 5 1  # its tasks waiting\n"
      "  runqlen -F 999 -d 10   # sample at 999 Hz for 10 seconds\n"
      "  runqlen -j -i 1 -c 3   # three 1-second JSON reports\n"
      "  runqlen -i 5 --listen 9465 >/dev/null  # metrics at 127.0.0.1:9465/metrics\n",
      Positional::IntervalCount};
  return spec;
}

const char* help_text() { return help_cstr(tool_spec()); }

Result<Config> parse_args(int argc, char** argv) {
  auto r = parse_tool_cli(tool_spec(), argc, argv);
  if (!r) return Error{r.error()};
  const auto& raw = r->raw;
  Config c;
  c.help = r->common.help;
  if (c.help) return c;
  c.json = r->common.json;
  c.ebpf = r->common.ebpf;
  c.timestamp = r->common.timestamp;
  c.schedule = r->common.schedule;
  c.prometheus = r->common.prometheus;
  c.listen = r->common.listen;
  c.per_cpu = raw.count("cpus");
  c.occupancy = raw.count("runqocc");
  c.cfs_only = raw.count("cfs");
  auto cg = resolve_cgroup_options(r->common);
  if (!cg) return Error{cg.error()};
  c.cgroup = *cg;
  if (c.cgroup && c.cfs_only) return Error{"--cfs and --cgroup/--container exclude each other"};
  if (auto f = r->value("frequency")) {
    auto v = parse_uint(*f, "-F/--frequency", 1, 10000);
    if (!v) return Error{v.error()};
    c.freq_hz = *v;
  }
  return c;
}

// The registry's entry (common/registry.h): the option table, the parser and what each
// mode attaches.
const ToolEntry& registry_entry() {
  static const ToolEntry e{"runqlen", &tool_spec, &check_args<&parse_args>, {{"runqlen", {}, {"sched:sched_switch"}, true, false,
        "run queue length (perf cpu-clock samples + sched_switch raw tracepoint)"}},
      {{"", "--cfs"}}};
  return e;
}

// common.h pasted in: libbcc rewrites map calls only in the main file
std::string bpf_text() { return with_common_header(kBpf_runqlen[0].text); }

Result<BpfPlan> bpf_plan(const Config& c) {
  BpfPlan p;
  p.text = bpf_text();
  auto st = add_kernel_offsets(p, {
      {"OFF_TASK_PID", "task_struct", {"pid"}},
      {"OFF_TASK_SE", "task_struct", {"se"}},
      {"OFF_SE_CFS_RQ", "sched_entity", {"cfs_rq"}},
      {"OFF_CFS_RQ_RQ", "cfs_rq", {"rq"}},
      {"OFF_RQ_NR_RUNNING", "rq", {"nr_running"}},
      {"OFF_CFS_RQ_NR", "cfs_rq", {"nr_queued", "nr_running"}},
  });
  if (st) return Error{st->message};
  // optional: rq.clock_idle (CONFIG_SMP kernels since 6.1) dates an idle period whose
  // start was never seen; without it such a period is counted as dropped
  (void)add_kernel_offsets(p, {{"OFF_RQ_CLOCK", "rq", {"clock"}}, {"OFF_RQ_CLOCK_IDLE", "rq", {"clock_idle"}}});
  // optional: the fair class's count of queued tasks that are asleep (delayed dequeue,
  // 6.12+), left out of the queue length; without it such tasks count as waiting
  if (add_kernel_offsets(p, {{"OFF_RQ_CFS", "rq", {"cfs"}},
                             {"OFF_CFS_RQ_H_QUEUED", "cfs_rq", {"h_nr_queued"}},
                             {"OFF_CFS_RQ_H_RUNNABLE", "cfs_rq", {"h_nr_runnable"}}}))
    (void)add_kernel_offsets(p, {{"OFF_RQ_CFS", "rq", {"cfs"}}, {"OFF_CFS_RQ_H_DELAYED", "cfs_rq", {"h_nr_delayed"}}});
  if (c.cfs_only) p.flag("CFS_ONLY");
  if (c.cgroup) {
    if (auto cst = add_cgroup_filter(p, c.cgroup, true)) return Error{cst->message};
    if (auto cst = add_kernel_offsets(p, {{"OFF_TASK_ON_CPU", "task_struct", {"on_cpu"}},
                                          {"OFF_TASK_STATE", "task_struct", {"__state", "state"}}}))
      return Error{cst->message};
    // the task's CPU: task_struct.cpu (5.16+ with THREAD_INFO_IN_TASK: thread_info.cpu)
    if (add_kernel_offsets(p, {{"OFF_TASK_CPU", "task_struct", {"cpu"}}})) {
      auto k = kernel_btf();
      if (!k) return Error{k.error()};
      auto ti = (*k)->field_offset("task_struct", {"thread_info"});
      auto cpu = (*k)->field_offset("thread_info", {"cpu"});
      if (!ti || !cpu) return Error{"no task_struct.cpu or thread_info.cpu in the kernel's BTF"};
      p.integer("OFF_TASK_CPU", *ti + *cpu);
    }
    p.integer("CG_NCPUS", static_cast<uint64_t>(std::max(1, libbpf_num_possible_cpus())));
    p.integer("CG_QUEUED_SIZE", 65536);
  }
  return p;
}

const std::vector<CounterSlot>& counter_table() {
  static const std::vector<CounterSlot> table = {{RUNQLEN_CNT_READ_ERRORS, "read_errors"},
                                                 {RUNQLEN_CNT_IDLE_RECOVERED, "recovered_periods"},
                                                 {RUNQLEN_CNT_IDLE_DROPPED, "dropped_periods"},
                                                 {RUNQLEN_CNT_DELAYED_SAMPLES, "delayed_dequeue_samples"},
                                                 {RUNQLEN_CNT_DELAYED_TASKS, "delayed_dequeue_tasks"},
                                                 {RUNQLEN_CNT_CG_UNSEEN, "cgroup_unseen_switch_ins"},
                                                 {RUNQLEN_CNT_CG_FULL, "map_full"}};
  return table;
}

DataQuality empty_quality() { return DataQuality::with_keys(counter_keys(counter_table())); }

nlohmann::json effective_options(const Config& c) {
  nlohmann::json o = {{"per_cpu", c.per_cpu},
                      {"occupancy", c.occupancy},
                      {"view", c.cfs_only ? "cfs" : "cpu"},
                      {"frequency_hz", c.freq_hz}};
  if (c.schedule.interval_ns) o["interval_ns"] = *c.schedule.interval_ns;
  if (c.schedule.count) o["count"] = *c.schedule.count;
  if (c.schedule.duration_ns) o["duration_ns"] = *c.schedule.duration_ns;
  return o;
}

}  // namespace runqlen
