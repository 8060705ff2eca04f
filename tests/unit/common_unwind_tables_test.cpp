// Unwind table builder (common/unwind_tables) checked row by row against binutils'
// own CFI interpreter (`readelf --debug-dump=frames-interp`) on our stripped
// libunwind_blk.so and on the system's libc, plus the cache and the refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <sstream>
#include <string>

#include "common/unwind_tables.h"
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
