// Unwind table builder (common/unwind_tables) checked row by row against binutils'
// own CFI interpreter (`readelf --debug-dump=frames-interp`) on our stripped
// libunwind_blk.so and on the system's libc; row for row against the libdw-based
// builder it replaced (kept here as the reference) on the largest real libraries;
// hostile CFA programs (issue 19: one FDE, 300k rows) built in linear time with the
// caps counted; plus the cache and the refusals.
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <glob.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "common/unwind_tables.h"
#include "tests/unit/elf_image.h"
#include "tests/unit/stopwatch.h"
#include "tests/unit/test_env.h"

using namespace bpfdiag;

namespace {

std::shared_ptr<UntrustedFile> open_file(const std::string& path) {
  UntrustedPolicy pol;
  pol.follow_links = true;  // test inputs we chose (libc.so.6 is a link)
  return open_untrusted(path, pol).file;
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

const uw_row* lookup(const UnwindTable& t, uint64_t pc) {
  auto it = std::upper_bound(t.rows.begin(), t.rows.end(), pc,
                             [](uint64_t v, const uw_row& r) { return v < r.pc; });
  return it == t.rows.begin() ? nullptr : &*(it - 1);
}

// ---- The reference: the builder issue 11 shipped (libdw's dwarf_cfi_addrframe per row,
// which re-runs the FDE's program from its start: O(rows²)), unchanged but for names.
namespace ref {
constexpr int kRSP = 7, kRBP = 6, kRA = 16;

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
    // (SHT_X86_64_UNWIND too, as the new builder takes it: lld's type, libLLVM's sections)
    if (!strcmp(n, ".eh_frame_hdr") && (sh.sh_type == SHT_PROGBITS || sh.sh_type == SHT_X86_64_UNWIND))
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
    r.cfa_type = UW_CFA_PLT;
    st.cfa_plt++;
  } else {
    st.cfa_unsupported++;
    return r;
  }
  Dwarf_Op mem[3];
  if (dwarf_frame_register(fr, kRA, mem, &ops, &n) == 0) {
    if (n == 0 && ops == mem) {
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
    if (!rows.empty() && r == last) return;
    uw_row row{};
    row.pc = uint32_t(pc);
    row.cfa_off = int16_t(r.cfa_off);
    row.types = uint8_t(r.cfa_type | r.rbp_type << 4);
    row.rbp_off8 = int8_t(r.rbp_off / 8);
    rows.push_back(row);
    last = r;
  };
  uint64_t end = 0;
  for (size_t i = 0; i < starts.size(); ++i) {
    uint64_t pc = starts[i];
    if (pc < end) continue;
    if (end && end < pc) {
      st.gaps++;
      emit(end, Rule{UW_CFA_NONE, 0, UW_RBP_SAME, 0});
    }
    uint64_t limit = i + 1 < starts.size() ? starts[i + 1] : UINT64_MAX;
    while (pc < limit) {
      Dwarf_Frame* fr = nullptr;
      if (dwarf_cfi_addrframe(cfi, pc, &fr) != 0) break;
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
  if (end && end <= UINT32_MAX) emit(end, Rule{UW_CFA_NONE, 0, UW_RBP_SAME, 0});
  st.rows = rows.size();
  t.has_cfi = !rows.empty();
  dwarf_cfi_end(cfi);
}

UnwindTable build(const std::string& path) {
  UnwindTable t;
  elf_version(EV_CURRENT);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return t;
  auto t0 = std::chrono::steady_clock::now();
  if (Elf* e = elf_begin(fd, ELF_C_READ, nullptr)) {
    if (elf_kind(e) == ELF_K_ELF) build_rows(e, t);
    elf_end(e);
  }
  t.st.build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  close(fd);
  return t;
}
}  // namespace ref

// ---- Crafted CFI: a minimal ELF64 (one PT_LOAD, .eh_frame_hdr, .eh_frame) whose FDEs
// carry the given CFA programs, to run hostile and random programs through both builders.
struct CraftedFde {
  uint64_t start, range;
  std::string program;
};

void put(std::string& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b += char((v >> (8 * i)) & 0xff);
}
void put_at(std::string& b, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[at + i] = char((v >> (8 * i)) & 0xff);
}
std::string uleb(uint64_t v) {
  std::string o;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    o += char(v ? b | 0x80 : b);
  } while (v);
  return o;
}
std::string sleb(int64_t v) {
  std::string o;
  for (;;) {
    uint8_t b = v & 0x7f;
    v >>= 7;
    bool done = (v == 0 && !(b & 0x40)) || (v == -1 && (b & 0x40));
    o += char(done ? b : b | 0x80);
    if (done) return o;
  }
}

// CIE: "zR", code align 1, data align -8, RA column 16, FDE pointers pcrel|sdata4;
// initial rules CFA = rsp+8, RA at CFA-8 (unless cie_program is given).
std::string crafted_elf(const std::vector<CraftedFde>& fdes, const std::string* cie_program = nullptr,
                        uint32_t section_type = SHT_PROGBITS) {
  const uint64_t kHdr = 0x200;
  std::string eh;  // .eh_frame, at vaddr kEh (after the header)
  std::string cie;
  put(cie, 0, 4);                                  // CIE id
  cie += char(1);                                  // version
  cie += std::string("zR", 3);                     // augmentation (with its NUL)
  cie += uleb(1) + sleb(-8) + char(16) + uleb(1);  // factors, RA, aug data length
  cie += char(0x1b);                               // FDE encoding
  cie += cie_program ? *cie_program : std::string("\x0c\x07\x08\x90\x01", 5);
  while ((cie.size() + 4) % 8) cie += char(0);
  put(eh, cie.size(), 4);
  eh += cie;
  std::vector<size_t> fde_off;
  size_t hdr_size = 12 + 8 * fdes.size();
  uint64_t kEh = kHdr + ((hdr_size + 15) & ~size_t(15));
  for (auto& f : fdes) {
    fde_off.push_back(eh.size());
    std::string body;
    put(body, eh.size() + 4, 4);  // CIE pointer: back to offset 0
    body += "....";               // pc_begin (pcrel, filled below)
    put(body, f.range, 4);
    body += uleb(0) + f.program;
    while ((body.size() + 4) % 8) body += char(0);
    size_t at = eh.size();
    put(eh, body.size(), 4);
    eh += body;
    put_at(eh, at + 8, uint64_t(int64_t(f.start) - int64_t(kEh + at + 8)), 4);
  }
  put(eh, 0, 4);  // terminator
  std::string hdr;
  hdr += std::string("\x01\x1b\x03\x3b", 4);
  put(hdr, uint64_t(int64_t(kEh) - int64_t(kHdr + 4)), 4);
  put(hdr, fdes.size(), 4);
  std::vector<size_t> order(fdes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return fdes[a].start < fdes[b].start; });
  for (size_t i : order) {
    put(hdr, uint64_t(int64_t(fdes[i].start) - int64_t(kHdr)), 4);
    put(hdr, uint64_t(int64_t(kEh + fde_off[i]) - int64_t(kHdr)), 4);
  }
  std::string shstr("\0.eh_frame_hdr\0.eh_frame\0.shstrtab\0", 35);
  std::string img(kHdr, '\0');
  img += hdr;
  img.resize(kEh, '\0');
  img += eh;
  size_t shstr_off = img.size();
  img += shstr;
  while (img.size() % 8) img += char(0);
  size_t shoff = img.size();
  uint64_t memsz = img.size();
  for (auto& f : fdes) memsz = std::max(memsz, f.start + f.range);
  auto shdr = [&](uint32_t name, uint32_t type, uint64_t flags, uint64_t addr, uint64_t off, uint64_t size) {
    put(img, name, 4), put(img, type, 4), put(img, flags, 8), put(img, addr, 8), put(img, off, 8);
    put(img, size, 8), put(img, 0, 4), put(img, 0, 4), put(img, 8, 8), put(img, 0, 8);
  };
  img.append(64, '\0');  // null section
  shdr(1, section_type, SHF_ALLOC, kHdr, kHdr, hdr.size());
  shdr(15, section_type, SHF_ALLOC, kEh, kEh, eh.size());
  shdr(25, SHT_STRTAB, 0, 0, shstr_off, shstr.size());
  std::string e("\x7f" "ELF\x02\x01\x01", 7);
  e.resize(16, '\0');
  put(e, ET_DYN, 2), put(e, EM_X86_64, 2), put(e, 1, 4), put(e, 0, 8), put(e, 64, 8), put(e, shoff, 8);
  put(e, 0, 4), put(e, 64, 2), put(e, 56, 2), put(e, 1, 2), put(e, 64, 2), put(e, 4, 2), put(e, 3, 2);
  put(e, PT_LOAD, 4), put(e, PF_R | PF_X, 4), put(e, 0, 8), put(e, 0, 8), put(e, 0, 8);  // one PT_LOAD
  put(e, img.size(), 8), put(e, memsz, 8), put(e, 0x1000, 8);
  img.replace(0, e.size(), e);
  return img;
}

using TempFile = bpfdiag_test::ElfImageFile;  // crafted bytes in a private file

// n rows of one FDE: advance 1 byte, CFA offset 8k (every row a new rule)
std::string rows_program(size_t n) {
  std::string p;
  for (size_t k = 0; k < n; ++k) p += std::string("\x02\x01\x0e", 3) + uleb(8 * (k % 4000 + 2));
  return p;
}

bool same_rows(const std::vector<uw_row>& a, const std::vector<uw_row>& b, std::string& first) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (memcmp(&a[i], &b[i], sizeof(uw_row)) != 0) {
      char buf[200];
      snprintf(buf, sizeof buf, "row %zu: pc %#x types %#x off %d rbp8 %d, libdw pc %#x types %#x off %d rbp8 %d", i,
               a[i].pc, a[i].types, a[i].cfa_off, a[i].rbp_off8, b[i].pc, b[i].types, b[i].cfa_off, b[i].rbp_off8);
      first = buf;
      return false;
    }
  if (a.size() != b.size()) first = "row counts " + std::to_string(a.size()) + " vs libdw " + std::to_string(b.size());
  return a.size() == b.size();
}

