// DWARF CFI parsing and a one-pass CFA-program interpreter (see cfa_program.h).
// Behaviour follows the DWARF 5 spec (6.4) and the LSB's .eh_frame format, with
// libdw 0.188's choices where the spec leaves room (what the old table builder used):
// restore in a CIE, def_cfa_register/def_cfa_offset without a register+offset CFA
// (the CFA becomes invalid), DW_CFA_GNU_window_save on x86-64 (SPARC's register
// window: the return address at CFA+0), the CIE augmentation walk.
#include "common/cfa_program.h"

#include <dwarf.h>

#include <cstring>

namespace bpfdiag::cfa {

namespace {

// Bounded little-endian reads from [pos, end) of a buffer.
struct Reader {
  const uint8_t* base;
  size_t pos, end;
  bool left(size_t n) const { return pos <= end && end - pos >= n; }
  bool u8(uint8_t& v) {
    if (!left(1)) return false;
    v = base[pos++];
    return true;
  }
  template <typename T>
  bool fixed(T& v) {
    if (!left(sizeof(T))) return false;
    memcpy(&v, base + pos, sizeof(T));
    pos += sizeof(T);
    return true;
  }
  // LEB128 of at most 10 bytes (64 bits), as libdw reads them; false when truncated
  // or longer.
  bool uleb(uint64_t& v) {
    v = 0;
    for (int i = 0; i < 10; ++i) {
      uint8_t b;
      if (!u8(b)) return false;
      v |= uint64_t(b & 0x7f) << (7 * i);
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  bool sleb(int64_t& v) {
    uint64_t acc = 0;
    for (int i = 0; i < 10; ++i) {
      uint8_t b;
      if (!u8(b)) return false;
      acc |= uint64_t(b & 0x7f) << (7 * i);
      if (!(b & 0x80)) {
        if (7 * (i + 1) < 64 && (b & 0x40)) acc |= ~uint64_t(0) << (7 * (i + 1));
        v = int64_t(acc);
        return true;
      }
    }
    return false;
  }
};

size_t ptr_size(bool elf64) { return elf64 ? 8 : 4; }

// Size of an encoded value (libdw's encoded_value_size): 0 when omitted, unknown, or a
// LEB128 that does not end within [p, limit).
size_t encoded_size(uint8_t enc, bool elf64, const uint8_t* p, const uint8_t* limit) {
  if (enc == DW_EH_PE_omit) return 0;
  switch (enc & 0x07) {
    case DW_EH_PE_udata2: return 2;
    case DW_EH_PE_udata4: return 4;
    case DW_EH_PE_udata8: return 8;
    case DW_EH_PE_absptr: return ptr_size(elf64);
    case DW_EH_PE_uleb128:
      if (p)
        for (const uint8_t* q = p; q < limit;)
          if (*q++ & 0x80u) return size_t(q - p);  // (libdw's test, kept: ends at a continuation byte)
      return 0;
    default: return 0;
  }
}

// A pointer-encoded value (DW_EH_PE_*) read at r.pos of section s: pcrel from the
// byte's address, datarel from `datarel`, indirect through a pointer in s.
bool read_encoded(const Section& s, uint64_t datarel, uint8_t enc, Reader& r, uint64_t& out) {
  uint64_t base = 0;
  switch (enc & 0x70) {
    case DW_EH_PE_absptr: break;
    case DW_EH_PE_pcrel: base = s.vaddr + r.pos; break;
    case DW_EH_PE_textrel: break;
    case DW_EH_PE_datarel: base = datarel; break;
    case DW_EH_PE_funcrel: break;
    case DW_EH_PE_aligned: {
      size_t size = encoded_size(enc, s.elf64, r.base + std::min(r.pos, r.end), r.base + r.end);
      if (size == 0) return false;
      size_t align = (s.vaddr + r.pos) & (size - 1);
      if (align) r.pos += size - align;
      break;
    }
    default: return false;
  }
  uint64_t v = 0;
  switch (enc & 0x0f) {
    case DW_EH_PE_udata2: {
      uint16_t x;
      if (!r.fixed(x)) return false;
      v = x;
      break;
    }
    case DW_EH_PE_sdata2: {
      int16_t x;
      if (!r.fixed(x)) return false;
      v = uint64_t(int64_t(x));
      break;
    }
    case DW_EH_PE_udata4: {
      uint32_t x;
      if (!r.fixed(x)) return false;
      v = x;
      break;
    }
    case DW_EH_PE_sdata4: {
      int32_t x;
      if (!r.fixed(x)) return false;
      v = uint64_t(int64_t(x));
      break;
    }
    case DW_EH_PE_udata8:
    case DW_EH_PE_sdata8:
      if (!r.fixed(v)) return false;
      break;
    case DW_EH_PE_absptr:
      if (s.elf64) {
        if (!r.fixed(v)) return false;
      } else {
        uint32_t x;
        if (!r.fixed(x)) return false;
        v = x;
      }
      break;
    case DW_EH_PE_uleb128:
      if (!r.uleb(v)) return false;
      break;
    case DW_EH_PE_sleb128: {
      int64_t x;
      if (!r.sleb(x)) return false;
      v = uint64_t(x);
      break;
    }
    default: return false;
  }
  out = base + v;
  if (enc & DW_EH_PE_indirect) {
    if (out < s.vaddr) return false;
    uint64_t at = out - s.vaddr;
    size_t ps = ptr_size(s.elf64);
    if (s.size < ps || at > s.size - ps) return false;
    Reader ind{s.data, size_t(at), s.size};
    if (s.elf64) return ind.fixed(out);
    uint32_t x;
    if (!ind.fixed(x)) return false;
    out = x;
  }
  return true;
}

// One .eh_frame entry (libdw's dwarf_next_cfi): 1 = end of the section or a
// terminator, 0 = an entry, -1 = malformed.
struct Entry {
  bool is_cie = false;
  uint64_t cie_off = 0;         // FDE: its CIE
  size_t body = 0, limit = 0;   // FDE: after the CIE pointer .. end of the entry
  uint8_t version = 0;
  size_t aug = 0;               // CIE: augmentation string
  uint64_t code_align = 0;
  int64_t data_align = 0;
  size_t aug_data = 0;
  uint64_t aug_data_size = 0;
  size_t ins = 0;               // CIE: initial instructions [ins, limit)
};

int next_entry(const Section& s, uint64_t off, Entry& e) {
  if (off >= s.size || s.size - off <= 4) return 1;
  Reader r{s.data, size_t(off), s.size};
  uint32_t len32 = 0;
  r.fixed(len32);
  uint64_t length = len32;
  size_t offset_size = 4;
  if (len32 == 0xffffffffu) {
    offset_size = 8;
    if (!r.fixed(length)) return -1;
  }
  if (length == 0) return 1;
  if (s.size - r.pos < length || length < offset_size + 1) return -1;
  size_t limit = r.pos + size_t(length);
  r.end = limit;
  size_t id_pos = r.pos;
  uint64_t id = 0;
  if (offset_size == 8) {
    r.fixed(id);
  } else {
    uint32_t x = 0;
    r.fixed(x);
    id = x;
  }
  e = Entry{};
  e.limit = limit;
  if (id != 0) {  // an FDE: the distance back to its CIE
    if (id > id_pos || id_pos <= offset_size) return -1;
    e.cie_off = id_pos - id;
    e.body = r.pos;
    return 0;
  }
  e.is_cie = true;
  if (!r.u8(e.version)) return -1;
  if (e.version != 1 && (e.version < 3 || e.version > 4)) return -1;
  e.aug = r.pos;
  const void* nul = memchr(s.data + r.pos, 0, limit - r.pos);
  if (!nul) return -1;
  r.pos = size_t(static_cast<const uint8_t*>(nul) - s.data) + 1;
  size_t asize = ptr_size(s.elf64);
  if (e.version >= 4) {
    uint8_t as, seg;
    if (!r.left(5) || !r.u8(as) || !r.u8(seg)) return -1;
    if (as != asize || seg != 0) return -1;
  }
  const char* ap = reinterpret_cast<const char*>(s.data + e.aug);
  if (ap[0] == 'e' && ap[1] == 'h') ap += 2, r.pos += asize;  // g++ v2 "eh"
  if (r.pos >= limit || !r.uleb(e.code_align)) return -1;
  if (r.pos >= limit || !r.sleb(e.data_align)) return -1;
  if (r.pos >= limit) return -1;
  if (e.version >= 3) {
    uint64_t ra;
    if (!r.uleb(ra)) return -1;
  } else {
    uint8_t ra;
    r.u8(ra);
  }
  e.aug_data = r.pos;
  bool sized = *ap == 'z';
  if (sized) {
    ++ap;
    if (r.pos >= limit || !r.uleb(e.aug_data_size)) return -1;
    if (limit - r.pos < e.aug_data_size) return -1;
    e.aug_data = r.pos;
  }
  for (; *ap && sized; ++ap) {  // without 'z' the data is not skipped (libdw)
    uint8_t enc;
    if (*ap == 'L' || *ap == 'R') {
      if (!r.u8(enc)) return -1;
    } else if (*ap == 'P') {
      if (!r.u8(enc)) return -1;
      r.pos += encoded_size(enc, s.elf64, s.data + std::min(r.pos, limit), s.data + s.size);
    } else if (*ap != 'S') {
      break;
    }
  }
  if (!sized) {
    e.aug_data_size = r.pos - e.aug_data;
  } else {
    if (r.pos > e.aug_data + e.aug_data_size) return -1;
    r.pos = e.aug_data + size_t(e.aug_data_size);
  }
  e.ins = r.pos;
  return 0;
}

// libdw keeps an offset rule's N in a 61-bit field.
int64_t rule_value(uint64_t v) { return int64_t(v << 3) >> 3; }

// libdw's bound on register numbers (enough_registers): larger ones are malformed.
constexpr uint64_t kMaxRegs = INT32_MAX / 8;

}  // namespace

bool decode_ops(const uint8_t* p, size_t len, bool elf64, bool cfap, bool valuep, Ops& out) {
  out = Ops{};
  if (len == 0) return true;
  if (cfap) out.push(Op{DW_OP_call_frame_cfa, 0, 0});
  Reader r{p, 0, len};
  while (r.pos < r.end) {
    Op op;
    r.u8(op.atom);
    uint8_t a = op.atom;
    bool ok = true;
    if (a == DW_OP_addr) {
      if (elf64) {
        ok = r.fixed(op.number);
      } else {
        uint32_t x;
        ok = r.fixed(x), op.number = x;
      }
    } else if ((a >= DW_OP_lit0 && a <= DW_OP_lit31) || (a >= DW_OP_reg0 && a <= DW_OP_reg31)) {
    } else if (a >= DW_OP_breg0 && a <= DW_OP_breg31) {
      int64_t x;
      ok = r.sleb(x), op.number = uint64_t(x);
    } else {
      switch (a) {
        case DW_OP_deref: case DW_OP_dup: case DW_OP_drop: case DW_OP_over: case DW_OP_swap:
        case DW_OP_rot: case DW_OP_xderef: case DW_OP_abs: case DW_OP_and: case DW_OP_div:
        case DW_OP_minus: case DW_OP_mod: case DW_OP_mul: case DW_OP_neg: case DW_OP_not:
        case DW_OP_or: case DW_OP_plus: case DW_OP_shl: case DW_OP_shr: case DW_OP_shra:
        case DW_OP_xor: case DW_OP_eq: case DW_OP_ge: case DW_OP_gt: case DW_OP_le:
        case DW_OP_lt: case DW_OP_ne: case DW_OP_nop: case DW_OP_push_object_address:
        case DW_OP_call_frame_cfa: case DW_OP_form_tls_address: case DW_OP_GNU_push_tls_address:
        case DW_OP_stack_value:
          break;
        case DW_OP_const1u: case DW_OP_pick: case DW_OP_deref_size: case DW_OP_xderef_size: {
          uint8_t x;
          ok = r.u8(x), op.number = x;
          break;
        }
        case DW_OP_const1s: {
          int8_t x;
          ok = r.fixed(x), op.number = uint64_t(int64_t(x));
          break;
        }
        case DW_OP_const2u: {
          uint16_t x;
          ok = r.fixed(x), op.number = x;
          break;
        }
        case DW_OP_const2s: case DW_OP_skip: case DW_OP_bra: case DW_OP_call2: {
          int16_t x;
          ok = r.fixed(x), op.number = uint64_t(int64_t(x));
          break;
        }
        case DW_OP_const4u: {
          uint32_t x;
          ok = r.fixed(x), op.number = x;
          break;
        }
        case DW_OP_const4s: case DW_OP_call4: case DW_OP_GNU_parameter_ref: {
          int32_t x;
          ok = r.fixed(x), op.number = uint64_t(int64_t(x));
          break;
        }
        case DW_OP_const8u: case DW_OP_const8s:
          ok = r.fixed(op.number);
          break;
        case DW_OP_constu: case DW_OP_plus_uconst: case DW_OP_regx: case DW_OP_piece:
        case DW_OP_convert: case DW_OP_GNU_convert: case DW_OP_reinterpret:
        case DW_OP_GNU_reinterpret: case DW_OP_addrx: case DW_OP_GNU_addr_index:
        case DW_OP_constx: case DW_OP_GNU_const_index:
          ok = r.uleb(op.number);
          break;
        case DW_OP_consts: case DW_OP_fbreg: {
          int64_t x;
          ok = r.sleb(x), op.number = uint64_t(x);
          break;
        }
        case DW_OP_bregx: {
          int64_t x = 0;
          ok = r.uleb(op.number) && r.pos < r.end && r.sleb(x);
          op.number2 = uint64_t(x);
          break;
        }
        case DW_OP_bit_piece: case DW_OP_regval_type: case DW_OP_GNU_regval_type:
          ok = r.uleb(op.number) && r.pos < r.end && r.uleb(op.number2);
          break;
        case DW_OP_deref_type: case DW_OP_GNU_deref_type: case DW_OP_xderef_type: {
          uint8_t x = 0;
          ok = r.left(2) && r.u8(x) && r.uleb(op.number2);
          op.number = x;
          break;
        }
        case DW_OP_const_type: case DW_OP_GNU_const_type: {
          uint8_t size = 0;
          ok = r.uleb(op.number) && r.u8(size) && r.left(size);
          r.pos += ok ? size : 0;
          break;
        }
        default:  // incl. ops that need .debug_info (call_ref, implicit_*, entry_value)
          ok = false;
      }
    }
    if (!ok) return false;
    out.push(op);
  }
  if (valuep) out.push(Op{DW_OP_stack_value, 0, 0});
  return true;
}

bool HdrTable::parse(const Section& hdr, uint64_t eh_vaddr, std::string& err) {
  s_ = hdr;
  count_ = 0;
  if (!hdr.data || hdr.size < 12) return err = "no .eh_frame_hdr", false;
  const uint8_t* p = hdr.data;
  if (p[0] != 1 || p[2] != DW_EH_PE_udata4 || p[3] != (DW_EH_PE_datarel | DW_EH_PE_sdata4))
    return err = "unsupported .eh_frame_hdr encoding", false;
  Reader r{p, 4, hdr.size};
  uint64_t ptr;
  uint32_t count;
  if (!read_encoded(hdr, hdr.vaddr, p[1], r, ptr) || !r.fixed(count))
    return err = "unsupported .eh_frame_hdr encoding", false;
  if (ptr != eh_vaddr) return err = ".eh_frame_hdr does not point at .eh_frame", false;
  if (uint64_t(count) * 8 > hdr.size - r.pos) return err = "truncated .eh_frame_hdr", false;
  table_ = r.pos;
  count_ = count;
  return true;
}

uint64_t HdrTable::start(size_t i) const {
  int32_t loc;
  memcpy(&loc, s_.data + table_ + i * 8, 4);
  return s_.vaddr + uint64_t(int64_t(loc));
}

uint64_t HdrTable::search(uint64_t addr) const {
  // libdw's binary_search_fde: the entry whose start <= addr < the next entry's start
  size_t l = 0, u = count_;
  while (l < u) {
    size_t idx = (l + u) / 2;
    uint64_t start = this->start(idx);
    if (addr < start) {
      u = idx;
      continue;
    }
    l = idx + 1;
    if (l < count_ && addr >= this->start(l)) continue;
    int32_t fde;
    memcpy(&fde, s_.data + table_ + idx * 8 + 4, 4);
    return s_.vaddr + uint64_t(int64_t(fde));  // the caller subtracts .eh_frame's address
  }
  return ~uint64_t(0);
}

const Cie* EhFrame::cie_at(uint64_t offset) {
  auto it = cies_.find(offset);
  if (it != cies_.end()) return it->second.get();
  Entry e;
  std::unique_ptr<Cie> cie;
  if (next_entry(s_, offset, e) == 0 && e.is_cie) {
    cie = std::make_unique<Cie>();
    cie->code_align = e.code_align;
    cie->data_align = e.data_align;
    cie->fde_encoding = DW_EH_PE_absptr;
    // the augmentation string again, reading its data (libdw's intern_new_cie)
    Reader d{s_.data, e.aug_data, e.limit};
    bool ok = true;
    for (const char* ap = reinterpret_cast<const char*>(s_.data + e.aug); *ap && ok; ++ap) {
      uint8_t enc = 0;
      if (*ap == 'z') {
        cie->sized_aug = true;
      } else if (*ap == 'S') {
      } else if (*ap == 'L') {
        ok = d.u8(enc);
        if (!cie->sized_aug) cie->fde_aug_size += encoded_size(enc, s_.elf64, nullptr, nullptr);
      } else if (*ap == 'R') {
        ok = d.u8(cie->fde_encoding);
      } else if (*ap == 'P') {
        ok = d.u8(enc);
        d.pos += encoded_size(enc, s_.elf64, s_.data + std::min(d.pos, d.end), s_.data + s_.size);
      } else if (!cie->sized_aug) {
        break;
      }
    }
    if ((cie->fde_encoding & 0x0f) == DW_EH_PE_absptr)
      cie->fde_encoding |= s_.elf64 ? DW_EH_PE_udata8 : DW_EH_PE_udata4;
    cie->ins = e.ins;
    cie->ins_end = e.limit;
    if (!ok) cie.reset();
  }
  return cies_.emplace(offset, std::move(cie)).first->second.get();
}

const Fde* EhFrame::fde_at(uint64_t offset) {
  Entry e;
  if (next_entry(s_, offset, e) != 0 || e.is_cie) return nullptr;
  const Cie* cie = cie_at(e.cie_off);
  if (!cie) return nullptr;
  Fde f;
  f.offset = offset;
  f.cie = cie;
  Reader r{s_.data, e.body, s_.size};
  uint64_t range = 0;
  if (!read_encoded(s_, 0, cie->fde_encoding, r, f.start) || !read_encoded(s_, 0, cie->fde_encoding & 0x0f, r, range))
    return nullptr;
  f.end = f.start + range;
  if (f.start >= f.end) return nullptr;  // not a real code range
  r.end = e.limit;
  if (cie->sized_aug) {
    uint64_t len = 0;
    if (!r.uleb(len) || len > e.limit - r.pos) return nullptr;
    r.pos += size_t(len);
  } else {
    r.pos = cie->fde_aug_size > s_.size ? s_.size : r.pos + size_t(cie->fde_aug_size);
  }
  f.ins = r.pos;
  f.ins_end = e.limit;
  // an FDE starting inside one already known is that one (libdw's tsearch)
  auto in = by_start_.lower_bound(f.start);
  if (in != by_start_.end() && in->first < f.end) return &in->second;
  last_ = by_start_.end();  // find()'s shortcut: its next FDE may have changed
  return &by_start_.emplace_hint(in, f.start, f)->second;
}

const Fde* EhFrame::find(const HdrTable& hdr, uint64_t addr) {
  // a known FDE covering addr: the one with the greatest start <= addr (usually the
  // one found last, row after row)
  auto it = last_;
  if (it == by_start_.end() || it->first > addr || last_next_ <= addr) {
    auto up = by_start_.upper_bound(addr);
    it = up == by_start_.begin() ? by_start_.end() : std::prev(up);
    if (it != by_start_.end()) last_ = it, last_next_ = up == by_start_.end() ? ~uint64_t(0) : up->first;
  }
  if (it != by_start_.end() && addr < it->second.end) return &it->second;
  uint64_t at = hdr.search(addr);
  if (at == ~uint64_t(0)) return nullptr;
  const Fde* f = fde_at(at - s_.vaddr);
  if (!f || addr < f->start || addr >= f->end) return nullptr;
  return f;
}

bool EhFrame::initial_state(const Cie& c) {
  Cie& cie = const_cast<Cie&>(c);  // interned here: the cache is ours
  if (cie.init) return cie.init > 0;
  State st;
  st.rbp.kind = st.ra.kind = kSameValue;  // x86-64 ABI: callee-saved, RA in rip (libdw's abi_cfi)
  std::vector<State> stack;
  size_t pos = cie.ins;
  uint64_t loc = 0;
  int r;
  while ((r = step(cie, true, pos, cie.ins_end, loc, st, stack)) > 0) {
  }
  cie.init = r == 0 ? 1 : -1;
  cie.initial = st;
  return cie.init > 0;
}

bool EhFrame::cached_ops(uint64_t key, const uint8_t* p, size_t len, bool cfap, bool valuep, Ops& ops) const {
  auto it = ops_cache_.find(key);
  if (it == ops_cache_.end()) {
    Ops o;
    bool ok = decode_ops(p, len, s_.elf64, cfap, valuep, o);
    it = ops_cache_.emplace(key, std::make_pair(ok, o)).first;
  }
  ops = it->second.second;
  return it->second.first;
}

bool EhFrame::reg_ops(const RegRule& rule, Ops& ops) const {
  Reader r{s_.data, size_t(rule.value), s_.size};
  uint64_t len;
  if (rule.value < 0 || !r.uleb(len) || len > s_.size - r.pos) return false;
  bool valuep = rule.kind == kValExpression;
  return cached_ops(uint64_t(rule.value) * 4 + 1 + valuep, s_.data + r.pos, size_t(len), true, valuep, ops);
}

bool EhFrame::cfa_ops(const State& st, Ops& ops) const {
  ops = Ops{};
  switch (st.cfa) {
    case kCfaUndefined: return true;
    case kCfaOffset: ops.push(Op{DW_OP_bregx, st.cfa_reg, st.cfa_off}); return true;
    case kCfaExpr:
      if (st.expr_off > s_.size || st.expr_len > s_.size - st.expr_off) return false;
      return cached_ops(st.expr_off * 4, s_.data + st.expr_off, size_t(st.expr_len), false, false, ops);
    default: return false;
  }
}

int EhFrame::step(const Cie& cie, bool in_cie, size_t& pos, size_t end, uint64_t& loc, State& st,
                  std::vector<State>& stack) const {
  Reader r{s_.data, pos, end};
  auto set_reg = [&](uint64_t reg, uint8_t kind, int64_t value) {
    if (reg >= kMaxRegs) return false;
    if (reg == 6) st.rbp = RegRule{kind, value};
    if (reg == 16) st.ra = RegRule{kind, value};
    return true;
  };
  while (r.pos < r.end) {
    uint8_t opcode;
    r.u8(opcode);
    uint64_t operand = opcode & 0x3f, reg = 0, off = 0, delta = 0;
    int64_t sf = 0;
    bool ok = true, moved = false;
    switch (opcode & 0xc0) {
      case DW_CFA_advance_loc:
        delta = operand, moved = true;
        break;
      case DW_CFA_offset:
        ok = r.uleb(off) && set_reg(operand, kOffset, rule_value(off * uint64_t(cie.data_align)));
        break;
      case DW_CFA_restore:
        reg = operand;
        goto restore;
      default:
        switch (opcode) {
          case DW_CFA_nop:
            break;
          case DW_CFA_advance_loc1: {
            uint8_t x;
            ok = r.u8(x), delta = x, moved = true;
            break;
          }
          case DW_CFA_advance_loc2: {
            uint16_t x;
            ok = r.fixed(x), delta = x, moved = true;
            break;
          }
          case DW_CFA_advance_loc4: {
            uint32_t x;
            ok = r.fixed(x), delta = x, moved = true;
            break;
          }
          case DW_CFA_MIPS_advance_loc8:
            ok = r.fixed(delta), moved = true;
            break;
          case DW_CFA_set_loc:
            if (!read_encoded(s_, 0, cie.fde_encoding, r, loc)) return -1;
            if (in_cie) return -1;
            pos = r.pos;
            return 1;
          case DW_CFA_def_cfa:
            ok = r.uleb(reg) && r.pos < r.end && r.uleb(off);
            st.cfa = kCfaOffset, st.cfa_reg = reg, st.cfa_off = off;
            break;
          case DW_CFA_def_cfa_sf:
            ok = r.uleb(reg) && r.pos < r.end && r.sleb(sf);
            st.cfa = kCfaOffset, st.cfa_reg = reg, st.cfa_off = uint64_t(sf) * uint64_t(cie.data_align);
            break;
          case DW_CFA_def_cfa_register:
            ok = r.uleb(reg);
            if (st.cfa != kCfaOffset) st.cfa = kCfaInvalid;
            st.cfa_reg = reg;
            break;
          case DW_CFA_def_cfa_offset:
            ok = r.uleb(off);
            if (st.cfa != kCfaOffset) st.cfa = kCfaInvalid;
            st.cfa_off = off;
            break;
          case DW_CFA_def_cfa_offset_sf:
            ok = r.sleb(sf);
            if (st.cfa != kCfaOffset) st.cfa = kCfaInvalid;
            st.cfa_off = uint64_t(sf) * uint64_t(cie.data_align);
            break;
          case DW_CFA_def_cfa_expression:
            ok = r.uleb(off) && off <= r.end - r.pos;
            if (ok) st.cfa = kCfaExpr, st.expr_off = r.pos, st.expr_len = off, r.pos += size_t(off);
            break;
          case DW_CFA_undefined:
            ok = r.uleb(reg) && set_reg(reg, kUndefined, 0);
            break;
          case DW_CFA_same_value:
            ok = r.uleb(reg) && set_reg(reg, kSameValue, 0);
            break;
          case DW_CFA_offset_extended:
            ok = r.uleb(reg) && r.pos < r.end && r.uleb(off) &&
                 set_reg(reg, kOffset, rule_value(off * uint64_t(cie.data_align)));
            break;
          case DW_CFA_offset_extended_sf:
            ok = r.uleb(reg) && r.sleb(sf) &&
                 set_reg(reg, kOffset, rule_value(uint64_t(sf) * uint64_t(cie.data_align)));
            break;
          case DW_CFA_GNU_negative_offset_extended:
            ok = r.uleb(reg) && r.pos < r.end && r.uleb(off) &&
                 set_reg(reg, kOffset, rule_value((0 - off) * uint64_t(cie.data_align)));
            break;
          case DW_CFA_val_offset:
            ok = r.uleb(reg) && r.pos < r.end && r.uleb(off) &&
                 set_reg(reg, kValOffset, rule_value(off * uint64_t(cie.data_align)));
            break;
          case DW_CFA_val_offset_sf:
            ok = r.uleb(reg) && r.pos < r.end && r.sleb(sf) &&
                 set_reg(reg, kValOffset, rule_value(uint64_t(sf) * uint64_t(cie.data_align)));
            break;
          case DW_CFA_register:
            ok = r.uleb(reg) && r.pos < r.end && r.uleb(off) && set_reg(reg, kRegister, rule_value(off));
            break;
          case DW_CFA_expression:
          case DW_CFA_val_expression: {
            ok = r.uleb(reg);
            size_t block = r.pos;  // the rule keeps the block's offset (length, then ops)
            ok = ok && (opcode == DW_CFA_val_expression || r.pos < r.end) && r.uleb(off) && off <= r.end - r.pos;
            if (ok) r.pos += size_t(off);
            ok = ok && set_reg(reg, opcode == DW_CFA_expression ? kExpression : kValExpression, int64_t(block));
            break;
          }
          case DW_CFA_restore_extended:
            if (!r.uleb(reg)) return -1;
          restore:
            if (in_cie || reg >= kMaxRegs) return -1;  // no CIE rules to restore yet
            if (reg == 6) st.rbp = cie.initial.rbp;
            if (reg == 16) st.ra = cie.initial.ra;
            break;
          case DW_CFA_remember_state:
            if (stack.size() >= Pass::kMaxStack) return -1;
            stack.push_back(st);
            break;
          case DW_CFA_restore_state:
            if (stack.empty()) return -1;
            st = stack.back();
            stack.pop_back();
            break;
          case DW_CFA_GNU_window_save:  // SPARC's register window; x86-64: r16..31 at CFA+8k
            st.ra = RegRule{kOffset, 0};
            break;
          case DW_CFA_GNU_args_size:
            ok = r.uleb(off);
            break;
          default:
            return -1;
        }
    }
    if (!ok) return -1;
    if (moved) {
      if (in_cie) return -1;  // a CIE's initial instructions make no rows
      loc += delta * cie.code_align;
      pos = r.pos;
      return 1;
    }
  }
  pos = r.pos;
  return 0;
}

Pass::Pass(const EhFrame& ehf, const Fde& fde)
    : ehf_(&ehf), fde_(&fde), pos_(fde.ins), loc_(fde.start), st_(fde.cie->initial) {
  failed_ = fde.cie->init <= 0;
}

bool Pass::query(uint64_t pc, uint64_t& row_end) {
  if (failed_) return false;
  if (moved_) {
    if (loc_ > pc) return row_end = loc_, true;  // the row that advance ended covers pc too
    moved_ = false;
  }
  for (;;) {
    int r = ehf_->step(*fde_->cie, false, pos_, fde_->ins_end, loc_, st_, stack_);
    if (r < 0) return failed_ = true, false;
    if (r == 0) return row_end = fde_->end, true;  // the last rules hold to the FDE's end
    if (loc_ > pc) return moved_ = true, row_end = loc_, true;
  }
}

}  // namespace bpfdiag::cfa
