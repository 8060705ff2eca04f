// Processes announced by a tool's BPF program: see announce.h.
#include "common/announce.h"

#include <cstring>

#include "common/bpf_session.h"
#include "common/runloop.h"
#include "common/symbolize.h"

namespace bpfdiag {

Status Announced::open(BpfSession& session) {
  return session.open_perf_buffer("new_procs", &Announced::on_event, &Announced::on_lost, this, 16);
}

void Announced::poll(BpfSession& session, int timeout_ms) { session.poll_perf_buffer("new_procs", timeout_ms); }

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
    self->sym_.refresh(tgid);  // announced again after exec or an executable mmap
    self->refreshed_.insert(tgid);
  } else {
    self->sym_.remember(tgid);
  }
}

void Announced::on_lost(void* cookie, uint64_t n) { static_cast<Announced*>(cookie)->lost_ += n; }

}  // namespace bpfdiag