std::vector<std::string> globbed(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  globfree(&g);
  return out;
}

struct Compared {
  size_t rows = 0, mismatches = 0, fdes = 0, exp_rows = 0, overflow_rows = 0;
  std::string first_bad;
};

// Every row readelf prints: our table must give the same CFA rule, RA (c-8, or
// undefined = END) and RBP rule (u = unchanged, c-N = saved at CFA-N).
Compared compare_with_readelf(const UnwindTable& t, const std::string& path) {
  Compared c;
  std::istringstream in(run("readelf --debug-dump=frames-interp '" + path + "' 2>/dev/null"));
  std::string line;
  bool in_fde = false;
  int cfa_col = -1, rbp_col = -1, ra_col = -1;
  while (std::getline(in, line)) {
    if (line.find(" FDE ") != std::string::npos) {
      in_fde = true, c.fdes++;
      continue;
    }
    if (line.find(" CIE ") != std::string::npos) {
      in_fde = false;
      continue;
    }
    for (size_t at; (at = line.find(" (")) != std::string::npos;) {  // "r10 (r10)": one column
      size_t close = line.find(')', at);
      if (close == std::string::npos) break;
      line.erase(at, close - at + 1);
    }
    std::istringstream ls(line);
    std::vector<std::string> cols;
    for (std::string w; ls >> w;) cols.push_back(w);
    if (cols.empty()) continue;
    if (cols[0] == "LOC") {
      cfa_col = rbp_col = ra_col = -1;
      for (size_t i = 0; i < cols.size(); ++i) {
        if (cols[i] == "CFA") cfa_col = int(i);
        if (cols[i] == "rbp") rbp_col = int(i);
        if (cols[i] == "ra") ra_col = int(i);
      }
      continue;
    }
    if (!in_fde || cfa_col < 0 || int(cols.size()) <= cfa_col || cols[0].size() != 16 ||
        cols[0].find_first_not_of("0123456789abcdef") != std::string::npos)
      continue;
    uint64_t pc = std::stoull(cols[0], nullptr, 16);
    const uw_row* r = lookup(t, pc);
    c.rows++;
    std::string cfa = cols[cfa_col];
    std::string ra = ra_col >= 0 && int(cols.size()) > ra_col ? cols[ra_col] : "c-8";
    std::string rbp = rbp_col >= 0 && int(cols.size()) > rbp_col ? cols[rbp_col] : "u";
    bool ok = r && r->pc <= pc;
    if (ok) {
      int ct = r->types & 15, bt = r->types >> 4;
      if (ra == "u") {
        ok = ct == UW_CFA_END;
      } else if (cfa == "exp") {
        c.exp_rows++;
        ok = ct == UW_CFA_PLT || ct == UW_CFA_NONE;
      } else if (ra != "c-8") {
        ok = ct == UW_CFA_NONE;
      } else if (cfa.size() > 4 && std::abs(std::stol(cfa.substr(3))) > 32767) {
        c.overflow_rows++;  // rsp+33360: beyond the row's 16-bit offset, no rule
        ok = ct == UW_CFA_NONE;
      } else {
        std::string want = (ct == UW_CFA_RSP ? "rsp" : ct == UW_CFA_RBP ? "rbp" : "?");
        long off = r->cfa_off;
        want += (off >= 0 ? "+" : "") + std::to_string(off);
        ok = cfa == want;
        if (ok && rbp == "u") ok = bt == UW_RBP_SAME;
        else if (ok && rbp.rfind("c", 0) == 0) ok = bt == UW_RBP_AT_CFA && "c" + std::to_string(r->rbp_off8 * 8) == rbp;
        else if (ok) ok = bt == UW_RBP_UNDEF;
      }
    }
    if (!ok) {
      c.mismatches++;
      if (c.first_bad.empty()) c.first_bad = line;
    }
  }
  return c;
}

}  // namespace

