// The .eh_frame interpreter on raw section bytes (no ELF around it): DWARF expression
// decoding, CIE/FDE lookup and CFA programs run row by row (common/cfa_program).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/cfa_program.h"

using namespace bpfdiag::cfa;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  // byte 0: flags; bytes 1-8: an address to look up; the rest: the section
  const bool elf64 = data[0] & 1;
  uint64_t addr;
  std::memcpy(&addr, data + 1, sizeof addr);
  const uint8_t* p = data + 9;
  size_t n = size - 9;

  Ops ops;
  (void)decode_ops(p, n, elf64, data[0] & 2, data[0] & 4, ops);

  Section s{p, n, 0x1000, elf64};
  HdrTable hdr;
  std::string err;
  (void)hdr.parse(s, 0x1000, err);  // the same bytes as a header: must refuse or parse sanely
  for (size_t i = 0; i < hdr.size() && i < 16; ++i) (void)hdr.search(hdr.start(i));
  EhFrame ehf(s);
  HdrTable none;
  for (uint64_t a : {addr, addr + 1, uint64_t{0x1000}, uint64_t{0}}) {
    const Fde* fde = ehf.find(none, a);
    if (!fde) continue;
    Pass pass(ehf, *fde);
    uint64_t pc = fde->start, row_end = 0;
    for (int rows = 0; rows < 256 && pass.query(pc, row_end) && row_end > pc; ++rows) {
      Ops cfa;
      (void)ehf.cfa_ops(pass.state(), cfa);
      pc = row_end;
    }
  }
  return 0;
}
