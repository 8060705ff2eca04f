// One ELF file's symbol tables, as the Symbolizer keeps them (implementation detail of
// symbolize.cpp / symbol_tables.cpp; not for tools). Shared by every process that maps
// the same file (cache key: device, inode, mtime and size of the opened file).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/elf_file.h"

namespace bpfdiag {

struct ElfSym {
  uint64_t addr;
  uint64_t size;
  std::string name;
};

class ElfSymbols {
 public:
  bool ok = false;
  bool exec = false;  // ET_EXEC (no load bias)
  std::vector<ElfSegment> segs;
  std::vector<ElfSym> funcs;  // sorted by addr
  std::vector<ElfSym> objs;   // sorted by addr
  std::string build_id;
  std::string name;  // the file's name, for messages
  // A debuginfod lookup of build_id was asked for and its outcome not yet applied
  // (settle_debuginfod); debuginfod_failed: its failure (or lateness) was counted.
  bool debuginfod_pending = false;
  bool debuginfod_failed = false;

  // Reads `f` (already validated as untrusted input) and, when it has no .symtab and
  // debug_files is set, the detached /usr/lib/debug/.build-id/xx/yyyy.debug file, or,
  // with none there and DEBUGINFOD_URLS set, asks debuginfod for it (common/debuginfod.h;
  // the outcome is applied by settle_debuginfod).
  static std::shared_ptr<ElfSymbols> load(std::shared_ptr<UntrustedFile> f, bool debug_files);

  // Applies the outcome of the pending debuginfod lookup: the debug file's symbols are
  // added when it came and passed the checks. `wait`: wait for it within the run's
  // budget. Pending: not finished (still pending); Applied; Failed (said on stderr).
  enum class Settled { Pending, Applied, Failed };
  Settled settle_debuginfod(bool wait);

  // Segment containing file offset `off` (page-rounded), for load-bias computation.
  const ElfSegment* seg_for_offset(uint64_t off) const {
    for (auto& s : segs) {
      uint64_t start = s.offset & ~0xfffULL;
      if (off >= start && off < s.offset + std::max<uint64_t>(s.filesz, 1)) return &s;
    }
    return nullptr;
  }
  uint64_t min_vaddr() const {
    uint64_t m = UINT64_MAX;
    for (auto& s : segs) m = std::min<uint64_t>(m, s.vaddr & ~0xfffULL);
    return m == UINT64_MAX ? 0 : m;
  }
  uint64_t max_vaddr() const {
    uint64_t m = 0;
    for (auto& s : segs) m = std::max(m, s.vaddr + s.memsz);
    return m;
  }
  // ELF vaddrs of the OBJECT symbols named `name`, matched as written or demangled.
  std::vector<uint64_t> find_objects(const std::string& name) const;
  // Load bias of a mapping at `map_start` of file offset `map_offset`; nullopt when
  // the offset is in no PT_LOAD segment. runtime address = bias + ELF vaddr.
  std::optional<uint64_t> bias_for_mapping(uint64_t map_start, uint64_t map_offset) const {
    const ElfSegment* seg = seg_for_offset(map_offset);
    if (!seg) return std::nullopt;
    return exec ? 0 : map_start - (seg->vaddr + map_offset - seg->offset);
  }
  static const ElfSym* find(const std::vector<ElfSym>& v, uint64_t vaddr, bool allow_sizeless);

 private:
  void add_symbols(const ElfFile& e);
  void finish();
};

}  // namespace bpfdiag
