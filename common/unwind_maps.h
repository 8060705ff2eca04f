// Per-process unwinding state for bpf_sources/unwind.h: each traced process's
// executable file mappings (with load bias) and the unwind tables of the files they
// map (common/unwind_tables, one copy per build-id), written into the BPF maps
// uw_rows / uw_maps / uw_procs; reading unwound stacks (uw_stacks) back; the --unwind option.
//
// PUBLIC API:
//   UnwindMaps uw;
//   load_unwinding_tool(plan, &uw, {pids, tids, "uw_<tool>_tail", type, ""});
//     = uw.prepare(pids, tids, ebpf, plan) (tables, UW_* defines) + load_tool
//       + uw.start(session, fn, type) (maps + unwinder program)
//   text = with_unwind_header(text);                // pastes unwind.h (libbcc rule)
//   fields["unwind_tables"] = uw.start_fields();    // what the tables cost
//   uw.refresh(bpf, tgid);                          // after exec / dlopen
//   UnwoundStacks st = read_unwound_stacks(bpf);    // hash -> pcs + status
//   uw.add_dq(bpf, dq, &deltas);                    // ustack_* data_quality keys
// (prepare = add_process per target + plan defines; start = fill + install.)
#pragma once
#include <linux/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/bpf_maps.h"
#include "common/bpf_plan.h"
#include "common/bpf_session.h"
#include "common/cli.h"
#include "common/report.h"
#include "common/result.h"
#include "common/symbolize.h"
#include "common/tool.h"
#include "common/unwind_tables.h"

namespace bpfdiag {
class BpfSession;
}

namespace bpfdiag {

// --unwind=fp|dwarf for a tool that builds tables per target process: true for dwarf,
// the default with targets (-p/-t); an explicit dwarf without targets is an error.
Result<bool> unwind_dwarf_option(const cxxopts::ParseResult& raw, bool have_targets);

// `text` with its `#include "unwind.h"` line replaced by bpf_sources/unwind.h.
std::string with_unwind_header(const std::string& text);

// Caps on unwind table rows (8 bytes each; issue 19): the tables one process uses
// together, and all tables in uw_rows. Measured here: libc 28k rows, python3.11 65k,
// mariadbd 150k, libjvm 191k (JDK 17) and 231k (JDK 25), so a JVM or MariaDB process
// needs under 0.5M: the per-process cap leaves 8x room. When a cap bites, the
// executable and the C runtime keep theirs first (then files by how much code they
// map); the mappings left without a table are counted (ustack_tables_capped) and named
// in one warning line per process. A table over the budget by its .eh_frame_hdr FDE
// count (at least one row each) is not even built.
constexpr uint64_t kMaxProcessRows = 4ULL << 20;  // 32 MiB
constexpr uint64_t kMaxTotalRows = 8ULL << 20;    // 64 MiB (uw_rows gets up to 1.5x for later mappings)

// Which unwinder program a tool installs, and for whom (--unwind=dwarf).
struct UnwinderPlan {
  std::vector<uint32_t> pids, tids;  // the targets whose tables are built before the load
  std::string fn;                    // the tool's program the walk ends in, e.g. "uw_profile_tail"
  int prog_type = 0;                 // its program type (that of the handlers calling it)
  std::string after;                 // the program it tail-calls in turn ("" for none)
};

class UnwindMaps;
// The stack tools' load: with `uw` (--unwind=dwarf) the targets' tables are built first
// (their sizes become BPF constants in `plan`), then the program is loaded and the
// unwinder installed in its tail-call table; without, load_tool() alone. A null session
// with success means --ebpf (the listing was printed).
[[nodiscard]] Result<std::unique_ptr<BpfSession>> load_unwinding_tool(ToolPlan plan, UnwindMaps* uw,
                                                                       const UnwinderPlan& unwinder);

// data_quality keys added by dwarf mode (always present in every stack tool's records).
const std::vector<std::string>& unwind_dq_keys();

struct UnwindStats {
  uint64_t processes = 0, mappings = 0, binaries = 0, binaries_without_cfi = 0;
  uint64_t rows = 0, table_bytes = 0;
  double build_ms = 0, fill_ms = 0;
  uint64_t verified_insns = 0;  // the unwinder's walk programs', as the verifier counted them
  double verify_ms = 0;         // their load (verification) time
};

class UnwindMaps {
 public:
  explicit UnwindMaps(uint32_t max_depth = 64) : max_depth_(max_depth) {}
  // Before load: the tables of the target processes (-p PIDs and the processes of the
  // -t TIDs; none with --ebpf), then the maps' sizes and offsets added to `plan`.
  Status prepare(const std::vector<uint32_t>& pids, const std::vector<uint32_t>& tids, bool ebpf,
                 BpfPlan& plan);
  // After load, before attaching the handlers: fill(), then install(); `after`, when
  // given, is the program the unwinder tail-calls in turn (slot UW_PROG_AFTER).
  Status start(BpfSession& session, const std::string& fn, int prog_type, const std::string& after = "");
  // The start record's "unwind_tables": what the tables cost at startup.
  nlohmann::json start_fields() const;
  // The ustack_* counters (uw_stacks full as lost_stacks), binaries_without_cfi, the
  // caps' counts (ustack_maps_capped, ustack_tables_capped) and binaries_refused (ELF
  // files refused by check_elf_headers in this process, the symbolizer's included).
  Status add_dq(BpfSession& bpf, DataQuality& dq, CounterDeltas* deltas) const;
  // Re-reads tgid's mappings (exec, dlopen) and writes what changed.
  Status refresh(BpfSession& bpf, uint32_t tgid);
  // Loads the unwinder's walk programs `begin` and `step` (bpf_sources/unwind.h) as
  // `prog_type` into the prog array `progs` (slots UW_PROG_UNWIND, UW_PROG_WALK); their
  // verification counts in start_fields(). start() does it for uw_progs; a tool with
  // handlers of a second program type calls it for its own array.
  Status install_walk(BpfSession& session, const std::string& progs, const std::string& begin,
                      const std::string& step, int prog_type);

