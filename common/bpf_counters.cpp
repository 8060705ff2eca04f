#include "common/bpf_counters.h"

#include "common/bpf_session.h"

namespace bpfdiag {

namespace {
constexpr size_t kRecursionSlot = 1u << 16;  // a CounterDeltas slot no table uses
}  // namespace

std::vector<std::string> counter_keys(const std::vector<CounterSlot>& table) {
  std::vector<std::string> keys;
  for (auto& c : table)
    if (!DataQuality::is_common_key(c.key)) keys.push_back(c.key);
  return keys;
}

Status add_bpf_counters(BpfSession& s, const std::vector<CounterSlot>& table, DataQuality& dq,
                        CounterDeltas* deltas) {
  auto arr = s.get_percpu_array_table<uint64_t>("dq_counters");
  for (auto& c : table) {
    std::vector<uint64_t> per_cpu;
    auto st = arr.get_value(static_cast<int>(c.slot), per_cpu);
    if (!st.ok()) return Error{"cannot read the BPF counters: " + st.msg()};
    uint64_t sum = 0;
    for (auto v : per_cpu) sum += v;
    dq.add(c.key, deltas ? deltas->delta(c.slot, sum) : sum);
  }
  uint64_t missed = s.recursion_misses();
  dq.add("lost_events", deltas ? deltas->delta(kRecursionSlot, missed) : missed);
  return std::nullopt;
}

}  // namespace bpfdiag
