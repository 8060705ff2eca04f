// A small ELF64 (x86-64, ET_EXEC) image built in memory for tests of the readers of
// hostile files: named sections placed at file offset == virtual address, one PT_LOAD
// over the whole file, a .shstrtab. Written to a private file by ElfImageFile.
#pragma once
#include <elf.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace bpfdiag_test {

struct ElfImageSection {
  std::string name;
  uint32_t type = SHT_PROGBITS;
  uint64_t addr = 0;  // also its file offset; >= 0x1000 and ascending
  std::string bytes;
};

inline void put_le(std::string& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b += char((v >> (8 * i)) & 0xff);
}

inline std::string elf_image(const std::vector<ElfImageSection>& secs) {
  std::string img(0x1000, '\0');
  std::string shstr(1, '\0');
  std::vector<uint32_t> names;
  for (const auto& s : secs) {
    if (img.size() < s.addr) img.resize(s.addr, '\0');
    img += s.bytes;
    names.push_back(uint32_t(shstr.size()));
    shstr += s.name + '\0';
  }
  const uint64_t shstr_off = img.size();
  const uint32_t shstr_name = uint32_t(shstr.size());
  shstr += std::string(".shstrtab") + '\0';
  img += shstr;
  while (img.size() % 8) img += char(0);
  const uint64_t shoff = img.size();
  auto shdr = [&](uint32_t name, uint32_t type, uint64_t flags, uint64_t addr, uint64_t off, uint64_t size) {
    put_le(img, name, 4), put_le(img, type, 4), put_le(img, flags, 8), put_le(img, addr, 8), put_le(img, off, 8);
    put_le(img, size, 8), put_le(img, 0, 4), put_le(img, 0, 4), put_le(img, 8, 8), put_le(img, 0, 8);
  };
  img.append(64, '\0');  // section 0
  for (size_t i = 0; i < secs.size(); ++i)
    shdr(names[i], secs[i].type, SHF_ALLOC, secs[i].addr, secs[i].addr, secs[i].bytes.size());
  shdr(shstr_name, SHT_STRTAB, 0, 0, shstr_off, shstr.size());
  std::string e("\x7f" "ELF\x02\x01\x01", 7);
  e.resize(16, '\0');
  put_le(e, ET_EXEC, 2), put_le(e, EM_X86_64, 2), put_le(e, 1, 4), put_le(e, 0, 8), put_le(e, 64, 8);
  put_le(e, shoff, 8), put_le(e, 0, 4), put_le(e, 64, 2), put_le(e, 56, 2), put_le(e, 1, 2), put_le(e, 64, 2);
  put_le(e, secs.size() + 2, 2), put_le(e, secs.size() + 1, 2);
  put_le(e, PT_LOAD, 4), put_le(e, PF_R | PF_X, 4), put_le(e, 0, 8), put_le(e, 0, 8), put_le(e, 0, 8);
  put_le(e, img.size(), 8), put_le(e, img.size(), 8), put_le(e, 0x1000, 8);
  img.replace(0, e.size(), e);
  return img;
}

// The image in a private temporary file, removed with the object.
struct ElfImageFile {
  std::string path;
  explicit ElfImageFile(const std::string& bytes) {
    char tmpl[] = "/tmp/bpfdiag-elfimage-XXXXXX";
    int fd = mkstemp(tmpl);
    path = tmpl;
    if (fd >= 0) {
      if (write(fd, bytes.data(), bytes.size()) != ssize_t(bytes.size())) path.clear();
      close(fd);
    }
  }
  ~ElfImageFile() {
    if (!path.empty()) unlink(path.c_str());
  }
  ElfImageFile(const ElfImageFile&) = delete;
  ElfImageFile& operator=(const ElfImageFile&) = delete;
};

}  // namespace bpfdiag_test