TEST_CASE("unwind tables: our stripped libunwind_blk.so matches readelf row by row") {
  std::string so = std::string(BPFDIAG_BUILD_DIR) + "/workloads/libunwind_blk.so";
  auto f = open_file(so);
  if (!bpfdiag_test::require_env(f != nullptr, so + " not built")) return;
  if (!bpfdiag_test::require_env(!run("command -v readelf").empty(), "readelf (binutils) not installed")) return;
  auto t = build_unwind_table(*f);
  REQUIRE(t->has_cfi);
  CHECK(t->error.empty());
  CHECK(t->build_id.size() == 40);
  CHECK(t->st.fdes >= 4);       // .plt, .plt.got and our functions
  CHECK(t->st.cfa_plt == 1);    // the one .plt expression
  CHECK(t->st.cfa_unsupported == 0);
  CHECK(std::is_sorted(t->rows.begin(), t->rows.end(), [](const uw_row& a, const uw_row& b) { return a.pc < b.pc; }));
  auto c = compare_with_readelf(*t, so);
  INFO("first mismatch: " << c.first_bad);
  CHECK(c.fdes == t->st.fdes);
  CHECK(c.rows >= 10);
  CHECK(c.mismatches == 0);
  // the load bias of the first mapping (file offset 0) of a PIC .so is its address
  REQUIRE(!t->loads.empty());
  CHECK(t->bias_for(0x7f0000000000, 0) == std::optional<uint64_t>(0x7f0000000000 - t->loads[0].vaddr));
}

