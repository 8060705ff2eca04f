#include "common/elf_file.h"

#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

namespace bpfdiag {

namespace {

bool pread_all(int fd, void* buf, size_t len, uint64_t off) {
  size_t got = 0;
  while (got < len) {
    ssize_t r = pread(fd, static_cast<char*>(buf) + got, len - got, static_cast<off_t>(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

// An integer of `n` bytes at p in the file's byte order.
uint64_t get(const uint8_t* p, int n, bool msb) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(p[msb ? n - 1 - i : i]) << (8 * i);
  return v;
}

std::string kib(uint64_t b) { return b >= (4ULL << 20) ? std::to_string(b >> 20) + " MiB" : std::to_string(b >> 10) + " KiB"; }

// Whether [off, off+len) of fd lies (partly) in a hole. Filesystems without SEEK_HOLE
// report the whole file as data. pread users only: the file offset is restored anyway.
bool in_hole(int fd, uint64_t off, uint64_t len) {
  if (len == 0) return false;
  off_t cur = lseek(fd, 0, SEEK_CUR);
  off_t hole = lseek(fd, static_cast<off_t>(off), SEEK_HOLE);
  if (cur >= 0) lseek(fd, cur, SEEK_SET);
  return hole >= 0 && uint64_t(hole) < off + len;
}

std::atomic<uint64_t> g_refused{0};

// One warning line and one count per refused file (by identity: the unwinder and the
// symbolizer open the same file apart).
void note_refused(const UntrustedFile& f, const std::string& reason) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (seen.size() < 4096 && !seen.insert(f.identity()).second) return;
  }
  g_refused++;
  warn_refused_keyed("elf:" + f.identity(), f.name().empty() ? f.fd_path() : f.name(), reason);
}

}  // namespace

ElfHeaderCheck check_elf_headers(const UntrustedFile& f) {
  ElfHeaderCheck out;
  uint8_t eh[64];
  uint64_t size = f.size();
  if (size < 52 || !pread_all(f.fd(), eh, std::min<uint64_t>(size, sizeof eh), 0)) return out;
  if (std::memcmp(eh, ELFMAG, SELFMAG) != 0) return out;
  if (eh[EI_CLASS] != ELFCLASS32 && eh[EI_CLASS] != ELFCLASS64) return out;
  if (eh[EI_DATA] != ELFDATA2LSB && eh[EI_DATA] != ELFDATA2MSB) return out;
  bool is64 = eh[EI_CLASS] == ELFCLASS64, msb = eh[EI_DATA] == ELFDATA2MSB;
  if (is64 && size < 64) return out;
  auto refuse = [&](std::string why) {
    out.refused = std::move(why);
    return out;
  };
  ElfHeaderInfo h;
  h.is64 = is64;
  h.type = uint16_t(get(eh + 16, 2, msb));
  uint64_t phentsize, shentsize;
  if (is64) {
    h.phoff = get(eh + 32, 8, msb), h.shoff = get(eh + 40, 8, msb);
    phentsize = get(eh + 54, 2, msb), h.phnum = get(eh + 56, 2, msb);
    shentsize = get(eh + 58, 2, msb), h.shnum = get(eh + 60, 2, msb), h.shstrndx = get(eh + 62, 2, msb);
  } else {
    h.phoff = get(eh + 28, 4, msb), h.shoff = get(eh + 32, 4, msb);
    phentsize = get(eh + 42, 2, msb), h.phnum = get(eh + 44, 2, msb);
    shentsize = get(eh + 46, 2, msb), h.shnum = get(eh + 48, 2, msb), h.shstrndx = get(eh + 50, 2, msb);
  }
  const uint64_t shsz = is64 ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr);
  const uint64_t phsz = is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr);
  bool extended = h.shnum == 0 || h.shstrndx == SHN_XINDEX || h.phnum == PN_XNUM;
  if (h.shoff != 0) {
    if (shentsize != shsz)
      return refuse("section header entries of " + std::to_string(shentsize) + " bytes, not " + std::to_string(shsz));
    if (h.shoff > size || size - h.shoff < shsz) return refuse("section headers outside the file");
    if (extended) {  // the real counts are in section 0
      uint8_t s0[64];
      if (!pread_all(f.fd(), s0, shsz, h.shoff)) return refuse("section header 0 unreadable");
      uint64_t s0_size = is64 ? get(s0 + 32, 8, msb) : get(s0 + 20, 4, msb);
      uint64_t s0_link = get(s0 + (is64 ? 40 : 24), 4, msb), s0_info = get(s0 + (is64 ? 44 : 28), 4, msb);
      if (h.shnum == 0) h.shnum = s0_size;
      if (h.shstrndx == SHN_XINDEX) h.shstrndx = s0_link;
      if (h.phnum == PN_XNUM) h.phnum = s0_info;
    }
  } else if (extended && (h.shstrndx == SHN_XINDEX || h.phnum == PN_XNUM)) {
    return refuse("extended numbering without section headers");
  } else {
    h.shnum = 0;
  }
  if (h.shnum > kMaxElfSections)
    return refuse(std::to_string(h.shnum) + " section headers (more than " + std::to_string(kMaxElfSections) + ")");
  if (h.phnum > kMaxElfProgramHeaders)
    return refuse(std::to_string(h.phnum) + " program headers (more than " + std::to_string(kMaxElfProgramHeaders) +
                  ")");
  if (h.shoff != 0 && h.shnum * shsz > size - h.shoff) return refuse("section headers outside the file");
  if (h.phnum != 0) {
    if (phentsize != phsz)
      return refuse("program header entries of " + std::to_string(phentsize) + " bytes, not " + std::to_string(phsz));
    if (h.phoff > size || h.phnum * phsz > size - h.phoff) return refuse("program headers outside the file");
  }
  if (in_hole(f.fd(), h.shoff, h.shoff ? h.shnum * shsz : 0) || in_hole(f.fd(), h.phoff, h.phnum * phsz))
    return refuse("header table in a hole of a sparse file");
  // st_blocks 0 with data in it (we just read the header): a filesystem that does not
  // count blocks (some FUSE ones), not a hole
  struct stat st {};
  if (size > kSparseElfMinSize && fstat(f.fd(), &st) == 0 && st.st_blocks > 0 &&
      uint64_t(st.st_blocks) * 512 < size / kMinElfAllocatedFraction)
    return refuse("sparse file (" + kib(uint64_t(st.st_blocks) * 512) + " allocated of " + kib(size) + ")");
  out.info = h;
  return out;
}

