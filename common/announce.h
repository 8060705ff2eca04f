// The front-end side of bpf_sources/announce.h: each process a tool's BPF program
// announces (its first recorded stack, and again after an exec) is remembered in the
// symbolizer at once, its mappings read while it still runs; after an exec they are
// read again, and after each executable mmap (a library the dynamic linker or dlopen
// maps after the first stack was recorded); re-reads are coalesced: one, once the
// process has not been re-announced for kRereadAfterNs. Shared by the stack tools
// (offcputime, profile).
//
//   Announced ann(sym);
//   ann.open(session);                  // the "new_procs" perf buffer
//   ann.poll(session, timeout_ms);      // in the run loop's poll hook: waits for events
//   ann.take_refreshed()                // processes re-read after exec (unwind tables)
//   ann.lost()                          // announcements the perf buffer dropped
#pragma once
#include <cstdint>
#include <map>
#include <set>

#include "common/result.h"

namespace bpfdiag {

class BpfSession;
class Symbolizer;

constexpr uint64_t kRereadAfterNs = 20000000;  // a re-announced process quiet this long: re-read

class Announced {
 public:
  explicit Announced(Symbolizer& sym) : sym_(sym) {}
  Status open(BpfSession& session);
  // Waits up to timeout_ms for announcements and handles them; 0: only what is queued.
  void poll(BpfSession& session, int timeout_ms);
  std::set<uint32_t> take_refreshed() { return std::move(refreshed_); }
  uint64_t lost() const { return lost_; }

 private:
  static void on_event(void* cookie, void* data, int size);
  static void on_lost(void* cookie, uint64_t n);
  Symbolizer& sym_;
  std::set<uint32_t> refreshed_;
  std::map<uint32_t, uint64_t> stale_;  // re-announced: tgid -> when last (re-read after kRereadAfterNs)
  uint64_t lost_ = 0;
};

}  // namespace bpfdiag