TEST_CASE("unwind tables: libc matches readelf row by row (signal trampoline: no rule)") {
  std::string libc = "/lib/x86_64-linux-gnu/libc.so.6";
  auto f = open_file(libc);
  if (!bpfdiag_test::require_env(f != nullptr, libc + " missing")) return;
  if (!bpfdiag_test::require_env(!run("command -v readelf").empty(), "readelf (binutils) not installed")) return;
  auto t = build_unwind_table(*f);
  REQUIRE(t->has_cfi);
  auto c = compare_with_readelf(*t, libc);
  INFO("first mismatch: " << c.first_bad << " (" << c.mismatches << " of " << c.rows << ")");
  CHECK(c.rows > 10000);
  CHECK(c.mismatches == 0);
  CHECK(t->st.ra_undefined >= 1);  // clone3 / _start-like outermost frames
  CHECK(c.overflow_rows == t->st.off_overflow);
}

TEST_CASE("unwind tables: the one-pass interpreter gives the libdw builder's rows on real files") {
  // the largest libraries here, the interpreters and our workloads; a file missing from
  // this machine is skipped (libc and libstdc++ are required)
  std::vector<std::string> files = {"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libstdc++.so.6",
                                    "/usr/bin/python3", std::string(BPFDIAG_BUILD_DIR) + "/workloads/libunwind_blk.so",
                                    std::string(BPFDIAG_BUILD_DIR) + "/workloads/unwind_blk",
                                    std::string(BPFDIAG_BUILD_DIR) + "/bin/offcputime"};
  for (auto& p : globbed("/usr/lib/jvm/*/lib/server/libjvm.so")) files.push_back(p);
  const char* big = std::getenv("UNWIND_REF_BIG");  // libLLVM/libclang: ~1 min for libdw
  if (big && *big) {
    for (auto& p : globbed("/usr/lib/x86_64-linux-gnu/libLLVM-1*.so.1")) files.push_back(p);
    for (auto& p : globbed("/usr/lib/llvm-*/lib/libclang-cpp.so.*")) files.push_back(p);
  }
  size_t compared = 0;
  for (auto& path : files) {
    auto f = open_file(path);
    if (!f) {
      bool required = path.find("libc.so") != std::string::npos || path.find("libstdc++") != std::string::npos;
      if (required) FAIL_CHECK(path << " missing");
      continue;
    }
    auto ours = build_unwind_table(*f);
    UnwindTable theirs = ref::build(path);
    INFO(path);
    REQUIRE(ours->has_cfi == theirs.has_cfi);
    CHECK(ours->error == theirs.error);
    std::string first;
    bool same = same_rows(ours->rows, theirs.rows, first);
    INFO("first difference: " << first);
    CHECK(same);
    const UnwindTableStats &a = ours->st, &b = theirs.st;
    CHECK(a.fdes == b.fdes);
    CHECK(a.rows == b.rows);
    CHECK(a.gaps == b.gaps);
    CHECK(a.cfa_unsupported == b.cfa_unsupported);
    CHECK(a.cfa_plt == b.cfa_plt);
    CHECK(a.rbp_unsupported == b.rbp_unsupported);
    CHECK(a.ra_not_cfa_minus_8 == b.ra_not_cfa_minus_8);
    CHECK(a.off_overflow == b.off_overflow);
    CHECK(a.ra_undefined == b.ra_undefined);
    CHECK(a.eh_frame_bytes == b.eh_frame_bytes);
    CHECK(a.fde_rows_capped == 0);
    CHECK(a.file_rows_capped == 0);
    CHECK(a.work_capped == 0);
    MESSAGE(path << ": " << a.rows << " rows, " << a.fdes << " FDEs, " << a.fdes_malformed
                 << " malformed; build " << a.build_ms << " ms (libdw " << b.build_ms << " ms)");
    compared++;
  }
  CHECK(compared >= 4);
}

