// The function table every Go binary carries for its own runtime (.gopclntab): Go
// programs are often built with -ldflags=-s or stripped (Debian's dh_strip), which
// removes .symtab but never .gopclntab, since the runtime needs it for tracebacks. So
// function names and bounds of a stripped Go binary come from there: symbolization
// (symbol_tables.cpp) and the goroutine probes (go_runtime.cpp) use it when .symtab is
// missing. perf and bpftrace show such frames as [unknown].
//
// Layouts read: Go 1.18/1.19 (magic 0xfffffff0) and Go 1.20 and later (0xfffffff1):
//   header   magic u32, 2 pad bytes, minLC u8, ptrSize u8 (8), then 8 words: nfunc,
//            nfiles, textStart, funcnameOffset, cuOffset, filetabOffset, pctabOffset,
//            pclnOffset (offsets from the table's start)
//   functab  at pclnOffset: nfunc+1 pairs {entryOff u32, funcOff u32} (the last is the
//            end of text), entryOff from textStart, funcOff from the functab
//   _func    at functab+funcOff: {entryOff u32, nameOff i32}, the name a NUL-terminated
//            string at funcnameOffset+nameOff
// Older layouts (Go 1.16/1.17: 0xfffffffa, Go <= 1.15: 0xfffffffb) are refused.
//
// The binary is another user's file: the section is read once, refused beyond
// kMaxGoPclntabBytes; every offset is checked against the table's size, entries must
// ascend, names are capped and must be printable.
//
// PUBLIC API:
//   auto t = read_go_functions(elf);   // Result<std::vector<GoFunction>>: entry, end, name
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

class ElfFile;

constexpr uint64_t kMaxGoPclntabBytes = 128ull << 20;  // kubelet-sized binaries: ~30 MB
constexpr size_t kMaxGoFunctions = 1 << 20;
constexpr size_t kMaxGoFunctionName = 1024;

struct GoFunction {
  uint64_t entry = 0, end = 0;  // virtual addresses [entry, end)
  std::string name;             // "runtime.gopark", "main.(*server).handle", ...
};

// The functions of `elf`'s .gopclntab, ascending by entry. Error: why not (no table, a
// layout not read, a table that does not check out).
Result<std::vector<GoFunction>> read_go_functions(const ElfFile& elf);

}  // namespace bpfdiag
