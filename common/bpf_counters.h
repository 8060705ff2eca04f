// The BPF side's data-quality counters (bpf_sources/common.h: the per-CPU array
// `dq_counters`, bumped with dq_count(SLOT)) mapped to data_quality keys by one table
// per tool, so no tool writes its own counter -> report code:
//
//   const std::vector<CounterSlot> kCounters = {{LS_CNT_MAP_FULL, "map_full"},
//                                               {LS_CNT_NO_STACK, "lost_stacks"},
//                                               {LS_CNT_BELOW_MIN, "below_min"}};
//   DataQuality dq = DataQuality::with_keys(counter_keys(kCounters));
//   add_bpf_counters(session, kCounters, dq);            // whole run
//   add_bpf_counters(session, kCounters, dq, &deltas);   // per interval
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/bpf_maps.h"
#include "common/report.h"
#include "common/result.h"


namespace bpfdiag {

class BpfSession;

struct CounterSlot {
  uint32_t slot;
  std::string key;  // a DataQuality key: a common one (lost_stacks, map_full, ...) or the tool's
};

// The tool-specific keys of a table (the common ones are always present anyway).
std::vector<std::string> counter_keys(const std::vector<CounterSlot>& table);

// Sums every slot of `dq_counters` over the CPUs and adds it to `dq` under its key;
// with `deltas`, only what was counted since the previous call. Also adds to
// lost_events the events the kernel did not run the session's attached programs for
// (bpf_prog_info.recursion_misses: an event that fired while a BPF program already ran
// on that CPU, e.g. a lock contended in an interrupt during one of our handlers).
Status add_bpf_counters(BpfSession& s, const std::vector<CounterSlot>& table, DataQuality& dq,
                        CounterDeltas* deltas = nullptr);

}  // namespace bpfdiag
