// .gopclntab (common/go_pclntab): the function table of a stripped Go binary, on a
// crafted table in Go 1.20's layout, and each way a hostile file can damage it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/elf_file.h"
#include "common/elf_symbols.h"
#include "common/go_pclntab.h"
#include "common/untrusted_file.h"
#include "tests/unit/elf_image.h"

using namespace bpfdiag;
using bpfdiag_test::ElfImageFile;
using bpfdiag_test::elf_image;
using bpfdiag_test::put_le;

namespace {

constexpr uint64_t kText = 0x401000;

struct Table {
  uint32_t magic = 0xfffffff1;
  uint64_t text = kText;
  std::vector<std::pair<uint32_t, std::string>> funcs = {
      {0x0, "runtime.text"}, {0x40, "runtime.gopark"}, {0x180, "main.(*server).handle"}};
  uint32_t end = 0x200;
  uint64_t nfunc_override = 0;
  int32_t bad_name_at = -1;  // this function's name offset points outside the table
};

// header, funcnametab, functab {entryOff, funcOff}, _func records {entryOff, nameOff}
std::string pclntab(const Table& t) {
  std::string names;
  std::vector<uint32_t> name_off;
  for (auto& f : t.funcs) {
    name_off.push_back(uint32_t(names.size()));
    names += f.second + '\0';
  }
  const uint64_t n = t.funcs.size(), names_at = 72, functab_at = (names_at + names.size() + 7) & ~7ull;
  std::string b;
  put_le(b, t.magic, 4);
  b += std::string("\0\0\x01\x08", 4);
  put_le(b, t.nfunc_override ? t.nfunc_override : n, 8);
  put_le(b, 1, 8), put_le(b, t.text, 8), put_le(b, names_at, 8);
  put_le(b, 0, 8), put_le(b, 0, 8), put_le(b, 0, 8), put_le(b, functab_at, 8);
  b += names;
  b.resize(functab_at, '\0');
  const uint64_t recs = (n + 1) * 8;
  for (uint64_t i = 0; i < n; ++i) put_le(b, t.funcs[i].first, 4), put_le(b, recs + 8 * i, 4);
  put_le(b, t.end, 4), put_le(b, 0, 4);
  for (uint64_t i = 0; i < n; ++i)
    put_le(b, t.funcs[i].first, 4), put_le(b, int(i) == t.bad_name_at ? 0x7fffff00 : name_off[i], 4);
  return b;
}

std::string image(const std::string& tab) {
  return elf_image({{".text", SHT_PROGBITS, kText, std::string(0x200, '\xcc')},
                    {".gopclntab", SHT_PROGBITS, 0x402000, tab}});
}

Result<std::vector<GoFunction>> read(const std::string& img) {
  ElfImageFile f(img);
  REQUIRE_FALSE(f.path.empty());
  auto e = ElfFile::open(open_untrusted(f.path, {}).file);
  REQUIRE(e);
  return read_go_functions(*e);
}

}  // namespace

TEST_CASE("go pclntab: a stripped Go binary's functions, their bounds from the next entry") {
  auto fns = read(image(pclntab({})));
  REQUIRE_MESSAGE(fns, (fns ? "" : fns.error()));
  REQUIRE(fns->size() == 3);
  CHECK((*fns)[1].name == "runtime.gopark");
  CHECK((*fns)[1].entry == kText + 0x40);
  CHECK((*fns)[1].end == kText + 0x180);
  CHECK((*fns)[2].name == "main.(*server).handle");
  CHECK((*fns)[2].end == kText + 0x200);
  Table pie;  // textStart 0 in the file (filled at run time): .text's address
  pie.text = 0;
  auto p = read(image(pclntab(pie)));
  REQUIRE(p);
  CHECK((*p)[1].entry == kText + 0x40);
  // the symbolizer names addresses of a binary without .symtab from it
  ElfImageFile f(image(pclntab({})));
  auto syms = ElfSymbols::load(open_untrusted(f.path, {}).file, false);
  REQUIRE(static_cast<bool>(syms));
  const ElfSym* s = ElfSymbols::find(syms->funcs, kText + 0x1a0, false);
  REQUIRE(s);
  CHECK(s->name == "main.(*server).handle");
}

TEST_CASE("go pclntab: a damaged or unknown table is refused with a reason, never read past") {
  Table old;
  old.magic = 0xfffffffa;
  CHECK(read(image(pclntab(old))).error() == "a .gopclntab of Go 1.17 or older (not read)");
  Table junk;
  junk.magic = 0x12345678;
  CHECK(read(image(pclntab(junk))).error() == "not a .gopclntab layout known here");
  Table many;  // more functions than the table holds
  many.nfunc_override = 5000;
  CHECK(read(image(pclntab(many))).error() == "a .gopclntab whose offsets lie outside it");
  Table huge;
  huge.nfunc_override = uint64_t(1) << 40;
  CHECK(read(image(pclntab(huge))).error().find("functions") != std::string::npos);
  Table desc;  // entries must ascend
  desc.funcs[2].first = 0x10;
  CHECK(read(image(pclntab(desc))).error() == "a .gopclntab whose functions do not ascend");
  Table name;
  name.bad_name_at = 1;
  CHECK(read(image(pclntab(name))).error() == "a .gopclntab name outside it");
  std::string cut = pclntab({});
  cut.resize(cut.size() - 12);  // the last _func record cut off
  CHECK(read(image(cut)).error() == "a .gopclntab whose function records do not match");
  CHECK(read(image(pclntab({}).substr(0, 40))).error() == ".gopclntab is not in the file");
  CHECK(read(elf_image({{".text", SHT_PROGBITS, kText, "x"}})).error() == "no .gopclntab");
}