uint64_t elf_files_refused() { return g_refused.load(); }

std::optional<uint64_t> elf_eh_frame_hdr_fdes(const UntrustedFile& f) {
  ElfHeaderCheck c = check_elf_headers(f);
  if (!c.info || c.info->phnum == 0) return std::nullopt;
  const ElfHeaderInfo& h = *c.info;
  const size_t phsz = h.is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr);
  std::vector<uint8_t> ph(h.phnum * phsz);
  if (!pread_all(f.fd(), ph.data(), ph.size(), h.phoff)) return std::nullopt;
  uint8_t ei_data;
  if (!pread_all(f.fd(), &ei_data, 1, EI_DATA)) return std::nullopt;
  bool msb = ei_data == ELFDATA2MSB;
  for (uint64_t i = 0; i < h.phnum; ++i) {
    const uint8_t* p = ph.data() + i * phsz;
    if (get(p, 4, msb) != PT_GNU_EH_FRAME) continue;
    uint64_t off = h.is64 ? get(p + 8, 8, msb) : get(p + 4, 4, msb);
    uint8_t hdr[12];
    if (off > f.size() || f.size() - off < sizeof hdr || !pread_all(f.fd(), hdr, sizeof hdr, off)) return std::nullopt;
    // version 1, eh_frame_ptr 4 bytes (udata4/sdata4, any application), fde_count udata4
    if (hdr[0] != 1 || ((hdr[1] & 0x0f) != 0x03 && (hdr[1] & 0x0f) != 0x0b) || hdr[2] != 0x03) return std::nullopt;
    return get(hdr + 8, 4, msb);
  }
  return std::nullopt;
}

Elf* open_elf_untrusted(const UntrustedFile& f) {
  ElfHeaderCheck c = check_elf_headers(f);
  if (!c.info) {
    if (!c.refused.empty()) note_refused(f, c.refused);
    return nullptr;
  }
  elf_version(EV_CURRENT);
  // ELF_C_READ (pread, no mmap): a file truncated under us gives errors, not SIGBUS
  Elf* e = elf_begin(f.fd(), ELF_C_READ, nullptr);
  if (e && elf_kind(e) != ELF_K_ELF) {
    elf_end(e);
    return nullptr;
  }
  return e;
}

std::unique_ptr<ElfFile> ElfFile::open(std::shared_ptr<UntrustedFile> f) {
  if (!f) return nullptr;
  std::unique_ptr<ElfFile> out(new ElfFile());
  out->file_ = std::move(f);
  out->elf_ = open_elf_untrusted(*out->file_);
  GElf_Ehdr eh;
  if (!out->elf_ || elf_kind(out->elf_) != ELF_K_ELF || !gelf_getehdr(out->elf_, &eh)) return nullptr;
  out->exec_ = eh.e_type == ET_EXEC;
  size_t nph = 0;
  if (elf_getphdrnum(out->elf_, &nph) != 0) nph = 0;
  for (size_t i = 0; i < nph && i < kMaxElfProgramHeaders; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(out->elf_, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD)
      out->segs_.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz, ph.p_memsz, ph.p_flags});
  }
  return out;
}

ElfFile::~ElfFile() {
  if (elf_) elf_end(elf_);
}

bool ElfFile::has_symtab() const {
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf_, scn))) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB) return true;
  }
  return false;
}

