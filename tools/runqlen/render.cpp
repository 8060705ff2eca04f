// runqlen output: BCC's text layout (histogram, or occupancy) plus a summary line,
// or NDJSON records through the suite's envelope.
#include <cstdio>

#include "common/histogram.h"
#include "tools/runqlen/runqlen.h"

namespace runqlen {
using namespace bpfdiag;

namespace {

constexpr const char* kTool = "runqlen";

nlohmann::json section_json(const Config& c, const Hist& h) {
  nlohmann::json buckets = nlohmann::json::array();
  for (auto& [len, n] : h) buckets.push_back({{"min", len}, {"max", len}, {"count", n}});
  const Stats s = stats_of(h);
  return {{"view", c.cfs_only ? "cfs" : "cpu"},
          {"sample_count", s.samples},
          {"runqlen_avg", s.avg},
          {"runqlen_p50", s.p50},
          {"runqlen_p99", s.p99},
          {"runqlen_max", s.max},
          {"occupancy_pct", s.occupancy_pct},
          {"runqlen_hist", {{"buckets", buckets}}}};
}

void text_section(std::ostream& os, const Config& c, const Hist& h) {
  char line[160];
  const Stats s = stats_of(h);
  if (c.occupancy) {
    std::snprintf(line, sizeof line, "runqocc: %0.2f%%\n", s.occupancy_pct);
    os << line;
    return;
  }
  print_linear_hist(os, h, "runqlen");
  std::snprintf(line, sizeof line, "     avg %.2f, p50 %.0f, p99 %.0f, max %lld (%llu samples)\n", s.avg,
                s.p50, s.p99, static_cast<long long>(s.max), static_cast<unsigned long long>(s.samples));
  os << line;
}

void render_json(std::ostream& os, const Config& c, const PerCpu& samples, const DataQuality& dq,
                 const Window& w) {
  if (c.per_cpu)
    for (auto& [cpu, h] : samples) {
      nlohmann::json f = {{"cpu", cpu}};
      f.update(section_json(c, h));
      write_record(os, make_record(kTool, "cpu", w, f, dq));
    }
  const Hist all = merge_cpus(samples);
  write_record(os, make_record(kTool, "all", w, section_json(c, all), dq));
  const nlohmann::json totals = {{"view", c.cfs_only ? "cfs" : "cpu"},
                                 {"cpu_count", samples.size()},
                                 {"sample_count", stats_of(all).samples}};
  write_record(os, make_record(kTool, "summary", w, totals, dq));
}

}  // namespace

void render(std::ostream& os, const Config& c, const PerCpu& samples, const DataQuality& dq,
            const Window& w) {
  if (c.json) {
    render_json(os, c, samples, dq, w);
    return;
  }
  if (c.timestamp) os << clock_hms() << "\n";
  if (c.per_cpu) {
    for (auto& [cpu, h] : samples) {
      os << (c.occupancy ? "" : "\n") << "cpu = " << cpu << (c.occupancy ? " " : "\n");
      text_section(os, c, h);
    }
  } else {
    text_section(os, c, merge_cpus(samples));
  }
  os << dq.to_text() << "\n";
  os.flush();
}

}  // namespace runqlen