TEST_CASE("unwind tables: random CFA programs give the libdw builder's rows") {
  // Well-formed instructions in random order and operands (remember/restore unbalanced,
  // def_cfa_offset without a register CFA, restores, expressions, the .plt expression,
  // undefined RA...), several FDEs with gaps: both builders must agree row for row.
  uint64_t seed = 19;
  auto rnd = [&](uint64_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % n;
  };
  const uint64_t regs[] = {3, 6, 7, 16, 17, 100};
  const std::string exprs[] = {
      std::string("\x77\x08\x80\x00\x3f\x1a\x3b\x2a\x33\x24\x22", 11),  // the .plt expression
      std::string("\x77\x10", 2), std::string("\x76\x20", 2), std::string("\x92\x07\x18", 3),
      std::string("\x23\x10", 2), std::string("\x11\x70\x22", 3), std::string(""), std::string("\x30", 1),
      std::string("\x9c", 1), std::string("\x23\x78", 2)};
  size_t mismatched = 0, programs = 0;
  std::map<uint8_t, size_t> kinds;  // rows by uw_row.types
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<CraftedFde> fdes;
    uint64_t at = 0x10000;
    for (int k = 0, nf = 1 + int(rnd(4)); k < nf; ++k) {
      CraftedFde f{at, 16 + rnd(200), ""};
      at += f.range + rnd(3) * 8;
      for (int n = 0, ni = int(rnd(40)); n < ni; ++n) {
        uint64_t reg = regs[rnd(6)];
        switch (rnd(20)) {
          case 0: f.program += char(0x40 | (1 + rnd(8))); break;                         // advance_loc
          case 1: f.program += '\x02' + std::string(1, char(rnd(20))); break;            // advance_loc1
          case 2: f.program += '\x0c' + uleb(rnd(2) ? 7 : 6) + uleb(8 * rnd(6)); break;  // def_cfa
          case 3: f.program += '\x0e' + uleb(8 * rnd(40000)); break;                     // def_cfa_offset
          case 4: f.program += '\x0d' + uleb(reg); break;                                // def_cfa_register
          case 5: f.program += char(0x80 | reg % 64) + uleb(rnd(4)); break;              // offset
          case 6: f.program += char(0xc0 | reg % 64); break;                             // restore
          case 7: f.program += '\x0a'; break;                                            // remember_state
          case 8: f.program += '\x0b'; break;                                            // restore_state
          case 9: f.program += '\x07' + uleb(reg); break;                                // undefined
          case 10: f.program += '\x08' + uleb(reg); break;                               // same_value
          case 11: {
            auto& x = exprs[rnd(10)];
            f.program += '\x10' + uleb(reg) + uleb(x.size()) + x;  // expression
            break;
          }
          case 12: {
            auto& x = exprs[rnd(10)];
            f.program += '\x0f' + uleb(x.size()) + x;  // def_cfa_expression
            break;
          }
          case 13: f.program += '\x11' + uleb(reg) + sleb(int64_t(rnd(5)) - 2); break;  // offset_extended_sf
          case 14: f.program += '\x14' + uleb(reg) + uleb(rnd(3)); break;                // val_offset
          case 15: f.program += '\x09' + uleb(reg) + uleb(regs[rnd(6)]); break;          // register
          case 16: f.program += '\x13' + sleb(-int64_t(rnd(4))); break;                  // def_cfa_offset_sf
          case 17: f.program += '\x2e' + uleb(rnd(100)); break;                          // GNU_args_size
          case 18: {
            auto& x = exprs[rnd(10)];
            f.program += '\x16' + uleb(reg) + uleb(x.size()) + x;  // val_expression
            break;
          }
          default: f.program += '\x05' + uleb(reg) + uleb(rnd(3)); break;  // offset_extended
        }
      }
      fdes.push_back(f);
    }
    TempFile tf(crafted_elf(fdes));
    auto f = open_file(tf.path);
    REQUIRE(f);
    auto ours = build_unwind_table(*f);
    UnwindTable theirs = ref::build(tf.path);
    std::string first;
    bool same = same_rows(ours->rows, theirs.rows, first) && ours->st.cfa_unsupported == theirs.st.cfa_unsupported &&
                ours->st.rbp_unsupported == theirs.st.rbp_unsupported && ours->st.gaps == theirs.st.gaps &&
                ours->st.ra_not_cfa_minus_8 == theirs.st.ra_not_cfa_minus_8 &&
                ours->st.ra_undefined == theirs.st.ra_undefined && ours->st.cfa_plt == theirs.st.cfa_plt;
    if (!same && mismatched++ < 3) {
      std::string hex;
      for (auto& fd : fdes)
        for (unsigned char c : fd.program) hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15];
      MESSAGE("iteration " << iter << ": " << first << "; programs " << hex);
    }
    programs += fdes.size();
    for (auto& r : ours->rows) kinds[r.types]++;
  }
  CHECK(mismatched == 0);
  CHECK(programs > 300);
  // the programs reached every kind of row: CFA rsp/rbp/.plt/end/none x RBP same/at CFA/unknown
  for (int ct : {UW_CFA_NONE, UW_CFA_RSP, UW_CFA_RBP, UW_CFA_PLT, UW_CFA_END}) {
    INFO("CFA type " << ct);
    CHECK(kinds[uint8_t(ct | UW_RBP_SAME << 4)] > 0);
  }
  for (int bt : {UW_RBP_AT_CFA, UW_RBP_UNDEF}) {
    INFO("RBP type " << bt);
    CHECK(kinds[uint8_t(UW_CFA_RSP | bt << 4)] + kinds[uint8_t(UW_CFA_RBP | bt << 4)] > 0);
  }
}