std::string ElfFile::build_id() const {
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf_, scn))) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE) continue;
    Elf_Data* d = elf_getdata(scn, nullptr);
    if (!d) continue;
    size_t off = 0, name_off, desc_off;
    GElf_Nhdr nh;
    while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && nh.n_descsz <= 64 &&
          std::memcmp(static_cast<char*>(d->d_buf) + name_off, "GNU", 4) == 0) {
        const unsigned char* p = static_cast<unsigned char*>(d->d_buf) + desc_off;
        std::string out;
        char b[3];
        for (size_t i = 0; i < nh.n_descsz; ++i) {
          std::snprintf(b, sizeof b, "%02x", p[i]);
          out += b;
        }
        return out;
      }
    }
  }
  return "";
}

namespace {
// The section called `name` (its header in `out`), nullptr if none.
Elf_Scn* find_section(Elf* elf, const std::string& name, GElf_Shdr& out) {
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return nullptr;
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(elf, scn))) {
    if (!gelf_getshdr(scn, &out)) continue;
    const char* nm = elf_strptr(elf, shstrndx, out.sh_name);
    if (nm && name == nm) return scn;
  }
  return nullptr;
}
}  // namespace

void ElfFile::for_each_note(
    const std::string& section,
    const std::function<void(uint32_t type, std::string_view name, std::string_view desc)>& fn) const {
  GElf_Shdr sh;
  Elf_Scn* scn = find_section(elf_, section, sh);
  if (!scn || sh.sh_type != SHT_NOTE) return;
  Elf_Data* d = elf_getdata(scn, nullptr);
  if (!d || !d->d_buf) return;
  const char* base = static_cast<const char*>(d->d_buf);
  size_t off = 0, name_off, desc_off;
  GElf_Nhdr nh;
  // gelf_getnote bounds every note by the data's size
  while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
    std::string_view name(base + name_off, nh.n_namesz ? strnlen(base + name_off, nh.n_namesz) : 0);
    fn(nh.n_type, name, std::string_view(base + desc_off, nh.n_descsz));
  }
}

std::optional<uint64_t> ElfFile::section_addr(const std::string& name) const {
  GElf_Shdr sh;
  if (!find_section(elf_, name, sh)) return std::nullopt;
  return sh.sh_addr;
}

std::optional<ElfSection> ElfFile::section(const std::string& name) const {
  GElf_Shdr sh;
  if (!find_section(elf_, name, sh)) return std::nullopt;
  return ElfSection{sh.sh_addr, sh.sh_offset, sh.sh_size, sh.sh_type};
}

void ElfFile::for_each_symbol(const std::function<void(const ElfSymbolEntry&)>& fn) const {
  for (unsigned type : {SHT_DYNSYM, SHT_SYMTAB}) {
    Elf_Scn* scn = nullptr;
    Elf_Scn* symscn = nullptr;
    Elf_Data* versym = nullptr;
    GElf_Shdr symsh{};
    while ((scn = elf_nextscn(elf_, scn))) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh)) continue;
      if (sh.sh_type == type && !symscn) {
        symscn = scn;
        symsh = sh;
      } else if (type == SHT_DYNSYM && sh.sh_type == SHT_GNU_versym) {
        versym = elf_getdata(scn, nullptr);
      }
    }
    if (!symscn || symsh.sh_entsize == 0) continue;
    Elf_Data* data = elf_getdata(symscn, nullptr);
    if (!data) continue;
    size_t n = std::min<size_t>(symsh.sh_size / symsh.sh_entsize, data->d_size / symsh.sh_entsize);
    for (size_t i = 0; i < n; ++i) {
      GElf_Sym s;
      if (!gelf_getsym(data, static_cast<int>(i), &s)) continue;
      if (s.st_shndx == SHN_UNDEF || s.st_value == 0) continue;
      const char* nm = elf_strptr(elf_, symsh.sh_link, s.st_name);
      if (!nm || !*nm) continue;
      ElfSymbolEntry e;
      e.name = std::string_view(nm, strnlen(nm, 65536));
      e.value = s.st_value;
      e.size = s.st_size;
      e.type = GELF_ST_TYPE(s.st_info);
      e.dynamic = type == SHT_DYNSYM;
      if (versym && (i + 1) * sizeof(GElf_Versym) <= versym->d_size) {
        GElf_Versym v;
        if (gelf_getversym(versym, static_cast<int>(i), &v) && (v & 0x8000)) e.hidden = true;
      }
      fn(e);
    }
  }
}

bool ElfFile::read(uint64_t offset, size_t len, std::vector<uint8_t>& out) const {
  uint64_t size = file_->size();
  if (offset > size || len > size - offset) return false;
  out.resize(len);
  size_t got = 0;
  while (got < len) {
    ssize_t r = pread(file_->fd(), out.data() + got, len - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      out.clear();
      return false;
    }
    got += static_cast<size_t>(r);
  }
  return true;
}

std::optional<uint64_t> file_offset_of(const ElfFile& elf, uint64_t vaddr, uint64_t len) {
  for (const auto& s : elf.load_segments())
    if (vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz && len <= s.filesz - (vaddr - s.vaddr))
      return vaddr - s.vaddr + s.offset;
  return std::nullopt;
}

}  // namespace bpfdiag
