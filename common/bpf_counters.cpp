#include "common/bpf_counters.h"

#include <bcc/BPF.h>
#include <bpf/bpf.h>

#include <map>
#include <mutex>
#include <set>

namespace bpfdiag {

namespace {
constexpr size_t kRecursionSlot = 1u << 16;  // a CounterDeltas slot no table uses
std::mutex programs_mu;
std::map<const ebpf::BPF*, std::set<int>>& programs() {
  static std::map<const ebpf::BPF*, std::set<int>> p;
  return p;
}
}  // namespace

void note_attached_program(const ebpf::BPF& bpf, int prog_fd) {
  if (prog_fd < 0) return;
  std::lock_guard<std::mutex> l(programs_mu);
  programs()[&bpf].insert(prog_fd);
}

void forget_attached_programs(const ebpf::BPF& bpf) {
  std::lock_guard<std::mutex> l(programs_mu);
  programs().erase(&bpf);
}

uint64_t recursion_misses(const ebpf::BPF& bpf) {
  std::lock_guard<std::mutex> l(programs_mu);
  uint64_t sum = 0;
  auto it = programs().find(&bpf);
  if (it == programs().end()) return 0;
  for (int fd : it->second) {
    struct bpf_prog_info info = {};
    __u32 len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) sum += info.recursion_misses;
  }
  return sum;
}

std::vector<std::string> counter_keys(const std::vector<CounterSlot>& table) {
  std::vector<std::string> keys;
  for (auto& c : table)
    if (!DataQuality::is_common_key(c.key)) keys.push_back(c.key);
  return keys;
}

Status add_bpf_counters(ebpf::BPF& bpf, const std::vector<CounterSlot>& table, DataQuality& dq,
                        CounterDeltas* deltas) {
  auto arr = bpf.get_percpu_array_table<uint64_t>("dq_counters");
  for (auto& c : table) {
    std::vector<uint64_t> per_cpu;
    auto st = arr.get_value(static_cast<int>(c.slot), per_cpu);
    if (!st.ok()) return Error{"cannot read the BPF counters: " + st.msg()};
    uint64_t sum = 0;
    for (auto v : per_cpu) sum += v;
    dq.add(c.key, deltas ? deltas->delta(c.slot, sum) : sum);
  }
  uint64_t missed = recursion_misses(bpf);
  dq.add("lost_events", deltas ? deltas->delta(kRecursionSlot, missed) : missed);
  return std::nullopt;
}

}  // namespace bpfdiag