TEST_CASE("unwind tables: one FDE with 240k rows builds in linear time, capped per FDE and per file") {
  // issue 19: a 1.2 MB CFA program took the libdw builder 211 s (each row re-ran it)
  std::string program = rows_program(240000);
  REQUIRE(program.size() > 1000000);
  TempFile tf(crafted_elf({{0x10000, 300000, program}}));
  auto f = open_file(tf.path);
  REQUIRE(f);
  bpfdiag_test::Stopwatch sw;
  auto t = build_unwind_table(*f);
  double ms = sw.ms();
  MESSAGE("1.2 MB program: " << ms << " ms, " << t->rows.size() << " rows");
  CHECK(ms < 2000);  // ~tens of ms; the old builder: minutes
  REQUIRE(t->has_cfi);
  CHECK(t->st.fde_rows_capped == 1);
  CHECK(t->st.file_rows_capped == 0);
  CHECK(t->rows.size() <= (1u << 16) + 2);
  // rows up to the cap, then NONE (no table) for the rest of the function
  const uw_row* r = lookup(*t, 0x10000 + 100);
  REQUIRE(r);
  CHECK((r->types & 15) == UW_CFA_RSP);
  r = lookup(*t, 0x10000 + 200000);
  REQUIRE(r);
  CHECK((r->types & 15) == UW_CFA_NONE);

  // the same rows under lower caps: per FDE, then per file (several FDEs)
  std::vector<CraftedFde> fdes;
  for (int k = 0; k < 4; ++k) fdes.push_back({0x10000 + uint64_t(k) * 0x1000, 0x800, rows_program(1000)});
  TempFile tf2(crafted_elf(fdes));
  auto f2 = open_file(tf2.path);
  REQUIRE(f2);
  UnwindTableLimits lim;
  auto full = build_unwind_table(*f2, lim);
  CHECK(full->st.fde_rows_capped == 0);
  CHECK(full->rows.size() > 4000);
  lim.rows_per_fde = 100;
  auto per_fde = build_unwind_table(*f2, lim);
  CHECK(per_fde->st.fde_rows_capped == 4);
  UnwindTableCache cache;  // sums the counters over the tables it builds
  CHECK(cache.get(f)->st.fde_rows_capped == 1);
  CHECK(cache.get(f2)->st.fde_rows_capped == 0);
  CHECK(cache.totals().fde_rows_capped == 1);
  CHECK(per_fde->rows.size() <= 4 * 102 + 1);
  lim = UnwindTableLimits();
  lim.rows_per_file = 1500;
  auto per_file = build_unwind_table(*f2, lim);
  CHECK(per_file->st.file_rows_capped == 1);
  CHECK(per_file->rows.size() <= 1500);
  REQUIRE(!per_file->rows.empty());
  CHECK((per_file->rows.back().types & 15) == UW_CFA_NONE);  // the rest of the file: no table
  CHECK(std::is_sorted(per_file->rows.begin(), per_file->rows.end(),
                       [](const uw_row& a, const uw_row& b) { return a.pc < b.pc; }));
  // the rows before the cap are the uncapped table's
  CHECK(std::equal(per_file->rows.begin(), per_file->rows.end() - 1, full->rows.begin(),
                   [](const uw_row& a, const uw_row& b) { return memcmp(&a, &b, sizeof a) == 0; }));
}

