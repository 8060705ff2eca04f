// Reading back the stack ids that bpf_sources/stacks.h's bpfdiag_stack_id() stored, for
// every stack tool (offcputime, profile, pmheld, lockstat): an id is either the
// kernel's stack table (`stack_traces`) or, with BPFDIAG_OVERFLOW_BIT, the collision
// overflow map (`overflow_ids`, keyed by the frames). Unwound (--unwind=dwarf) user
// stacks are common/unwind_maps' (uw_stacks, by hash).
//
// Data quality, the same for every tool: a stack the BPF side could not store (id < 0
// other than -EFAULT) was counted there, in the tool's own lost slot; the reader counts
// in dq->lost_stacks only the stacks whose id was stored but whose frames are gone
// when read (cleared or evicted between capture and report).
//
// PUBLIC API:
//   StackReader r = StackReader::from_session(session);  // per report: snapshot
//   r.addrs(id)                        -> raw addresses, innermost first
//   r.resolve(sym, tgid, uid, kid, parts, &dq) -> symbolized Stack
//   clear_stacks(session, keep)        // between intervals: both maps, ids in keep stay
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "common/report.h"
#include "common/stacks.h"
#include "common/symbolize.h"

namespace bpfdiag {

class BpfSession;

// What a stack id means.
enum class StackIdKind {
  None,      // -EFAULT: no such part (a kernel thread's user stack); not a loss
  Lost,      // another negative errno: not stored (counted by the BPF side)
  Table,     // in the stack table
  Overflow,  // in the overflow map (BPFDIAG_OVERFLOW_BIT set)
};
StackIdKind stack_id_kind(int64_t id);
// The overflow map's value for an overflow id (the bit cleared).
uint32_t overflow_index(int64_t id);

// One part (user or kernel) of a stack as read back.
struct StackPart {
  std::vector<uint64_t> addrs;
  bool missing = false;  // wanted, not there: lost in BPF, or gone from the maps
  bool vanished = false; // of those: stored in BPF but gone when read (dq lost_stacks)
};

class StackReader {
 public:
  using TableLookup = std::function<std::vector<uint64_t>(int32_t id)>;
  using Overflow = std::map<uint32_t, std::vector<uint64_t>>;  // index -> frames
  StackReader(TableLookup table, Overflow overflow)
      : table_(std::move(table)), overflow_(std::move(overflow)) {}
  // The session's stack table and a snapshot of its overflow map (empty when the
  // program has none, e.g. pmheld -S).
  static StackReader from_session(const BpfSession& bpf);

  // Raw addresses of a stack id, innermost first (empty: none, lost or gone).
  std::vector<uint64_t> addrs(int64_t id) const;
  // One part: `lost_is_missing` false for the idle task's user part (nothing to lose).
  StackPart part(int64_t id, bool lost_is_missing = true) const;
  // Both parts, symbolized (user frames in process `tgid`); the innermost frames of the
  // tracing path are dropped from the kernel part. Vanished parts count in
  // dq->lost_stacks (if dq is given).
  Stack resolve(Symbolizer& sym, uint32_t tgid, int64_t user_id, int64_t kernel_id, StackParts parts,
                DataQuality* dq) const;
  size_t overflow_size() const { return overflow_.size(); }

 private:
  TableLookup table_;
  Overflow overflow_;
};

// Deletes every entry of the stack table and the overflow map except the ids in
// `keep` (overflow ids with their bit). Tools that report per interval call it after a
// report, keeping the ids still referenced by counts recorded since: neither map is
// ever emptied by the kernel, and once both are full every new stack is lost.
// Returns how many entries were deleted.
size_t clear_stacks(const BpfSession& bpf, const std::set<int32_t>& keep = {});

}  // namespace bpfdiag
