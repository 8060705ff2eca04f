// Compact user-stack unwind tables from DWARF CFI (.eh_frame), one per ELF file,
// for in-BPF unwinding (bpf_sources/unwind.h; design: docs/design/unwinding.md).
//
// A table is rows (struct uw_row, 8 bytes) sorted by ELF virtual address: from a
// row's pc up to the next row's pc, the CFA is RSP/RBP + offset (or the .plt idiom),
// the return address is at CFA-8 and the caller's RBP is unchanged / saved at
// CFA+8k / unknown. Built over the FDE list of .eh_frame_hdr by our CFA-program
// interpreter (common/cfa_program.h), which runs each FDE's program once: time linear
// in .eh_frame's size, rows capped per FDE and per file (UnwindTableStats). Files are target-controlled: they come in as
// UntrustedFile (common/untrusted_file.h) and are read with libelf's ELF_C_READ.
//
// PUBLIC API:
//   UnwindTableCache cache;
//   auto t = cache.get(file);      // shared by build-id (else by file identity)
//   t->rows, t->loads, t->has_cfi, t->st (counts, build time)
//   cache.totals()                 // capped/malformed counts over every table built
//   build_unwind_table(file)       // uncached (tests)
#pragma once
#include <linux/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/untrusted_file.h"

extern "C" {
#include "unwind_shared.h"
}

namespace bpfdiag {

struct UnwindTableStats {
  uint64_t fdes = 0, rows = 0, gaps = 0;
  uint64_t cfa_unsupported = 0;  // CFA rules the table cannot express (rows say NONE)
  uint64_t cfa_plt = 0;          // .plt idiom rows
  uint64_t rbp_unsupported = 0;  // RBP rules other than same/at CFA+8k (RBP unknown)
  uint64_t ra_not_cfa_minus_8 = 0, off_overflow = 0, ra_undefined = 0;
  // Hostile or broken CFI (issue 19), for data_quality: each leaves NONE rows (no
  // table) where rows were dropped.
  uint64_t fdes_malformed = 0;    // FDEs (or their CIE) malformed: rows end where it fails
  uint64_t fde_rows_capped = 0;   // FDEs cut at kMaxRowsPerFde rows (unwind_tables.cpp)
  uint64_t file_rows_capped = 0;  // 1: the file's table cut at kMaxRowsPerFile rows
  uint64_t work_capped = 0;       // 1: CFA programs re-run past the file's work budget
  uint64_t eh_frame_bytes = 0;
  double build_ms = 0;
};

struct UnwindLoad {  // a PT_LOAD segment, for the load bias of a mapping
  uint64_t vaddr, offset, filesz;
};

struct UnwindTable {
  bool has_cfi = false;       // false: no usable .eh_frame/.eh_frame_hdr (see error)
  std::string error;
  std::string build_id;       // lower-case hex, "" if none
  std::vector<uw_row> rows;   // sorted by pc; empty when !has_cfi
  std::vector<UnwindLoad> loads;
  UnwindTableStats st;
  // bias = runtime address - ELF vaddr for a mapping of this file at `start` that
  // maps file offset `offset`; nullopt when no PT_LOAD holds that offset.
  std::optional<uint64_t> bias_for(uint64_t start, uint64_t offset) const;
};

// Caps on one file's table (defaults in unwind_tables.cpp, with the measurements that
// set them); a row past a cap is a NONE row (no table) and counted in UnwindTableStats.
struct UnwindTableLimits {
  uint64_t rows_per_fde, rows_per_file;
  UnwindTableLimits();
};

// Builds the table of one ELF file (never null; !has_cfi with an error when unusable).
std::shared_ptr<const UnwindTable> build_unwind_table(const UntrustedFile& f,
                                                      const UnwindTableLimits& limits = UnwindTableLimits());

class UnwindTableCache {
 public:
  // The table of `f`, built once per build-id (files without one: per identity).
  std::shared_ptr<const UnwindTable> get(const std::shared_ptr<UntrustedFile>& f);
  size_t tables() const { return by_key_.size(); }
  double build_ms() const { return build_ms_; }  // total spent building
  // The hostile-CFI counters (fdes_malformed, fde_rows_capped, file_rows_capped,
  // work_capped) summed over every table built, for data_quality and a warning.
  const UnwindTableStats& totals() const { return totals_; }

 private:
  std::map<std::string, std::shared_ptr<const UnwindTable>> by_key_;  // "b:<id>" or "f:<identity>"
  std::map<std::string, std::string> identity_to_key_;
  double build_ms_ = 0;
  UnwindTableStats totals_;
};

}  // namespace bpfdiag
