// Unwind tables from .eh_frame with libdw's CFI interpreter (see unwind_tables.h).
// From docs/design/unwinding-proto/ehtab.cpp (issue 11 design study).
#include "common/unwind_tables.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace bpfdiag {

namespace {
constexpr int kRSP = 7, kRBP = 6, kRA = 16;  // DWARF x86-64 register numbers

// .eh_frame_hdr's sorted FDE initial locations (table_enc datarel|sdata4, what every
// toolchain emits) and the size of .eh_frame.
bool fde_starts(Elf* elf, std::vector<uint64_t>& starts, uint64_t& ehf_size, std::string& err) {
  size_t shstrndx;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return err = "no section names", false;
  Elf_Scn* scn = nullptr;
  Elf_Data* hdr = nullptr;
  uint64_t hdr_addr = 0;
  while ((scn = elf_nextscn(elf, scn))) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    const char* n = elf_strptr(elf, shstrndx, sh.sh_name);
    if (!n) continue;
    if (!strcmp(n, ".eh_frame_hdr") && sh.sh_type == SHT_PROGBITS)
      hdr = elf_getdata(scn, nullptr), hdr_addr = sh.sh_addr;
    if (!strcmp(n, ".eh_frame")) ehf_size = sh.sh_size;
  }
  if (!hdr || !hdr->d_buf || hdr->d_size < 12) return err = "no .eh_frame_hdr", false;
  auto* p = static_cast<const uint8_t*>(hdr->d_buf);
  if (p[0] != 1 || p[2] != 0x03 || p[3] != 0x3b) return err = "unsupported .eh_frame_hdr encoding", false;
  uint32_t count;
  memcpy(&count, p + 8, 4);
  if (12 + uint64_t(count) * 8 > hdr->d_size) return err = "truncated .eh_frame_hdr", false;
  starts.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    int32_t loc;
    memcpy(&loc, p + 12 + uint64_t(i) * 8, 4);
    starts.push_back(hdr_addr + int64_t(loc));
  }
  return true;
}

struct Rule {
  uint8_t cfa_type;
  int64_t cfa_off;
  uint8_t rbp_type;
  int64_t rbp_off;
  bool operator==(const Rule& o) const {
    return cfa_type == o.cfa_type && cfa_off == o.cfa_off && rbp_type == o.rbp_type && rbp_off == o.rbp_off;
  }
};

// "saved at CFA+N": [DW_OP_call_frame_cfa] or [.., plus_uconst N | consts N, plus]
bool at_cfa(Dwarf_Op* ops, size_t n, int64_t& off) {
  if (n < 1 || ops[0].atom != DW_OP_call_frame_cfa) return false;
  if (n == 1) return off = 0, true;
  if (n == 2 && ops[1].atom == DW_OP_plus_uconst) return off = int64_t(ops[1].number), true;
  if (n == 3 && (ops[1].atom == DW_OP_consts || ops[1].atom == DW_OP_constu) && ops[2].atom == DW_OP_plus)
    return off = int64_t(ops[1].number), true;
  return false;
}

Rule classify(Dwarf_Frame* fr, UnwindTableStats& st) {
  Rule r{UW_CFA_NONE, 0, UW_RBP_SAME, 0};
  Dwarf_Op* ops = nullptr;
  size_t n = 0;
  int reg = -1;
  int64_t off = 0;
  if (dwarf_frame_cfa(fr, &ops, &n) == 0 && n == 1) {
    if (ops[0].atom == DW_OP_bregx) reg = int(ops[0].number), off = int64_t(ops[0].number2);
    else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31)
      reg = ops[0].atom - DW_OP_breg0, off = int64_t(ops[0].number);
  }
  if (reg == kRSP || reg == kRBP) {
    r.cfa_type = reg == kRSP ? UW_CFA_RSP : UW_CFA_RBP;
    r.cfa_off = off;
  } else if (n == 9 && ops[0].atom == DW_OP_breg7 && ops[1].atom == DW_OP_breg16) {
    r.cfa_type = UW_CFA_PLT;  // rsp+8, +8 more past the push in each .plt entry
    st.cfa_plt++;
  } else {
    st.cfa_unsupported++;  // e.g. the signal trampoline's expressions
    return r;
  }
  Dwarf_Op mem[3];
  if (dwarf_frame_register(fr, kRA, mem, &ops, &n) == 0) {
    if (n == 0 && ops == mem) {  // undefined: the outermost frame
      st.ra_undefined++;
      r.cfa_type = UW_CFA_END;
      return r;
    }
    if (!at_cfa(ops, n, off) || off != -8) {
      st.ra_not_cfa_minus_8++;
      r.cfa_type = UW_CFA_NONE;
      return r;
    }
  }
  if (dwarf_frame_register(fr, kRBP, mem, &ops, &n) == 0 && n == 0 && ops == nullptr) {
    r.rbp_type = UW_RBP_SAME;
  } else if (dwarf_frame_register(fr, kRBP, mem, &ops, &n) == 0 && at_cfa(ops, n, off) && off % 8 == 0 &&
             off / 8 >= -128 && off / 8 <= 127) {
    r.rbp_type = UW_RBP_AT_CFA, r.rbp_off = off;
  } else {
    r.rbp_type = UW_RBP_UNDEF, st.rbp_unsupported++;
  }
  if (r.cfa_off < INT16_MIN || r.cfa_off > INT16_MAX) {
    st.off_overflow++;
    r.cfa_type = UW_CFA_NONE;
    r.cfa_off = 0;
  }
  return r;
}

