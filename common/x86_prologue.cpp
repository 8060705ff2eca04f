// x86-64 prologue decoding (see common/x86_prologue.h).
#include "common/x86_prologue.h"

#include <cstring>

namespace bpfdiag {

X86Insn decode_x86(const uint8_t* p, size_t n) {
  X86Insn d;
  size_t i = 0;
  bool opsize = false, rep = false, other_prefix = false;
  uint8_t rex = 0;
  auto need = [&](size_t k) { return i + k <= n; };
  for (; i < n && i < 4; ++i) {
    uint8_t b = p[i];
    if (b == 0x66) opsize = true;
    else if (b == 0xf3 || b == 0xf2) rep = true, other_prefix = true;
    else if (b == 0x64 || b == 0x65 || b == 0x2e || b == 0x3e || b == 0x26 || b == 0x36 ||
             b == 0xf0)
      other_prefix = true;
    else break;
  }
  if (i < n && (p[i] & 0xf0) == 0x40) rex = p[i++];
  if (!need(1)) return d;
  const bool rex_w = rex & 8;
  const unsigned rex_r = (rex & 4) ? 8 : 0, rex_b = (rex & 1) ? 8 : 0;
  uint8_t op = p[i++];
  unsigned mod = 0, reg = 0, rm = 0;
  auto modrm = [&]() -> bool {
    if (!need(1)) return false;
    uint8_t m = p[i++];
    mod = m >> 6;
    reg = ((m >> 3) & 7) | rex_r;
    rm = (m & 7) | rex_b;
    if (mod != 3) {
      if ((m & 7) == 4) {
        if (!need(1)) return false;
        uint8_t sib = p[i++];
        if (mod == 0 && (sib & 7) == 5) i += 4;
      }
      if (mod == 0 && (m & 7) == 5) i += 4;  // rip-relative
      else if (mod == 1) i += 1;
      else if (mod == 2) i += 4;
    }
    return i <= n;
  };
  auto bit = [](unsigned r) { return static_cast<uint16_t>(1u << r); };
  auto rm_write = [&]() { return mod == 3 ? bit(rm) : uint16_t(0); };
  const unsigned imm_z = opsize ? 2 : 4;
  auto done = [&](unsigned imm) {
    i += imm;
    if (i > n) return d;
    d.ok = true;
    d.len = static_cast<unsigned>(i);
    return d;
  };

  if (op == 0x0f) {
    if (!need(1)) return d;
    uint8_t op2 = p[i++];
    if (op2 == 0x1e && rep && need(1) && (p[i] == 0xfa || p[i] == 0xfb)) return done(1);  // endbr
    if (op2 == 0x1f) return modrm() ? done(0) : d;                                         // nop
    if (op2 >= 0x80 && op2 <= 0x8f) {  // jcc rel32
      d.branch = true;
      d.emulated = !opsize && !other_prefix;
      d.what = "jcc";
      return done(4);
    }
    if (op2 == 0xb6 || op2 == 0xb7 || op2 == 0xbe || op2 == 0xbf || (op2 >= 0x40 && op2 <= 0x4f)) {
      if (!modrm()) return d;
      d.writes = bit(reg);
      return done(0);
    }
    if (op2 >= 0x90 && op2 <= 0x9f) {  // setcc
      if (!modrm()) return d;
      d.writes = rm_write();
      return done(0);
    }
    return d;
  }
  if (op < 0x40 && (op & 7) <= 5) {  // add/or/adc/sbb/and/sub/xor/cmp
    bool cmp = (op >> 3) == 7;
    switch (op & 7) {
      case 0: case 1:
        if (!modrm()) return d;
        d.writes = cmp ? 0 : rm_write();
        return done(0);
      case 2: case 3:
        if (!modrm()) return d;
        d.writes = cmp ? 0 : bit(reg);
        return done(0);
      case 4:
        d.writes = cmp ? 0 : bit(0);
        return done(1);
      default:
        d.writes = cmp ? 0 : bit(0);
        return done(imm_z);
    }
  }
  if (op >= 0x50 && op <= 0x57) {  // push reg: emulated without prefixes but REX.B
    d.writes = kRegRsp;
    d.emulated = !opsize && !other_prefix && (rex == 0 || rex == 0x41);
    d.what = "push";
    return done(0);
  }
  if (op >= 0x58 && op <= 0x5f) {  // pop
    d.writes = kRegRsp | bit((op & 7) | rex_b);
    return done(0);
  }
  if (op >= 0x70 && op <= 0x7f) {  // jcc rel8
    d.branch = true;
    d.emulated = !opsize && !other_prefix;
    d.what = "jcc";
    return done(1);
  }
  switch (op) {
    case 0x63:  // movsxd
    case 0x8a: case 0x8b: case 0x8d:  // mov r, r/m; lea
      if (!modrm()) return d;
      d.writes = bit(reg);
      return done(0);
    case 0x84: case 0x85:  // test
      return modrm() ? done(0) : d;
    case 0x86: case 0x87:  // xchg
      if (!modrm()) return d;
      d.writes = bit(reg) | rm_write();
      return done(0);
    case 0x88: case 0x89:  // mov r/m, r
      if (!modrm()) return d;
      d.writes = rm_write();
      return done(0);
    case 0x80: case 0x81: case 0x83: {  // group 1 with immediate
      if (!modrm()) return d;
      d.writes = (reg & 7) == 7 ? 0 : rm_write();
      return done(op == 0x81 ? imm_z : 1);
    }
    case 0x90:
      if (rex_b) return d;  // xchg r8, rax
      return done(0);
    case 0x98: case 0x99:
      d.writes = op == 0x98 ? bit(0) : bit(2);
      return done(0);
    case 0xa8: return done(1);
    case 0xa9: return done(imm_z);
    case 0xc0: case 0xc1: case 0xd1: case 0xd3:  // shifts
      if (!modrm()) return d;
      d.writes = rm_write();
      return done(op == 0xc0 || op == 0xc1 ? 1 : 0);
    case 0xc6: case 0xc7:
      if (!modrm() || (reg & 7) != 0) return d;
      d.writes = rm_write();
      return done(op == 0xc6 ? 1 : imm_z);
    case 0xf6: case 0xf7:
      if (!modrm() || (reg & 7) != 0) return d;  // only test
      return done(op == 0xf6 ? 1 : imm_z);
    case 0xe8:  // call rel32
      d.branch = true;
      d.emulated = !opsize && !other_prefix;
      d.writes = kRegRsp;
      d.what = "call";
      return done(4);
    case 0xe9: case 0xeb:  // jmp
      d.branch = true;
      d.emulated = !opsize && !other_prefix;
      d.what = "jmp";
      return done(op == 0xe9 ? 4 : 1);
    case 0xc3:
      d.branch = true;
      return done(0);
    default:
      break;
  }
  if (op >= 0xb0 && op <= 0xb7) {
    d.writes = bit((op & 7) | rex_b);
    return done(1);
  }
  if (op >= 0xb8 && op <= 0xbf) {
    d.writes = bit((op & 7) | rex_b);
    return done(rex_w ? 8 : imm_z);
  }
  return d;
}

uint64_t cheap_probe_offset(const uint8_t* code, size_t n, uint16_t keep, bool ret) {
  uint64_t off = 0;
  uint16_t written = 0;
  for (int k = 0; k < 24 && off < n; ++k) {
    X86Insn d = decode_x86(code + off, n - off);
    if (!d.ok) return 0;
    if (d.emulated) return off;
    if (d.branch) return 0;
    written |= d.writes;
    if (written & keep) return 0;
    if (ret && (written & kRegRsp)) return 0;
    off += d.len;
  }
  return 0;
}

std::vector<bool> branch_targets_ranges(const uint8_t* t, size_t n, uint64_t base,
                                        const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  std::vector<bool> hits(ranges.size(), false);
  auto check = [&](size_t i, size_t end, int64_t rel) {
    uint64_t target = base + end + static_cast<uint64_t>(rel), at = base + i;
    for (size_t k = 0; k < ranges.size(); ++k) {
      auto [lo, hi] = ranges[k];
      // the skipped bytes [lo, hi) were decoded exactly and hold no branch: their
      // immediates and displacements are not instructions
      if (target > lo && target <= hi && !(at >= lo && at < hi)) hits[k] = true;
    }
  };
  for (size_t i = 0; i < n; ++i) {
    uint8_t b = t[i];
    if ((b == 0xeb || (b >= 0x70 && b <= 0x7f)) && i + 2 <= n) check(i, i + 2, static_cast<int8_t>(t[i + 1]));
    if ((b == 0xe8 || b == 0xe9) && i + 5 <= n) {
      int32_t rel;
      std::memcpy(&rel, t + i + 1, 4);
      check(i, i + 5, rel);
    }
    if (b == 0x0f && i + 6 <= n && t[i + 1] >= 0x80 && t[i + 1] <= 0x8f) {
      int32_t rel;
      std::memcpy(&rel, t + i + 2, 4);
      check(i, i + 6, rel);
    }
  }
  return hits;
}

bool branch_targets_range(const uint8_t* t, size_t n, uint64_t base, uint64_t lo, uint64_t hi) {
  return branch_targets_ranges(t, n, base, {{lo, hi}})[0];
}

}  // namespace bpfdiag