 private:
  // Reads /proc/TGID/maps and builds the tables of its executable file mappings.
  // False when the process is gone.
  bool add_process(uint32_t tgid);
  // BPF defines (call once, after the first add_process calls): sizes and offsets.
  Status add_defines(BpfPlan& plan);
  // Writes every row and process not yet in the maps.
  Status fill(BpfSession& bpf);
  // Loads the tool's program `fn` (of the handler's type: the one that takes the walk
  // with uw_unwind_user, or what that tail-calls in turn) and puts it in uw_progs[slot],
  // where the tail calls find it. Before attaching the handler.
  Status install(BpfSession& session, const std::string& fn, int prog_type, int slot);

  struct Placed {
    uint32_t lo = 0, n = 0;
  };
  struct ProcessCaps {
    uint64_t maps_left = 0;    // executable mappings beyond UW_MAX_MAPS (ustack_maps_capped)
    uint64_t tables_left = 0;  // mappings left without their table by a row cap (ustack_tables_capped)
  };
  uint32_t max_depth_;
  uint64_t capacity_ = 0;                // uw_rows entries (0: add_defines() not called yet)
  uint64_t proc_capacity_ = 0;           // processes uw_maps holds (blocks of UW_MAX_MAPS)
  std::map<uint32_t, uint32_t> slots_;   // tgid -> its block in uw_maps
  std::vector<uw_row> rows_;             // every placed row, back to back
  size_t rows_written_ = 0;              // rows_[0, rows_written_) are in uw_rows
  std::map<const UnwindTable*, Placed> placed_;
  std::vector<std::shared_ptr<const UnwindTable>> keep_;
  std::map<uint32_t, std::vector<uw_map>> procs_;
  std::map<uint32_t, bool> dirty_;
  std::map<uint32_t, ProcessCaps> caps_;
  std::set<std::string> placed_files_;    // identities of files whose table is in rows_  // as of each process's last add_process
  UnwindTableCache cache_;
  UnwindStats stats_;
};

// An unwound stack as stored by uw_unwind_user: pcs innermost first, status.
struct UnwoundStack {
  std::vector<uint64_t> pcs;
  uint32_t status = UW_ST_END;
};
using UnwoundStacks = std::map<uint64_t, UnwoundStack>;
UnwoundStacks read_unwound_stacks(BpfSession& bpf);
// The marker frame that ends a stack with this status ("" for UW_ST_END).
std::string unwind_marker(uint32_t status);
// The addresses of one stack to look up, innermost first: callers' return addresses
// minus 1 (a call at the end of a function is looked up in it); empty when the hash is
// not in the map.
std::vector<uint64_t> unwound_lookup_addrs(const UnwoundStacks& stacks, uint64_t hash);
// Symbolized frames of one stack (unwound_lookup_addrs), with
// the marker frame last when it stopped early. `found` false: hash not in the map.
std::vector<std::string> symbolize_unwound(const UnwoundStacks& stacks, uint64_t hash, Symbolizer& sym,
                                           uint32_t tgid, bool* found);

}  // namespace bpfdiag
