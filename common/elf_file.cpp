#include "common/elf_file.h"

#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace bpfdiag {

std::unique_ptr<ElfFile> ElfFile::open(std::shared_ptr<UntrustedFile> f) {
  if (!f) return nullptr;
  elf_version(EV_CURRENT);
  std::unique_ptr<ElfFile> out(new ElfFile());
  out->file_ = std::move(f);
  out->elf_ = elf_begin(out->file_->fd(), ELF_C_READ, nullptr);
  GElf_Ehdr eh;
  if (!out->elf_ || elf_kind(out->elf_) != ELF_K_ELF || !gelf_getehdr(out->elf_, &eh)) return nullptr;
  out->exec_ = eh.e_type == ET_EXEC;
  size_t nph = 0;
  if (elf_getphdrnum(out->elf_, &nph) != 0) nph = 0;
  for (size_t i = 0; i < nph && i < 4096; ++i) {
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

}  // namespace bpfdiag
