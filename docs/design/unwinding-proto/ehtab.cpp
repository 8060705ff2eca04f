#include "ehtab.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace ehtab {

namespace {
constexpr int kRSP = 7, kRBP = 6, kRA = 16;

// .eh_frame_hdr search table: sorted FDE initial locations. Handles the encoding every
// toolchain emits (table_enc = DW_EH_PE_datarel|DW_EH_PE_sdata4 = 0x3b).
bool fde_starts(Elf* elf, std::vector<uint64_t>& starts, uint64_t& ehf_size, std::string& err) {
  size_t shstrndx;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return err = "no section names", false;
  Elf_Scn* scn = nullptr;
  Elf_Data* hdr = nullptr;
  uint64_t hdr_addr = 0;
  while ((scn = elf_nextscn(elf, scn))) {
    GElf_Shdr sh;
    gelf_getshdr(scn, &sh);
    const char* n = elf_strptr(elf, shstrndx, sh.sh_name);
    if (!n) continue;
    if (!strcmp(n, ".eh_frame_hdr")) hdr = elf_getdata(scn, nullptr), hdr_addr = sh.sh_addr;
    if (!strcmp(n, ".eh_frame")) ehf_size = sh.sh_size;
  }
  if (!hdr || hdr->d_size < 12) return err = "no .eh_frame_hdr", false;
  auto* p = static_cast<const uint8_t*>(hdr->d_buf);
  if (p[0] != 1 || p[2] != 0x03 || p[3] != 0x3b || p[1] != 0x1b)
    return err = "unsupported .eh_frame_hdr encoding", false;
  uint32_t count;
  memcpy(&count, p + 8, 4);
  if (12 + uint64_t(count) * 8 > hdr->d_size) return err = "truncated .eh_frame_hdr", false;
  starts.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    int32_t loc;
    memcpy(&loc, p + 12 + i * 8, 4);
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

// "saved at CFA+N": libdw gives [DW_OP_call_frame_cfa] or [.., DW_OP_plus_uconst/consts+plus]
bool at_cfa(Dwarf_Op* ops, size_t n, int64_t& off) {
  if (n < 1 || ops[0].atom != DW_OP_call_frame_cfa) return false;
  if (n == 1) return off = 0, true;
  if (n == 2 && ops[1].atom == DW_OP_plus_uconst) return off = int64_t(ops[1].number), true;
  if (n == 3 && (ops[1].atom == DW_OP_consts || ops[1].atom == DW_OP_constu) && ops[2].atom == DW_OP_plus)
    return off = int64_t(ops[1].number), true;
  return false;
}

Rule classify(Dwarf_Frame* fr, Stats& st) {
  Rule r{CFA_NONE, 0, RBP_SAME, 0};
  Dwarf_Op* ops;
  size_t n;
  if (dwarf_frame_cfa(fr, &ops, &n) == 0 && n == 1 && ops[0].atom == DW_OP_bregx &&
      (ops[0].number == kRSP || ops[0].number == kRBP)) {
    r.cfa_type = ops[0].number == kRSP ? CFA_RSP : CFA_RBP;
    r.cfa_off = int64_t(ops[0].number2);
  } else if (dwarf_frame_cfa(fr, &ops, &n) == 0 && n == 1 && ops[0].atom >= DW_OP_breg0 &&
             ops[0].atom <= DW_OP_breg31 && (ops[0].atom - DW_OP_breg0 == kRSP || ops[0].atom - DW_OP_breg0 == kRBP)) {
    r.cfa_type = ops[0].atom - DW_OP_breg0 == kRSP ? CFA_RSP : CFA_RBP;
    r.cfa_off = int64_t(ops[0].number);
  } else if (n == 9 && ops[0].atom == DW_OP_breg7 && ops[1].atom == DW_OP_breg16) {
    r.cfa_type = CFA_PLT;  // the .plt idiom: rsp+8, +8 more past the push in each entry
    st.cfa_plt++;
  } else {
    st.cfa_expr_unsupported++;
    return r;
  }
  Dwarf_Op mem[3];
  if (dwarf_frame_register(fr, kRA, mem, &ops, &n) == 0) {
    int64_t off;
    if (n == 0 && ops == mem) {
      st.ra_undefined++;  // outermost frame (_start, clone3's child): stack ends here
      r.cfa_type = CFA_END;
      return r;
    }
    if (!at_cfa(ops, n, off) || off != -8) {
      st.ra_not_cfa_minus_8++;
      r.cfa_type = CFA_NONE;
      return r;
    }
  }
  if (dwarf_frame_register(fr, kRBP, mem, &ops, &n) == 0) {
    int64_t off;
    if (n == 0 && ops == nullptr)
      r.rbp_type = RBP_SAME;
    else if (at_cfa(ops, n, off) && off % 8 == 0 && off / 8 >= -128 && off / 8 <= 127)
      r.rbp_type = RBP_AT_CFA, r.rbp_off = off;
    else
      r.rbp_type = RBP_UNDEF, st.rbp_unsupported++;
  } else {
    r.rbp_type = RBP_UNDEF, st.rbp_unsupported++;
  }
  if (r.cfa_off < INT16_MIN || r.cfa_off > INT16_MAX) {
    st.off_overflow++;
    r.cfa_type = CFA_NONE;
  }
  return r;
}
}  // namespace

bool build(const std::string& path, Table& out, std::string& err) {
  auto t0 = std::chrono::steady_clock::now();
  elf_version(EV_CURRENT);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return err = "cannot open " + path, false;
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  std::vector<uint64_t> starts;
  Stats& st = out.st;
  bool ok = elf && fde_starts(elf, starts, st.eh_frame_bytes, err);
  Dwarf_CFI* cfi = ok ? dwarf_getcfi_elf(elf) : nullptr;
  if (ok && !cfi) ok = false, err = "no CFI";
  if (ok) {
    std::sort(starts.begin(), starts.end());
    st.fdes = starts.size();
    auto& rows = out.rows;
    Rule last{0xff, 0, 0, 0};
    auto emit = [&](uint64_t pc, const Rule& r) {
      st.raw_rows++;
      if (!rows.empty() && r == last) return;  // same rule continues: no new row
      Row row{};
      row.pc = uint32_t(pc);
      row.cfa_off = int16_t(r.cfa_off);
      row.types = uint8_t(r.cfa_type | r.rbp_type << 4);
      row.rbp_off8 = int8_t(r.rbp_off / 8);
      rows.push_back(row);
      last = r;
    };
    size_t i = 0;
    uint64_t pc = starts.empty() ? 0 : starts[0];
    while (i < starts.size()) {
      Dwarf_Frame* fr = nullptr;
      if (dwarf_cfi_addrframe(cfi, pc, &fr) == 0) {
        Dwarf_Addr s, e;
        bool sig;
        dwarf_frame_info(fr, &s, &e, &sig);
        emit(pc, classify(fr, st));
        free(fr);
        pc = e > pc ? e : pc + 1;
        while (i < starts.size() && starts[i] < pc) ++i;
      } else {
        // no FDE covers pc: a gap until the next FDE
        st.gaps++;
        emit(pc, Rule{CFA_NONE, 0, RBP_SAME, 0});
        while (i < starts.size() && starts[i] <= pc) ++i;
        if (i < starts.size()) pc = starts[i];
      }
    }
    st.rows = rows.size();
  }
  if (cfi) dwarf_cfi_end(cfi);
  if (elf) elf_end(elf);
  close(fd);
  st.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return ok;
}

}  // namespace ehtab
