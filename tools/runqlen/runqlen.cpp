#include "tools/runqlen/runqlen.h"

#include <bcc/BPF.h>
#include <linux/perf_event.h>
#include <linux/types.h>

#include <cstdio>
#include <iostream>

#include "common/bpf_maps.h"
#include "common/bpf_session.h"
#include "common/btf.h"
#include "common/cli.h"
#include "common/embedded.h"
#include "common/histogram.h"

extern "C" {
#include "runqlen_shared.h"
}

namespace bpfdiag {
extern const EmbeddedFile kBpf_runqlen[];
}

namespace runqlen {
using namespace bpfdiag;

const char kHelp[] = R"(runqlen - summarize CPU run queue length as a histogram, by sampling.

USAGE: runqlen [-h] [-T] [-O] [-C] [-f HZ] [--cfs] [-j] [--ebpf] [interval [count]]

Reports how many tasks wait for each CPU: the CPU's run queue (every scheduling
class, whole CPU even inside cgroups) minus the task that is running.

OPTIONS:
  -C, --cpus        show a separate histogram for each CPU
  -O, --runqocc     report run queue occupancy (% of samples with a queue)
  -T, --timestamp   include a timestamp on each interval report
  -f, --frequency HZ  sample frequency per CPU (1-10000, default 99)
      --cfs         BCC's view: the sampled task's own CFS queue only
  -j, --json        NDJSON output: one record per interval and CPU section
      --ebpf        print the BPF program and exit
  -h, --help        show this help

EXAMPLES:
  runqlen            # summarize run queue length as a histogram, until Ctrl-C
  runqlen 1 10       # print 1 second summaries, 10 times
  runqlen -T 1       # 1s summaries with timestamps
  runqlen -O 5       # run queue occupancy every 5 seconds
  runqlen -C         # a histogram per CPU
  runqlen -j 1 3     # three 1-second JSON records
)";

Result<Config> parse_args(int argc, char** argv) {
  cxxopts::Options opts("runqlen");
  opts.add_options()("h,help", "")("C,cpus", "")("O,runqocc", "")("T,timestamp", "")(
      "f,frequency", "", cxxopts::value<std::string>())("cfs", "")("j,json", "")("ebpf", "");
  add_positionals(opts);
  auto r = parse_cli(opts, argc, argv);
  if (!r) return Error{r.error()};
  Config c;
  c.help = r->count("help");
  c.per_cpu = r->count("cpus");
  c.occupancy = r->count("runqocc");
  c.timestamp = r->count("timestamp");
  c.cfs_only = r->count("cfs");
  c.json = r->count("json");
  c.ebpf = r->count("ebpf");
  if (auto f = opt_str(*r, "frequency")) {
    auto v = parse_uint(*f, "frequency", 1, 10000);
    if (!v) return Error{v.error()};
    c.freq_hz = *v;
  }
  if (auto st = parse_interval_count(positionals(*r), c.schedule)) return *st;
  return c;
}

std::string bpf_text() { return kBpf_runqlen[0].text; }

Result<std::vector<std::string>> bpf_cflags(const Config& c) {
  auto flags = kernel_offset_cflags({
      {"OFF_TASK_SE", "task_struct", {"se"}},
      {"OFF_SE_CFS_RQ", "sched_entity", {"cfs_rq"}},
      {"OFF_CFS_RQ_RQ", "cfs_rq", {"rq"}},
      {"OFF_RQ_NR_RUNNING", "rq", {"nr_running"}},
      {"OFF_CFS_RQ_NR", "cfs_rq", {"nr_queued", "nr_running"}},
  });
  if (!flags) return Error{flags.error()};
  if (c.cfs_only) flags.value().push_back("-DCFS_ONLY");
  return flags;
}

