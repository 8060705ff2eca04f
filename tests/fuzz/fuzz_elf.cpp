// The ELF reader on hostile bytes: header checks, ElfFile (segments, build id,
// symbols, a Go .gopclntab), ElfSymbols (what the symbolizer keeps) and the .eh_frame/.eh_frame_hdr
// unwind table built from it (common/elf_file, elf_symbols, cfa_program, unwind_tables).
#include <cstddef>
#include <cstdint>

#include "common/elf_file.h"
#include "common/elf_symbols.h"
#include "common/go_pclntab.h"
#include "common/usdt.h"
#include "common/unwind_tables.h"
#include "tests/fuzz/fuzz_input.h"

using namespace bpfdiag;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = bpfdiag_fuzz::untrusted_with(data, size);
  if (!f) return 0;
  ElfHeaderCheck hc = check_elf_headers(*f);
  if (!hc.info) return 0;  // not ELF, or refused: nothing else reads it
  (void)elf_eh_frame_hdr_fdes(*f);
  if (auto e = ElfFile::open(f)) {
    (void)e->build_id();
    size_t n = 0;
    e->for_each_symbol([&](const ElfSymbolEntry& s) { n += s.name.size(); });
    std::vector<uint8_t> buf;
    for (const auto& seg : e->load_segments()) (void)e->read(seg.offset, 64, buf);
    if (auto go = read_go_functions(*e)) (void)go->size();
    for (const auto& p : read_usdt_probes(*e)) {  // USDT notes (lockstat's declared waits)
      (void)file_offset_of(*e, p.pc);
      (void)file_offset_of(*e, p.semaphore);
    }
  }
  if (auto s = ElfSymbols::load(f, false)) (void)s->funcs.size();
  // small caps keep one input's work bounded (the defaults allow 4M rows)
  UnwindTableLimits lim;
  lim.rows_per_fde = 4096;
  lim.rows_per_file = 1 << 16;
  auto t = build_unwind_table(*f, lim);
  if (t->has_cfi)
    for (const auto& l : t->loads) (void)t->bias_for(l.vaddr, l.offset);
  return 0;
}
