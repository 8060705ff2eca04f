// The one ELF reader of the suite (symbolize and pthread_probes both use it).
//
// Files come from traced processes, so they are opened through untrusted_file.h and
// read with libelf's ELF_C_READ (pread, no mmap): a file its owner truncates while we
// read gives read errors, never SIGBUS; libelf bounds every section by the file size,
// which the open policy caps (kMaxElfSize).
// Before libelf sees a file, check_elf_headers reads its ELF header with pread and
// refuses what would make libelf allocate far more than the file holds: elf_begin
// allocates one descriptor per section header it is told about, and extended
// numbering lets 12 KB of sparse file claim 16M of them (4.3 GB, issue 19). Every
// libelf open of an untrusted file (ElfFile::open, the unwind tables) goes through
// open_elf_untrusted (untrusted_file.h), which applies it.
//
// PUBLIC API:
//   auto r = open_untrusted(path, {});            // or open_in_proc_root(...)
//   auto elf = ElfFile::open(r.file);             // nullptr: not an ELF file
//   elf->load_segments(), elf->is_exec(), elf->build_id(), elf->has_symtab()
//   elf->for_each_symbol([](const ElfSymbolEntry& s) {...});  // .dynsym then .symtab
//   elf->read(offset, len, bytes)                  // raw file bytes (bounded)
//   check_elf_headers(file)                        // the caps, without libelf
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/untrusted_file.h"

typedef struct Elf Elf;

namespace bpfdiag {

// Caps on header counts, checked before libelf allocates anything. Measured here over
// /usr/{bin,sbin,lib,libexec} (2884 executables, shared objects and debug files): at
// most 74 sections (a .debug file) and 15 program headers (stress-ng); relocatable
// objects, which are never mapped, reach 28,362 sections (a Free Pascal unit built with
// one section per function). The caps leave room above all of them.
constexpr uint64_t kMaxElfSections = 65536;
constexpr uint64_t kMaxElfProgramHeaders = 4096;
// A file larger than this whose allocated blocks (st_blocks * 512) are under
// 1/kMinElfAllocatedFraction of its size is refused as sparse: libelf would read (and
// allocate for) megabytes of holes. Real binaries and debug files are fully allocated
// (every ELF file over 1 MiB here has allocated >= apparent size). Filesystems that
// report no blocks at all (st_blocks 0, some FUSE ones) are not judged by this rule.
constexpr uint64_t kSparseElfMinSize = 1ULL << 20;
constexpr uint64_t kMinElfAllocatedFraction = 16;

// The ELF header of a file, with extended numbering resolved (e_shnum == 0: the count
// is section 0's sh_size; e_shstrndx == SHN_XINDEX: its sh_link; e_phnum == PN_XNUM:
// its sh_info).
struct ElfHeaderInfo {
  bool is64 = true;
  uint16_t type = 0;  // e_type
  uint64_t phoff = 0, phnum = 0, shoff = 0, shnum = 0, shstrndx = 0;
};
struct ElfHeaderCheck {
  std::optional<ElfHeaderInfo> info;  // set when the file is an ELF file within the caps
  std::string refused;                // non-empty: an ELF file refused (the reason)
};
// Reads `f`'s ELF header (and section 0 for extended numbering) with pread and checks:
// header counts within the caps, header tables inside the file and not in holes
// (SEEK_HOLE), the entry sizes of the class, and allocated blocks against the size.
// Neither set: not an ELF file (silent).
ElfHeaderCheck check_elf_headers(const UntrustedFile& f);
// ELF files refused by check_elf_headers in this process (distinct files).
uint64_t elf_files_refused();
// Number of FDEs .eh_frame_hdr lists (found by PT_GNU_EH_FRAME; the usual encoding),
// read with pread: the unwind table of the file has at least this many rows. nullopt
// when the file has none or is refused.
std::optional<uint64_t> elf_eh_frame_hdr_fdes(const UntrustedFile& f);

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

struct ElfSection {
  uint64_t addr = 0, offset = 0, size = 0;
  uint32_t type = 0;  // SHT_*; SHT_NOBITS has no file bytes
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
  // The notes of the SHT_NOTE section `section` (type, owner name, descriptor; views
  // into libelf's copy, valid while this object lives), in file order.
  void for_each_note(const std::string& section,
                     const std::function<void(uint32_t type, std::string_view name, std::string_view desc)>& fn) const;
  // sh_addr of the section `name`, nullopt when there is none.
  std::optional<uint64_t> section_addr(const std::string& name) const;
  // The header of the section `name` (first of that name), nullopt when there is none.
  std::optional<ElfSection> section(const std::string& name) const;
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

// The little-endian unsigned value of the n (<= 8) bytes at p: a binary's data as read.
inline uint64_t read_le(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  uint64_t v = 0;
  for (size_t i = 0; i < n && i < 8; ++i) v |= uint64_t(b[i]) << (8 * i);
  return v;
}

// The file offset of a virtual address whose `len` bytes lie inside one PT_LOAD
// segment's file bytes (uprobe offsets, reads of a binary's data by address).
std::optional<uint64_t> file_offset_of(const ElfFile& elf, uint64_t vaddr, uint64_t len = 1);

}  // namespace bpfdiag