TEST_CASE("unwind tables: a long expression named by every row is decoded once") {
  // def_cfa_expression and DW_CFA_expression (RBP) of 300 KB each (DW_OP_nop), then
  // 100k one-byte advances: each row's rules name both expressions
  std::string nops(300000, '\x96');
  std::string program = "\x0f" + uleb(nops.size()) + nops + "\x10\x06" + uleb(nops.size()) + nops;
  for (int k = 0; k < 100000; ++k) program += "\x41";
  TempFile tf(crafted_elf({{0x10000, 200000, program}}));
  auto f = open_file(tf.path);
  REQUIRE(f);
  bpfdiag_test::Stopwatch sw;
  auto t = build_unwind_table(*f);
  double ms = sw.ms();
  MESSAGE("100k rows over two 300 KB expressions: " << ms << " ms");
  CHECK(ms < 2000);  // decoding per row: 60 G op reads
  CHECK(t->st.cfa_unsupported == 100001);  // 300k nops: no CFA the table can express
}

TEST_CASE("unwind tables: lld's SHT_X86_64_UNWIND sections (libLLVM, libclang) have tables") {
  // binutils' ld types .eh_frame/.eh_frame_hdr SHT_PROGBITS, lld SHT_X86_64_UNWIND;
  // the libdw builder took only the first (no rows for libLLVM-14/15, libclang-cpp)
  std::vector<CraftedFde> fdes = {{0x10000, 0x100, rows_program(5)}};
  TempFile progbits(crafted_elf(fdes)), unwind(crafted_elf(fdes, nullptr, SHT_X86_64_UNWIND));
  auto a = open_file(progbits.path), b = open_file(unwind.path);
  REQUIRE(a);
  REQUIRE(b);
  auto ta = build_unwind_table(*a), tb = build_unwind_table(*b);
  REQUIRE(ta->has_cfi);
  CHECK(tb->has_cfi);
  std::string first;
  CHECK(same_rows(tb->rows, ta->rows, first));
  CHECK(tb->rows.size() == 7);  // 5 rules + the CIE's + NONE past the end
}

