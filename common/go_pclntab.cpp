// .gopclntab reader: see go_pclntab.h.
#include "common/go_pclntab.h"

#include <elf.h>

#include <cstring>

#include "common/elf_file.h"

namespace bpfdiag {

namespace {
uint32_t u32(const std::vector<uint8_t>& b, uint64_t at) { return static_cast<uint32_t>(read_le(&b[at], 4)); }
uint64_t u64(const std::vector<uint8_t>& b, uint64_t at) { return read_le(&b[at], 8); }
}  // namespace

Result<std::vector<GoFunction>> read_go_functions(const ElfFile& elf) {
  auto sec = elf.section(".gopclntab");
  if (!sec || sec->type == SHT_NOBITS) return Error{"no .gopclntab"};
  if (sec->size > kMaxGoPclntabBytes)
    return Error{".gopclntab of " + std::to_string(sec->size >> 20) + " MB (more than " +
                 std::to_string(kMaxGoPclntabBytes >> 20) + " MB)"};
  std::vector<uint8_t> t;
  if (sec->size < 72 || !elf.read(sec->offset, sec->size, t)) return Error{".gopclntab is not in the file"};
  const uint32_t magic = u32(t, 0);
  if (magic == 0xfffffffa || magic == 0xfffffffb)
    return Error{"a .gopclntab of Go 1.17 or older (not read)"};
  if ((magic != 0xfffffff0 && magic != 0xfffffff1) || t[4] || t[5] || t[7] != 8)
    return Error{"not a .gopclntab layout known here"};
  const uint64_t size = t.size(), nfunc = u64(t, 8), text = u64(t, 24), names = u64(t, 32),
                 functab = u64(t, 64);
  if (nfunc == 0 || nfunc > kMaxGoFunctions) return Error{"a .gopclntab of " + std::to_string(nfunc) + " functions"};
  if (names >= size || functab >= size || (nfunc + 1) * 8 > size - functab)
    return Error{"a .gopclntab whose offsets lie outside it"};
  // textStart is runtime.text; 0 in the file of a position-independent binary, where the
  // dynamic linker fills it: then .text's own address (where runtime.text is)
  uint64_t base = text;
  if (!base) {
    auto tx = elf.section(".text");
    if (!tx) return Error{"a .gopclntab without its text address"};
    base = tx->addr;
  }
  std::vector<GoFunction> out;
  out.reserve(nfunc);
  uint64_t prev = 0;
  for (uint64_t i = 0; i < nfunc; ++i) {
    const uint64_t e = u32(t, functab + 8 * i), next = u32(t, functab + 8 * (i + 1)),
                   f = functab + uint64_t(u32(t, functab + 8 * i + 4));
    if (e < prev || next < e) return Error{"a .gopclntab whose functions do not ascend"};
    prev = e;
    if (f > size - 8 || u32(t, f) != e) return Error{"a .gopclntab whose function records do not match"};
    const int32_t name_off = static_cast<int32_t>(u32(t, f + 4));
    if (name_off < 0 || uint64_t(name_off) >= size - names) return Error{"a .gopclntab name outside it"};
    const char* n = reinterpret_cast<const char*>(t.data() + names + uint64_t(name_off));
    const size_t len = strnlen(n, std::min<uint64_t>(kMaxGoFunctionName, size - names - uint64_t(name_off)));
    std::string name(n, len);
    bool printable = len > 0;
    for (unsigned char c : name) printable = printable && c >= 0x20 && c < 0x7f;
    if (!printable) continue;  // one odd name does not spoil the table
    out.push_back({base + e, base + next, std::move(name)});
  }
  return out;
}

}  // namespace bpfdiag
