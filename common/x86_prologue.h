// x86-64 prologue decoding for cheap uprobe placement (common/pthread_probes uses it;
// its header explains the rules). Only the subset of instructions found in function
// prologues is decoded; anything else stops a walk, so an unknown instruction can only
// keep a probe on its symbol, never move it somewhere wrong.
//
// PUBLIC API:
//   X86Insn d = decode_x86(code, n);                        // one instruction
//   uint64_t off = cheap_probe_offset(code, n, kRegRdi, ret);  // 0: stay on the symbol
//   branch_targets_ranges(text, n, text_vaddr, {{lo, hi}, ...});  // skipped bytes reached?
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace bpfdiag {

// x86-64 registers as bits: rax=0 rcx=1 rdx=2 rbx=3 rsp=4 rbp=5 rsi=6 rdi=7 r8..r15.
enum : uint16_t {
  kRegRdi = 1u << 7,
  kRegRsi = 1u << 6,
  kRegRdx = 1u << 2,
  kRegRcx = 1u << 1,
  kRegRsp = 1u << 4,
};

// One decoded instruction of the subset found in prologues.
struct X86Insn {
  bool ok = false;         // decoded (false: unknown instruction, stop the walk)
  unsigned len = 0;
  bool emulated = false;   // the kernel emulates it when probed (push reg, jmp, jcc, call)
  bool branch = false;     // changes control flow (jmp, jcc, call, ret)
  uint16_t writes = 0;     // registers written (kReg* bits)
  const char* what = "";   // "push", "jmp", "jcc", "call", or ""
};
X86Insn decode_x86(const uint8_t* p, size_t n);

// Offset of the cheapest equivalent probe point in code[0..n) (the function's bytes):
// `keep` are the argument registers the handlers read, `ret` whether a return probe
// shares the point. Returns 0 when no better point is provably equivalent.
uint64_t cheap_probe_offset(const uint8_t* code, size_t n, uint16_t keep, bool ret);

// True if a direct branch (jmp/jcc/call rel8/rel32) in `text` (loaded at text_vaddr)
// targets an address in (lo, hi]. Byte-pattern scan (may err on the side of true)
// that skips [lo, hi), the already-decoded branch-free prologue.
bool branch_targets_range(const uint8_t* text, size_t n, uint64_t text_vaddr, uint64_t lo,
                          uint64_t hi);
// The same for several (lo, hi) ranges in one pass: element k answers ranges[k].
std::vector<bool> branch_targets_ranges(const uint8_t* text, size_t n, uint64_t text_vaddr,
                                        const std::vector<std::pair<uint64_t, uint64_t>>& ranges);

}  // namespace bpfdiag