TEST_CASE("unwind tables: malformed CFA programs end their FDE's rows, counted") {
  // an unknown opcode after two rows; a restore_state with nothing remembered; a
  // remember_state nesting past the bound; a CIE that advances (no FDE of it usable)
  std::string two_rows = rows_program(2);
  std::vector<CraftedFde> fdes = {
      {0x10000, 0x100, two_rows + "\x3f" + rows_program(3)},
      {0x10100, 0x100, two_rows + "\x0b" + rows_program(3)},
      {0x10200, 0x100, std::string(100, '\x0a') + rows_program(3)},
      {0x10300, 0x100, rows_program(3)},
  };
  TempFile tf(crafted_elf(fdes));
  auto f = open_file(tf.path);
  REQUIRE(f);
  auto t = build_unwind_table(*f);
  UnwindTable theirs = ref::build(tf.path);
  CHECK(t->st.fdes_malformed == 3);
  const uw_row* r = lookup(*t, 0x10301);
  REQUIRE(r);
  CHECK((r->types & 15) == UW_CFA_RSP);  // the well-formed FDE still has its rows
  r = lookup(*t, 0x10010);
  REQUIRE(r);
  CHECK((r->types & 15) == UW_CFA_NONE);  // past the bad opcode
  // libdw agrees on the first two (it has no bound on remember_state)
  CHECK(lookup(*t, 0x10001)->pc == lookup(theirs, 0x10001)->pc);
  std::string bad_cie("\x0c\x07\x08\x41", 4);
  TempFile tf2(crafted_elf({{0x10000, 0x100, rows_program(3)}}, &bad_cie));
  auto f2 = open_file(tf2.path);
  REQUIRE(f2);
  auto t2 = build_unwind_table(*f2);
  CHECK(t2->st.fdes_malformed == 1);
  CHECK(std::all_of(t2->rows.begin(), t2->rows.end(), [](const uw_row& r) { return (r.types & 15) == UW_CFA_NONE; }));
}

TEST_CASE("unwind tables: cache shares one table per build-id; non-ELF input has no CFI") {
  std::string so = std::string(BPFDIAG_BUILD_DIR) + "/workloads/libunwind_blk.so";
  auto f1 = open_file(so), f2 = open_file(so);
  if (!bpfdiag_test::require_env(f1 && f2, so + " not built")) return;
  UnwindTableCache cache;
  auto a = cache.get(f1), b = cache.get(f2);
  CHECK(a.get() == b.get());
  CHECK(cache.tables() == 1);
  auto txt = open_file(std::string(BPFDIAG_SOURCE_DIR) + "/README.md");
  REQUIRE(txt);
  auto t = build_unwind_table(*txt);
  CHECK(!t->has_cfi);
  CHECK(t->rows.empty());
  CHECK(!t->error.empty());
}