namespace {

double occupancy_pct(const std::map<int64_t, uint64_t>& h) {
  uint64_t total = 0, queued = 0;
  for (auto& [len, n] : h) {
    total += n;
    if (len > 0) queued += n;
  }
  return total ? 100.0 * queued / total : 0.0;
}

nlohmann::json section_json(const std::map<int64_t, uint64_t>& h) {
  nlohmann::json buckets = nlohmann::json::array();
  uint64_t samples = 0;
  int64_t maxlen = 0;
  for (auto& [len, n] : h) {
    buckets.push_back({{"min", len}, {"max", len}, {"count", n}});
    samples += n;
    maxlen = std::max(maxlen, len);
  }
  return {{"samples", samples},
          {"mean", linear_mean(h)},
          {"p50", linear_percentile(h, 50)},
          {"p99", linear_percentile(h, 99)},
          {"max", maxlen},
          {"occupancy_pct", occupancy_pct(h)},
          {"hist", {{"buckets", buckets}}}};
}

void text_section(std::ostream& os, const Config& c, const std::map<int64_t, uint64_t>& h) {
  char line[160];
  if (c.occupancy) {
    std::snprintf(line, sizeof line, "runqocc: %0.2f%%\n", occupancy_pct(h));
    os << line;
    return;
  }
  print_linear_hist(os, h, "runqlen");
  uint64_t samples = 0;
  for (auto& [len, n] : h) samples += n;
  std::snprintf(line, sizeof line, "     avg %.2f, p50 %.0f, p99 %.0f, max %lld (%llu samples)\n",
                linear_mean(h), linear_percentile(h, 50), linear_percentile(h, 99),
                h.empty() ? 0LL : static_cast<long long>(h.rbegin()->first),
                static_cast<unsigned long long>(samples));
  os << line;
}

}  // namespace

void render(std::ostream& os, const Config& c, const PerCpu& samples, const DataQuality& dq,
            uint64_t interval_ns, bool final) {
  std::map<int64_t, uint64_t> all;
  for (auto& [cpu, h] : samples)
    for (auto& [len, n] : h) all[len] += n;
  if (c.json) {
    nlohmann::json base = {{"type", "runqlen"},
                           {"time_ns", realtime_ns()},
                           {"interval_ns", interval_ns},
                           {"final", final},
                           {"view", c.cfs_only ? "cfs" : "cpu"},
                           {"data_quality", dq.to_json()}};
    if (c.per_cpu) {
      for (auto& [cpu, h] : samples) {
        auto rec = base;
        rec["cpu"] = cpu;
        rec.update(section_json(h));
        emit_json(os, rec);
      }
    } else {
      base["cpu"] = "all";
      base.update(section_json(all));
      emit_json(os, base);
    }
    return;
  }
  if (c.timestamp) os << clock_hms() << "\n";
  if (c.per_cpu) {
    for (auto& [cpu, h] : samples) {
      os << (c.occupancy ? "" : "\n") << "cpu = " << cpu << (c.occupancy ? " " : "\n");
      text_section(os, c, h);
    }
  } else {
    text_section(os, c, all);
  }
  os << dq.to_text() << "\n";
  os.flush();
}

Status run(const Config& c) {
  auto flags = bpf_cflags(c);
  if (!flags) return Error{flags.error()};
  if (c.ebpf) {
    std::cout << ebpf_listing(bpf_text(), *flags);
    return std::nullopt;
  }
  if (auto st = preflight({})) return st;
  auto s = BpfSession::load(bpf_text(), *flags);
  if (!s) return Error{s.error()};
  auto& session = *s.value();
  if (auto st = session.attach_perf_event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK,
                                          "do_perf_event", c.freq_hz))
    return st;
  if (!c.json)
    std::cout << "Sampling run queue length... Hit Ctrl-C to end." << std::endl;

  auto dist = session.bpf().get_percpu_array_table<uint64_t>("dist");
  auto errors = session.bpf().get_percpu_array_table<uint64_t>("errors");
  // The BPF counters only grow; each report shows the increase since the last one.
  CounterDeltas deltas, error_deltas;
  uint64_t last = monotonic_ns();
  RunHooks hooks;
  hooks.report = [&](bool final) {
    PerCpu samples;
    auto cumulative = dist.get_table_offline();  // [len][cpu]
    for (size_t len = 0; len < cumulative.size(); ++len)
      for (size_t cpu = 0; cpu < cumulative[len].size(); ++cpu) {
        uint64_t d = deltas.delta(len * cumulative[len].size() + cpu, cumulative[len][cpu]);
        if (d) samples[static_cast<uint32_t>(cpu)][static_cast<int64_t>(len)] += d;
      }
    DataQuality dq;
    uint64_t err = 0;
    std::vector<uint64_t> per_cpu_err;
    if (errors.get_value(0, per_cpu_err).ok())
      for (auto e : per_cpu_err) err += e;
    dq.extra["read_errors"] = error_deltas.delta(0, err);
    uint64_t now = monotonic_ns();
    if (!c.json && c.schedule.interval_ns && !c.timestamp && !c.per_cpu) std::cout << "\n";
    render(std::cout, c, samples, dq, now - last, final);
    last = now;
  };
  run_loop(c.schedule, hooks);
  return std::nullopt;
}

}  // namespace runqlen