std::string build_id_of(Elf* elf) {
  const void* id = nullptr;
  ssize_t n = dwelf_elf_gnu_build_id(elf, &id);
  std::string out;
  static const char kHex[] = "0123456789abcdef";
  for (ssize_t i = 0; id && i < n && i < 64; ++i) {
    uint8_t b = static_cast<const uint8_t*>(id)[i];
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

void read_loads(Elf* elf, UnwindTable& t) {
  size_t n = 0;
  if (elf_getphdrnum(elf, &n) != 0) return;
  for (size_t i = 0; i < n; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, int(i), &ph) && ph.p_type == PT_LOAD) t.loads.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz});
  }
}

void build_rows(Elf* elf, UnwindTable& t) {
  std::vector<uint64_t> starts;
  UnwindTableStats& st = t.st;
  if (!fde_starts(elf, starts, st.eh_frame_bytes, t.error)) return;
  Dwarf_CFI* cfi = dwarf_getcfi_elf(elf);
  if (!cfi) {
    t.error = "no CFI";
    return;
  }
  std::sort(starts.begin(), starts.end());
  st.fdes = starts.size();
  if (!starts.empty() && starts.back() > UINT32_MAX) {
    t.error = "code above 4 GiB (rows hold 32-bit addresses)";
    dwarf_cfi_end(cfi);
    return;
  }
  auto& rows = t.rows;
  Rule last{0xff, 0, 0, 0};
  auto emit = [&](uint64_t pc, const Rule& r) {
    if (!rows.empty() && r == last) return;  // the same rule continues: no new row
    uw_row row{};
    row.pc = uint32_t(pc);
    row.cfa_off = int16_t(r.cfa_off);
    row.types = uint8_t(r.cfa_type | r.rbp_type << 4);
    row.rbp_off8 = int8_t(r.rbp_off / 8);
    rows.push_back(row);
    last = r;
  };
  // Each FDE row by row (dwarf_frame_info gives the row's [start, end)) up to the
  // next FDE's start; where the previous FDE ended before it, a NONE row (gap).
  uint64_t end = 0;
  for (size_t i = 0; i < starts.size(); ++i) {
    uint64_t pc = starts[i];
    if (pc < end) continue;  // overlapping FDE (the previous one covered it)
    if (end && end < pc) {
      st.gaps++;
      emit(end, Rule{UW_CFA_NONE, 0, UW_RBP_SAME, 0});
    }
    uint64_t limit = i + 1 < starts.size() ? starts[i + 1] : UINT64_MAX;
    while (pc < limit) {
      Dwarf_Frame* fr = nullptr;
      if (dwarf_cfi_addrframe(cfi, pc, &fr) != 0) break;  // past the FDE's end
      Dwarf_Addr s = 0, e = 0;
      bool sig = false;
      dwarf_frame_info(fr, &s, &e, &sig);
      emit(pc, classify(fr, st));
      free(fr);
      if (e <= pc) break;
      pc = e;
    }
    end = std::max(end, pc);
  }
  if (end && end <= UINT32_MAX) emit(end, Rule{UW_CFA_NONE, 0, UW_RBP_SAME, 0});  // past the last FDE
  st.rows = rows.size();
  t.has_cfi = !rows.empty();
  dwarf_cfi_end(cfi);
}

// header counts and allocated blocks checked before libelf allocates (untrusted_file.h)
Elf* open_elf(const UntrustedFile& f) { return open_elf_untrusted(f); }

}  // namespace

std::optional<uint64_t> UnwindTable::bias_for(uint64_t start, uint64_t offset) const {
  for (auto& l : loads)
    if (offset >= l.offset && offset < l.offset + std::max<uint64_t>(l.filesz, 1))
      return start - (l.vaddr + (offset - l.offset));
  return std::nullopt;
}

std::shared_ptr<const UnwindTable> build_unwind_table(const UntrustedFile& f) {
  auto t0 = std::chrono::steady_clock::now();
  auto t = std::make_shared<UnwindTable>();
  Elf* elf = open_elf(f);
  if (!elf) {
    t->error = "not an ELF file";
  } else {
    t->build_id = build_id_of(elf);
    read_loads(elf, *t);
    build_rows(elf, *t);
    elf_end(elf);
  }
  t->st.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

std::shared_ptr<const UnwindTable> UnwindTableCache::get(const std::shared_ptr<UntrustedFile>& f) {
  if (!f) return nullptr;
  std::string ident = f->identity();
  auto k = identity_to_key_.find(ident);
  if (k != identity_to_key_.end()) return by_key_[k->second];
  std::string key = "f:" + ident;
  if (Elf* elf = open_elf(*f)) {  // the same build-id under another path or inode
    std::string id = build_id_of(elf);
    elf_end(elf);
    if (!id.empty()) key = "b:" + id;
  }
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    auto t = build_unwind_table(*f);
    build_ms_ += t->st.build_ms;
    it = by_key_.emplace(key, t).first;
  }
  identity_to_key_[ident] = key;
  return it->second;
}

}  // namespace bpfdiag
