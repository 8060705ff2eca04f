// runqlen: CPU run queue length, sampled by perf events.
#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"

namespace runqlen {

struct Config {
  bool help = false;
  bool per_cpu = false;    // -C
  bool occupancy = false;  // -O
  bool timestamp = false;  // -T
  bool cfs_only = false;   // --cfs: BCC's view (the task's own cfs_rq)
  bool json = false;
  bool ebpf = false;
  uint64_t freq_hz = 99;   // -f
  bpfdiag::Schedule schedule;
};

extern const char kHelp[];

bpfdiag::Result<Config> parse_args(int argc, char** argv);

// BPF program text and the cflags (BTF offsets) it is compiled with.
std::string bpf_text();
bpfdiag::Result<std::vector<std::string>> bpf_cflags(const Config& c);

// One interval's samples: queue length -> count, per CPU.
using PerCpu = std::map<uint32_t, std::map<int64_t, uint64_t>>;

// Renders one report section (text or NDJSON) to `os`.
void render(std::ostream& os, const Config& c, const PerCpu& samples,
            const bpfdiag::DataQuality& dq, uint64_t interval_ns, bool final);

bpfdiag::Status run(const Config& c);

}  // namespace runqlen
