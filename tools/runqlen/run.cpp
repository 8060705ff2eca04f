// runqlen runtime: load, attach the sampler and the idle accounting, report per interval.
#include <bcc/BPF.h>
#include <linux/perf_event.h>
#include <sched.h>

#include <iostream>

#include "common/bpf_maps.h"
#include "common/proc.h"
#include "common/tool.h"
#include "tools/runqlen/runqlen.h"

extern "C" {
#include <linux/types.h>

#include "runqlen_shared.h"
}

namespace runqlen {
using namespace bpfdiag;

namespace {

// Moves the calling thread over every online CPU once, so each CPU passes through
// sched_switch and the BPF side knows from then on whether it is idle.
void visit_every_cpu() {
  cpu_set_t saved;
  if (sched_getaffinity(0, sizeof saved, &saved) != 0) return;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &saved)) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof one, &one);  // migrates now: a switch on that CPU
  }
  sched_setaffinity(0, sizeof saved, &saved);
}

// Reads the cumulative BPF maps and hands out what happened since the previous read.
class Reader {
 public:
  explicit Reader(BpfSession& bpf)
      : dist_(bpf.get_percpu_array_table<uint64_t>("dist")),
        idle_(bpf.get_percpu_array_table<runqlen_idle>("idle")) {}

  // Busy-time samples and idle time per CPU since the previous call; returns now.
  uint64_t take(PerCpu& samples, std::map<uint32_t, uint64_t>& idle_ns) {
    uint64_t now = monotonic_ns();
    for (int cpu = 0; cpu < online_cpus(); ++cpu) samples[cpu];  // idle CPUs are reported too
    auto cumulative = dist_.get_table_offline();                 // [len][cpu]
    for (size_t len = 0; len < cumulative.size(); ++len)
      for (size_t cpu = 0; cpu < cumulative[len].size(); ++cpu) {
        uint64_t d = dist_deltas_.delta(len * cumulative[len].size() + cpu, cumulative[len][cpu]);
        if (d) samples[static_cast<uint32_t>(cpu)][static_cast<int64_t>(len)] += d;
      }
    std::vector<runqlen_idle> per_cpu;
    if (idle_.get_value(0, per_cpu).ok())
      for (size_t cpu = 0; cpu < per_cpu.size(); ++cpu) {
        const auto& st = per_cpu[cpu];
        uint64_t total = st.idle_ns + (st.idle_since && now > st.idle_since ? now - st.idle_since : 0);
        idle_ns[static_cast<uint32_t>(cpu)] = idle_deltas_.delta(cpu, total);
      }
    return now;
  }

 private:
  ebpf::BPFPercpuArrayTable<uint64_t> dist_;
  ebpf::BPFPercpuArrayTable<runqlen_idle> idle_;
  CounterDeltas dist_deltas_, idle_deltas_;  // the maps only grow: reports show increases
};

}  // namespace

Status run(const Config& c) {
  auto plan = bpf_plan(c);
  if (!plan) return Error{plan.error()};
  auto loaded = load_tool(ToolPlan{"runqlen", *plan, c.ebpf});
  if (!loaded) return Error{loaded.error()};
  if (!*loaded) return std::nullopt;  // --ebpf
  BpfSession& session = **loaded;
  if (auto st = session.attach_perf_event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, "do_perf_event",
                                          c.freq_hz))
    return st;
  if (auto st = session.attach_raw_tracepoint("sched_switch", "raw_tracepoint__sched_switch"))
    return st;  // one line: a verifier rejection, or the attach failure with its hint
  if (c.cgroup)  // the cgroup's waiting tasks, counted (runqlen.bpf.c)
    for (const char* tp : {"sched_wakeup", "sched_wakeup_new", "sched_migrate_task"})
      if (auto st = session.attach_raw_tracepoint(tp, std::string("raw_tracepoint__") + tp)) return st;
  attach_phase_done();
  visit_every_cpu();

  Reader reader(session);
  CounterDeltas counter_deltas;
  uint64_t last;
  {  // what happened before every CPU's state was known is not reported
    PerCpu s;
    std::map<uint32_t, uint64_t> i;
    last = reader.take(s, i);
    DataQuality ignored = empty_quality();
    if (auto st = add_bpf_counters(session, counter_table(), ignored, &counter_deltas)) return st;
  }
  nlohmann::json start = {{"probes", c.cgroup ? 5 : 2}, {"options", effective_options(c)}};
  if (c.cgroup) start["cgroup"] = cgroup_json(c.cgroup);
  announce_attached(std::cout, "runqlen", c.json,
                    "Sampling run queue length" + (c.cgroup ? " of tasks" + cgroup_banner(c.cgroup) : std::string()) +
                        "... Hit Ctrl-C to end.",
                    start, empty_quality());
  Status failure;
  ToolMetrics metrics("runqlen");  // --prometheus/--listen
  if (metrics.enabled()) metrics.publish_start(empty_quality());
  RunHooks hooks;
  hooks.report = [&](bool final) {
    PerCpu busy;
    std::map<uint32_t, uint64_t> idle_ns;
    uint64_t now = reader.take(busy, idle_ns);
    PerCpu samples = weigh(busy, idle_ns, now - last, c.freq_hz);
    DataQuality dq = empty_quality();
    if (auto st = add_bpf_counters(session, counter_table(), dq, &counter_deltas)) failure = st;
    if (!c.json && c.schedule.interval_ns && !c.timestamp && !c.per_cpu) std::cout << "\n";
    render(std::cout, c, samples, dq, window_ending_now(now - last, final));
    if (metrics.enabled()) {
      add_report_metrics(metrics.set(), samples);
      metrics.add_data_quality(dq);
      metrics.publish(final);
    }
    last = now;
  };
  TargetWatch system_wide({});
  if (auto st = run_tool_loop(c.schedule, hooks, system_wide)) return st;
  return failure;
}

}  // namespace runqlen
