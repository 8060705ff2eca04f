// Wait sites: the user stack each futex wait key was unwound at (the BPF side's `sites`
// map, one DWARF unwinding per thread and wait, bpf_sources/threadpool.bpf.c),
// symbolized and matched against the suite's wait-site rules (classify_site).
#include "common/symbolize.h"
#include "common/unwind_maps.h"
#include "tools/threadpool/tracer.h"

namespace threadpool {
using namespace bpfdiag;

WaitSites::WaitSites(BpfSession& bpf, bool enabled) : bpf_(bpf), enabled_(enabled) {}

WaitSites::~WaitSites() = default;

void WaitSites::update() {
  if (!enabled_) return;
  std::vector<std::pair<tp_wait_key, uint64_t>> fresh;
  try {
    for (auto& [k, h] : bpf_.get_hash_table<tp_wait_key, uint64_t>("sites").get_table_offline())
      if (tried_.insert({k.tid, WaitKey{k.nr, k.op, k.obj}}).second) fresh.push_back({k, h});
  } catch (...) {
    return;
  }
  if (fresh.empty()) return;
  if (!sym_) sym_ = std::make_unique<Symbolizer>();
  const UnwoundStacks stacks = read_unwound_stacks(bpf_);
  for (auto& [k, h] : fresh) {
    const std::pair<uint32_t, WaitKey> key{k.tid, WaitKey{k.nr, k.op, k.obj}};
    const uint32_t tgid = tgid_of_(k.tid);
    bool found = false;
    std::vector<std::string> frames;
    if (tgid) {
      sym_->remember(tgid);
      frames = symbolize_unwound(stacks, h, *sym_, tgid, &found);
    }
    if (!found) continue;  // not stored (uw_stacks full) or its process unknown: no site
    read_[key] = classify_site(frames);
  }
}

}  // namespace threadpool
