// The one ELF reader of the suite (symbolize and pthread_probes both use it).
//
// Files come from traced processes, so they are opened through untrusted_file.h and
// read with libelf's ELF_C_READ (pread, no mmap): a file its owner truncates while we
// read gives read errors, never SIGBUS; libelf bounds every section by the file size,
// which the open policy caps (kMaxElfSize).
//
// PUBLIC API:
//   auto r = open_untrusted(path, {});            // or open_in_proc_root(...)
//   auto elf = ElfFile::open(r.file);             // nullptr: not an ELF file
//   elf->load_segments(), elf->is_exec(), elf->build_id(), elf->has_symtab()
//   elf->for_each_symbol([](const ElfSymbolEntry& s) {...});  // .dynsym then .symtab
//   elf->read(offset, len, bytes)                  // raw file bytes (bounded)
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/untrusted_file.h"

typedef struct Elf Elf;

namespace bpfdiag {

struct ElfSegment {
  uint64_t vaddr, offset, filesz, memsz;
  uint32_t flags;  // PF_X | PF_W | PF_R
};

struct ElfSymbolEntry {
  std::string_view name;  // as stored (may carry "@VER"/"@@VER" in static .symtab)
  uint64_t value = 0, size = 0;
  int type = 0;           // STT_*
  bool dynamic = false;   // from .dynsym
  bool hidden = false;    // .dynsym entry of a non-default (hidden) symbol version
};

class ElfFile {
 public:
  // nullptr when `f` is null or not a readable ELF file.
  static std::unique_ptr<ElfFile> open(std::shared_ptr<UntrustedFile> f);
  ~ElfFile();
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  bool is_exec() const { return exec_; }  // ET_EXEC: no load bias
  const std::vector<ElfSegment>& load_segments() const { return segs_; }  // PT_LOAD
  bool has_symtab() const;
  std::string build_id() const;  // lower-case hex of NT_GNU_BUILD_ID, "" if none
  // Defined symbols (not SHN_UNDEF, value != 0) of .dynsym, then of .symtab.
  void for_each_symbol(const std::function<void(const ElfSymbolEntry&)>& fn) const;
  // Reads file bytes [offset, offset+len); false when out of the file or on error.
  bool read(uint64_t offset, size_t len, std::vector<uint8_t>& out) const;
  const UntrustedFile& file() const { return *file_; }

 private:
  ElfFile() = default;
  std::shared_ptr<UntrustedFile> file_;
  Elf* elf_ = nullptr;
  bool exec_ = false;
  std::vector<ElfSegment> segs_;
};

}  // namespace bpfdiag
