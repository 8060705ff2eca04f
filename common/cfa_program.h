// x86-64 DWARF call frame information (.eh_frame, .eh_frame_hdr) for the unwind tables
// (common/unwind_tables.h): CIE/FDE parsing and a CFA-program interpreter that runs
// each FDE's program ONCE and yields its rows in address order, instead of re-running
// it from the start for every row (libdw's dwarf_cfi_addrframe: O(rows²), issue 19).
//
// The files are target-controlled: every read is bounds-checked against its section,
// every loop is bounded by the bytes it consumes, and a malformed CIE/FDE/instruction
// is an error for that FDE only. Rows come out as libdw 0.188 gives them on real files
// (tests/unit/common_unwind_tables_test.cpp compares both on libc, libstdc++, libjvm,
// python3 ...): the ABI's initial rules (x86_64_abi_cfi: RBP and the return address
// "same value", CFA undefined), the CIE's initial instructions, then the FDE's.
//
// PUBLIC API:
//   cfa::Section eh{data, size, vaddr, elf64};           // .eh_frame's bytes
//   cfa::EhFrame ehf(eh);
//   cfa::HdrTable hdr;  hdr.parse(hdr_section, eh.vaddr, err);   // .eh_frame_hdr
//   const cfa::Fde* f = ehf.find(hdr, pc);               // the FDE covering pc
//   cfa::Pass pass(ehf, *f);
//   pass.query(pc, row_end);  pass.state();             // pcs increasing
//   ehf.reg_ops(rule, ops) / ehf.cfa_ops(state, ops)    // expressions as DWARF ops
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bpfdiag::cfa {

struct Section {
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint64_t vaddr = 0;  // sh_addr: the base of pcrel values
  bool elf64 = true;   // pointer size of absptr values
};

// A register's rule (DWARF 5 6.4.1), as far as the unwind table needs: RBP, the return
// address. value: N for kOffset/kValOffset (CFA + N, 61 bits as libdw keeps it), the
// register for kRegister, the section offset of the expression block (ULEB length,
// then ops) for kExpression/kValExpression.
enum RegKind : uint8_t { kUnspecified, kUndefined, kSameValue, kOffset, kValOffset, kRegister, kExpression, kValExpression };
struct RegRule {
  uint8_t kind = kUnspecified;
  int64_t value = 0;
};
enum CfaKind : uint8_t { kCfaUndefined, kCfaOffset, kCfaExpr, kCfaInvalid };
struct State {
  uint8_t cfa = kCfaUndefined;
  uint64_t cfa_reg = 0, cfa_off = 0;    // kCfaOffset: CFA = reg + off
  uint64_t expr_off = 0, expr_len = 0;  // kCfaExpr: the ops' section offset and length
  RegRule rbp, ra;                      // DWARF registers 6 and 16
};

struct Cie {
  uint64_t code_align = 0;
  int64_t data_align = 0;
  uint8_t fde_encoding = 0;
  bool sized_aug = false;      // 'z': FDEs carry a ULEB-sized augmentation block
  uint64_t fde_aug_size = 0;   // without 'z': bytes of FDE augmentation data
  size_t ins = 0, ins_end = 0;  // initial instructions (section offsets)
  int init = 0;                // 0 not run yet, 1 ok, -1 malformed
  State initial;               // the state FDEs start from (init == 1)
};

struct Fde {
  uint64_t offset = 0;         // in .eh_frame
  uint64_t start = 0, end = 0;  // [start, end) code addresses
  const Cie* cie = nullptr;
  size_t ins = 0, ins_end = 0;  // instructions (section offsets)
};

// A DWARF expression op as libdw's parser gives it.
struct Op {
  uint8_t atom = 0;
  uint64_t number = 0, number2 = 0;
};
// What the table needs of an op list: its length and first three ops (the CFA is
// bregN, the .plt expression is 9 ops from breg7 breg16, "at CFA+N" is 1-3 ops).
struct Ops {
  size_t n = 0;
  Op op[3];
  void push(const Op& o) {
    if (n < 3) op[n] = o;
    ++n;
  }
};
// Decodes an expression as libdw does for CFI (no .debug_info: ops that reference it
// are malformed). cfap: DW_OP_call_frame_cfa first (register rules); valuep: a
// DW_OP_stack_value last (val_expression). False when malformed. An empty block gives
// no ops (and neither cfap nor valuep ops), as in libdw.
bool decode_ops(const uint8_t* p, size_t len, bool elf64, bool cfap, bool valuep, Ops& out);

// .eh_frame_hdr's binary-search table: version 1, entries (datarel|sdata4 pairs, what
// every toolchain emits; anything else is refused).
class HdrTable {
 public:
  // False with `err` when unusable. eh_vaddr: .eh_frame's address, which the header
  // must point at.
  bool parse(const Section& hdr, uint64_t eh_vaddr, std::string& err);
  size_t size() const { return count_; }
  uint64_t start(size_t i) const;   // the i-th entry's initial location (table order)
  // libdw's binary search: the FDE offset (in .eh_frame) for addr, or -1.
  uint64_t search(uint64_t addr) const;

 private:
  Section s_;
  size_t table_ = 0, count_ = 0;
};

class EhFrame {
 public:
  explicit EhFrame(const Section& s) : s_(s) {}
  const Section& section() const { return s_; }
  // The FDE covering addr (libdw's __libdw_find_fde: FDEs found before first, then the
  // header's table), nullptr when none or malformed.
  const Fde* find(const HdrTable& hdr, uint64_t addr);
  // The CIE's initial state (ABI rules, then its initial instructions) computed once;
  // false when they are malformed.
  bool initial_state(const Cie& cie);
  // Ops of a register rule's expression / the CFA expression (libdw's
  // dwarf_frame_register / dwarf_frame_cfa); false when malformed.
  // Each expression is decoded once (cached by its offset): a row costs O(1) however
  // long the expression its rule names.
  bool reg_ops(const RegRule& r, Ops& ops) const;
  bool cfa_ops(const State& s, Ops& ops) const;
  // Executes [pos, end) of a program on st; `stack` holds remembered states. Stops
  // after an instruction that moved loc (returns 1, loc updated), at the end (0), or
  // on a malformed one (-1). in_cie: a CIE's initial instructions (no loc moves, no
  // restores). `cie` gives the factors, the FDE encoding and restore's rules.
  int step(const Cie& cie, bool in_cie, size_t& pos, size_t end, uint64_t& loc, State& st,
           std::vector<State>& stack) const;

 private:
  const Cie* cie_at(uint64_t offset);
  const Fde* fde_at(uint64_t offset);
  Section s_;
  std::map<uint64_t, std::unique_ptr<Cie>> cies_;  // by offset
  std::map<uint64_t, Fde> by_start_;               // FDEs found so far, by start
  std::map<uint64_t, Fde>::const_iterator last_ = by_start_.end();  // the last one find() gave
  uint64_t last_next_ = 0;  // the start of the FDE after last_ (UINT64_MAX: none)
  bool cached_ops(uint64_t key, const uint8_t* p, size_t len, bool cfap, bool valuep, Ops& ops) const;
  mutable std::unordered_map<uint64_t, std::pair<bool, Ops>> ops_cache_;  // by offset * 4 + kind
};

// One FDE's program run once, row by row: query(pc) for increasing pcs (the first
// >= the FDE's start) gives the state at pc and the end of its row, as libdw's
// dwarf_cfi_addrframe(pc) does, in time linear in the program's length overall.
class Pass {
 public:
  Pass(const EhFrame& ehf, const Fde& fde);
  const Fde& fde() const { return *fde_; }
  // False when the program is malformed before pc's row ends (that FDE's rows end).
  bool query(uint64_t pc, uint64_t& row_end);
  const State& state() const { return st_; }
  size_t consumed() const { return pos_ > fde_->ins ? pos_ - fde_->ins : 0; }  // program bytes run
  // remember_state nesting a program may use (libdw: unbounded; real code: 1-2)
  static constexpr size_t kMaxStack = 64;

 private:
  const EhFrame* ehf_;
  const Fde* fde_;
  size_t pos_;
  uint64_t loc_;
  State st_;
  std::vector<State> stack_;
  bool moved_ = false;  // the last step moved loc past the previous query
  bool failed_ = false;
};

}  // namespace bpfdiag::cfa
