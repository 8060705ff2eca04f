// Processes announced by a tool's BPF program: see announce.h.
#include "common/announce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/bpf_session.h"
#include "common/runloop.h"
#include "common/symbolize.h"

namespace bpfdiag {

Status Announced::open(BpfSession& session) {
  return session.open_perf_buffer("new_procs", &Announced::on_event, &Announced::on_lost, this, 16);
}

void Announced::poll(BpfSession& session, int timeout_ms) {
  if (!stale_.empty() && timeout_ms > 0) {  // wake for the first re-read due
    uint64_t first = UINT64_MAX, now = monotonic_ns();
    for (const auto& [tgid, at] : stale_) first = std::min(first, at + kRereadAfterNs);
    timeout_ms = first <= now ? 0 : static_cast<int>(std::min<uint64_t>(timeout_ms, (first - now) / 1000000 + 1));
  }
  session.poll_perf_buffer("new_procs", timeout_ms);
  // re-reads, coalesced: a starting process is announced again at its exec and at each
  // library the dynamic linker maps (a fork storm: ~4 per process); one re-read once it
  // has been quiet for kRereadAfterNs covers them all, and a stop signal skips them
  const uint64_t now = monotonic_ns();
  for (auto it = stale_.begin(); it != stale_.end() && !stop_signal();) {
    if (now - it->second < kRereadAfterNs) {
      ++it;
      continue;
    }
    if (sym_.refresh(it->first)) refreshed_.insert(it->first);  // gone: its first snapshot stays
    it = stale_.erase(it);
  }
}

void Announced::on_event(void* cookie, void* data, int size) {
  if (size < static_cast<int>(sizeof(uint32_t))) return;
  uint32_t tgid;
  std::memcpy(&tgid, data, sizeof tgid);
  auto* self = static_cast<Announced*>(cookie);
  // A stop signal wants the final report now: announcements still queued are not
  // loaded here (ci28, stress-ng and a fork storm: one poll's queue took 1.0 s between
  // the signal and the loop seeing it); the report loads what its stacks need, within
  // its budget
  if (stop_signal()) return;
  if (self->sym_.remembered(tgid)) {
    self->stale_[tgid] = monotonic_ns();  // announced again after exec or an executable mmap
  } else {
    self->sym_.remember(tgid);
  }
}

void Announced::on_lost(void* cookie, uint64_t n) { static_cast<Announced*>(cookie)->lost_ += n; }

}  // namespace bpfdiag
