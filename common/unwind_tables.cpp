// Unwind tables from .eh_frame: common/cfa_program runs each FDE's CFA program once,
// classify() turns each row's rules into a uw_row (see unwind_tables.h). The unit test
// compares the rows with libdw's dwarf_cfi_addrframe on real files.
#include "common/unwind_tables.h"

#include "common/cfa_program.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <cstring>

namespace bpfdiag {

namespace {
constexpr int kRSP = 7, kRBP = 6, kRA = 16;  // DWARF x86-64 register numbers

// Caps on what one file can make us build (issue 19: a crafted FDE whose program had
// 300k rows took 211 s with the old O(rows²) builder; the build is now linear, these
// bound the table). Measured here (rows as emitted, one per rule change): the FDE with
// most rows has 2,636 (libclang-cpp.so.14), then 544 (libLLVM-15), 509 (libjvm 17), 44
// (libc); the files with most rows: libclang-cpp.so.14 1,000,498, libLLVM-15.so.1
// 979,067, libjvm.so (temurin 25) 230,774, mariadbd 149,747, libc 28,273. The caps
// leave 25x and 4x of room.
constexpr uint64_t kMaxRowsPerFde = 1 << 16;
constexpr uint64_t kMaxRowsPerFile = 1 << 22;  // 32 MiB of rows
// CFA-program bytes interpreted per file, as a multiple of .eh_frame's size (each FDE's
// program runs once, so real files use 1x; more only if lookups alternate between
// overlapping FDEs, which restarts their programs).
constexpr uint64_t kWorkPerEhFrameByte = 4;

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
bool at_cfa(const cfa::Ops& o, int64_t& off) {
  size_t n = o.n;
  const cfa::Op* ops = o.op;
  if (n < 1 || ops[0].atom != DW_OP_call_frame_cfa) return false;
  if (n == 1) return off = 0, true;
  if (n == 2 && ops[1].atom == DW_OP_plus_uconst) return off = int64_t(ops[1].number), true;
  if (n == 3 && (ops[1].atom == DW_OP_consts || ops[1].atom == DW_OP_constu) && ops[2].atom == DW_OP_plus)
    return off = int64_t(ops[1].number), true;
  return false;
}

// A register rule as DWARF ops (libdw's dwarf_frame_register, which the rules below
// were written against): false when its expression is malformed; `same` for "same
// value" (no location), no ops for undefined.
bool reg_location(const cfa::EhFrame& ehf, const cfa::RegRule& r, cfa::Ops& ops, bool& same) {
  ops = cfa::Ops{};
  same = false;
  switch (r.kind) {
    case cfa::kSameValue: same = true; return true;
    case cfa::kOffset:
    case cfa::kValOffset:
      ops.push({DW_OP_call_frame_cfa, 0, 0});
      if (r.value != 0) ops.push({DW_OP_plus_uconst, uint64_t(r.value), 0});
      if (r.kind == cfa::kValOffset) ops.push({DW_OP_stack_value, 0, 0});
      return true;
    case cfa::kRegister: ops.push({DW_OP_regx, uint64_t(r.value), 0}); return true;
    case cfa::kExpression:
    case cfa::kValExpression: return ehf.reg_ops(r, ops);
    default: return true;  // unspecified, undefined
  }
}

Rule classify(const cfa::EhFrame& ehf, const cfa::State& s, UnwindTableStats& st) {
  Rule r{UW_CFA_NONE, 0, UW_RBP_SAME, 0};
  int reg = -1;
  int64_t off = 0;
  cfa::Ops o;
  if (!ehf.cfa_ops(s, o)) o = cfa::Ops{};
  size_t n = o.n;
  const cfa::Op* ops = o.op;
  if (n == 1) {
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
  bool same = false;
  if (reg_location(ehf, s.ra, o, same)) {  // (a malformed expression: not checked)
    if (o.n == 0 && !same) {  // undefined: the outermost frame
      st.ra_undefined++;
      r.cfa_type = UW_CFA_END;
      return r;
    }
    if (!at_cfa(o, off) || off != -8) {
      st.ra_not_cfa_minus_8++;
      r.cfa_type = UW_CFA_NONE;
      return r;
    }
  }
  bool ok = reg_location(ehf, s.rbp, o, same);
  if (ok && same) {
    r.rbp_type = UW_RBP_SAME;
  } else if (ok && at_cfa(o, off) && off % 8 == 0 && off / 8 >= -128 && off / 8 <= 127) {
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

// The raw bytes of .eh_frame (the first, as libdw takes it) and .eh_frame_hdr.
bool cfi_sections(Elf* elf, cfa::Section& eh, cfa::Section& hdr, std::string& err) {
  size_t shstrndx;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return err = "no section names", false;
  GElf_Ehdr ehdr;
  if (!gelf_getehdr(elf, &ehdr)) return err = "no ELF header", false;
  Elf_Scn* scn = nullptr;
  bool have_eh = false;
  while ((scn = elf_nextscn(elf, scn))) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh)) continue;
    const char* n = elf_strptr(elf, shstrndx, sh.sh_name);
    if (!n) continue;
    bool is_hdr = !strcmp(n, ".eh_frame_hdr") && (sh.sh_type == SHT_PROGBITS || sh.sh_type == SHT_X86_64_UNWIND) && !hdr.data;
    bool is_eh = !strcmp(n, ".eh_frame") && !have_eh;
    if (!is_hdr && !is_eh) continue;
    Elf_Data* d = sh.sh_type == SHT_NOBITS ? nullptr : elf_rawdata(scn, nullptr);
    cfa::Section& s = is_hdr ? hdr : eh;
    if (is_eh) have_eh = true;
    s.elf64 = ehdr.e_ident[EI_CLASS] == ELFCLASS64;
    s.vaddr = sh.sh_addr;
    if (d && d->d_buf) s.data = static_cast<const uint8_t*>(d->d_buf), s.size = d->d_size;
  }
  if (!hdr.data || hdr.size < 12) return err = "no .eh_frame_hdr", false;
  if (!eh.data) return err = "no CFI", false;
  return true;
}

void build_rows(Elf* elf, UnwindTable& t, const UnwindTableLimits& lim) {
  UnwindTableStats& st = t.st;
  cfa::Section eh, hs;
  bool ok = cfi_sections(elf, eh, hs, t.error);
  st.eh_frame_bytes = eh.size;
  if (!ok) return;
  cfa::HdrTable hdr;
  if (!hdr.parse(hs, eh.vaddr, t.error)) return;
  std::vector<uint64_t> starts(hdr.size());
  for (size_t i = 0; i < starts.size(); ++i) starts[i] = hdr.start(i);
  std::sort(starts.begin(), starts.end());
  st.fdes = starts.size();
  if (!starts.empty() && starts.back() > UINT32_MAX) {
    t.error = "code above 4 GiB (rows hold 32-bit addresses)";
    return;
  }
  cfa::EhFrame ehf(eh);
  auto& rows = t.rows;
  const Rule kNone{UW_CFA_NONE, 0, UW_RBP_SAME, 0};
  Rule last{0xff, 0, 0, 0};
  bool full = false;  // rows_per_file reached (or the work budget): a NONE row ends the table
  bool over_budget = false;
  auto push = [&](uint64_t pc, const Rule& r) {
    uw_row row{};
    row.pc = uint32_t(pc);
    row.cfa_off = int16_t(r.cfa_off);
    row.types = uint8_t(r.cfa_type | r.rbp_type << 4);
    row.rbp_off8 = int8_t(r.rbp_off / 8);
    rows.push_back(row);
    last = r;
  };
  auto emit = [&](uint64_t pc, const Rule& r) {
    if (full) return false;
    if (!rows.empty() && r == last) return true;  // the same rule continues: no new row
    if (rows.size() + 2 > lim.rows_per_file) {      // room for the NONE row that ends the table
      full = true;
      if (!(last == kNone)) push(pc, kNone);
      return false;
    }
    push(pc, r);
    return true;
  };
  std::optional<cfa::Pass> pass;  // the FDE being run, resumed row after row
  uint64_t work = 0, budget = kWorkPerEhFrameByte * eh.size + (1 << 20);
  auto consumed = [&] { return pass ? uint64_t(pass->consumed()) : 0; };
  // Each FDE row by row (a query gives the row's end) up to the next FDE's start; where
  // the previous FDE ended before it, a NONE row (gap).
  uint64_t end = 0;
  for (size_t i = 0; i < starts.size() && !full; ++i) {
    uint64_t pc = starts[i];
    if (pc < end) continue;  // overlapping FDE (the previous one covered it)
    if (end && end < pc) {
      st.gaps++;
      if (!emit(end, kNone)) break;
    }
    uint64_t limit = i + 1 < starts.size() ? starts[i + 1] : UINT64_MAX;
    size_t fde_rows = 0;
    while (pc < limit && pc <= UINT32_MAX) {
      const cfa::Fde* f = ehf.find(hdr, pc);
      if (!f || !ehf.initial_state(*f->cie)) {  // past the FDE's end, or malformed
        if (pc == starts[i]) st.fdes_malformed++;
        break;
      }
      if (!pass || &pass->fde() != f) {
        work += consumed();
        pass.emplace(ehf, *f);
      }
      uint64_t e = 0;
      bool ok = pass->query(pc, e);
      if (work + consumed() > budget) {  // only overlapping FDEs get here
        st.work_capped++;
        emit(pc, kNone);
        full = over_budget = true;
        break;
      }
      if (!ok) {  // malformed from this row on
        st.fdes_malformed++;
        break;
      }
      if (fde_rows >= lim.rows_per_fde) {  // the rest of this FDE: no table
        st.fde_rows_capped++;
        emit(pc, kNone);
        pc = std::min(limit, f->end);
        break;
      }
      size_t before = rows.size();
      if (!emit(pc, classify(ehf, pass->state(), st))) break;
      fde_rows += rows.size() - before;
      if (e <= pc) break;
      pc = e;
    }
    end = std::max(end, pc);
  }
  if (full) {
    if (!over_budget) st.file_rows_capped++;
  } else if (end && end <= UINT32_MAX) {
    emit(end, kNone);  // past the last FDE
  }
  st.rows = rows.size();
  t.has_cfi = !rows.empty();
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

UnwindTableLimits::UnwindTableLimits() : rows_per_fde(kMaxRowsPerFde), rows_per_file(kMaxRowsPerFile) {}

std::shared_ptr<const UnwindTable> build_unwind_table(const UntrustedFile& f, const UnwindTableLimits& limits) {
  auto t0 = std::chrono::steady_clock::now();
  auto t = std::make_shared<UnwindTable>();
  Elf* elf = open_elf(f);
  if (!elf) {
    t->error = "not an ELF file";
  } else {
    t->build_id = build_id_of(elf);
    read_loads(elf, *t);
    build_rows(elf, *t, limits);
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
    totals_.fdes_malformed += t->st.fdes_malformed;
    totals_.fde_rows_capped += t->st.fde_rows_capped;
    totals_.file_rows_capped += t->st.file_rows_capped;
    totals_.work_capped += t->st.work_capped;
    it = by_key_.emplace(key, t).first;
  }
  identity_to_key_[ident] = key;
  return it->second;
}

}  // namespace bpfdiag
