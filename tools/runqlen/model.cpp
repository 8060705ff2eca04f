// runqlen's model: time weighting of the samples and the statistics of a section.
#include <algorithm>
#include <cmath>

#include "common/histogram.h"
#include "tools/runqlen/runqlen.h"

namespace runqlen {

PerCpu weigh(const PerCpu& busy, const std::map<uint32_t, uint64_t>& idle_ns, uint64_t interval_ns,
             uint64_t freq_hz) {
  PerCpu out;
  for (auto& [cpu, h] : busy) out[cpu];
  for (auto& [cpu, ns] : idle_ns) out[cpu];
  const double per_ns = static_cast<double>(freq_hz) / 1e9;
  for (auto& [cpu, h] : out) {
    auto it = idle_ns.find(cpu);
    uint64_t idle = std::min(it == idle_ns.end() ? 0 : it->second, interval_ns);
    double busy_samples = static_cast<double>(interval_ns - idle) * per_ns;
    uint64_t taken = 0;
    auto b = busy.find(cpu);
    if (b != busy.end())
      for (auto& [len, n] : b->second) taken += n;
    if (taken)
      for (auto& [len, n] : b->second) {
        auto w = static_cast<uint64_t>(std::llround(static_cast<double>(n) * busy_samples / taken));
        if (w) h[len] += w;
      }
    auto z = static_cast<uint64_t>(std::llround(static_cast<double>(idle) * per_ns));
    if (z) h[0] += z;
  }
  return out;
}

Stats stats_of(const Hist& h) {
  Stats s;
  uint64_t queued = 0;
  for (auto& [len, n] : h) {
    s.samples += n;
    if (len > 0) queued += n;
    if (n) s.max = std::max(s.max, len);
  }
  s.avg = bpfdiag::linear_mean(h);
  s.p50 = bpfdiag::linear_percentile(h, 50);
  s.p99 = bpfdiag::linear_percentile(h, 99);
  s.occupancy_pct = s.samples ? 100.0 * static_cast<double>(queued) / static_cast<double>(s.samples) : 0.0;
  return s;
}

Hist merge_cpus(const PerCpu& samples) {
  Hist all;
  for (auto& [cpu, h] : samples)
    for (auto& [len, n] : h) all[len] += n;
  return all;
}

}  // namespace runqlen
