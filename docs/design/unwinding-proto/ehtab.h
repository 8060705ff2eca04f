// Prototype (issue 11 design study, not production code): compact unwind table built
// from an ELF file's .eh_frame (via libdw's CFI interpreter), one row per PC range:
// how to find the CFA, and where the caller's RBP is. x86-64 only; RA is at CFA-8.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ehtab {

enum CfaType : uint8_t { CFA_NONE = 0, CFA_RSP = 1, CFA_RBP = 2, CFA_PLT = 3, CFA_END = 4 };
enum RbpType : uint8_t { RBP_SAME = 0, RBP_AT_CFA = 1, RBP_UNDEF = 2 };

struct Row {            // 8 bytes; pc is an ELF virtual address (runtime pc - load bias)
  uint32_t pc;
  int16_t cfa_off;
  uint8_t types;        // CfaType | RbpType << 4
  int8_t rbp_off8;      // RBP saved at CFA + 8*rbp_off8
};
static_assert(sizeof(Row) == 8, "");

struct Stats {
  uint64_t fdes = 0, raw_rows = 0, rows = 0, gaps = 0;
  uint64_t cfa_expr_unsupported = 0, cfa_plt = 0, rbp_unsupported = 0, ra_not_cfa_minus_8 = 0;
  uint64_t off_overflow = 0, ra_undefined = 0;
  double build_ms = 0;
  uint64_t eh_frame_bytes = 0;
};

struct Table {
  std::vector<Row> rows;  // sorted by pc; a row applies until the next row's pc
  Stats st;
};

// Returns false (with err) when the file has no usable .eh_frame/.eh_frame_hdr.
bool build(const std::string& path, Table& out, std::string& err);

}  // namespace ehtab
