#include "common/debuginfo_hint.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

namespace bpfdiag {

namespace {

constexpr off_t kMaxElf = off_t(4) << 30;  // 4 GiB: beyond that, not a binary we read

bool read_at(int fd, void* buf, size_t n, off_t off) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = pread(fd, static_cast<char*>(buf) + done, n - done, off + off_t(done));
    if (r <= 0) return false;
    done += size_t(r);
  }
  return true;
}

std::string hexbytes(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += d[p[i] >> 4], s += d[p[i] & 15];
  return s;
}

std::string base_name(const std::string& p) {
  auto i = p.rfind('/');
  return i == std::string::npos ? p : p.substr(i + 1);
}

}  // namespace

std::optional<ElfNames> read_elf_names(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxElf) return std::nullopt;
  Elf64_Ehdr eh{};
  if (!read_at(fd, &eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum > 4096)
    return std::nullopt;
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  if (eh.e_shnum && !read_at(fd, sh.data(), sh.size() * sizeof(Elf64_Shdr), off_t(eh.e_shoff)))
    return std::nullopt;
  ElfNames out;
  // a Go binary names its functions in .gopclntab, stripped or not (go_pclntab.h)
  if (eh.e_shstrndx < sh.size() && sh[eh.e_shstrndx].sh_size <= 65536) {
    std::string names(sh[eh.e_shstrndx].sh_size, '\0');
    if (read_at(fd, names.data(), names.size(), off_t(sh[eh.e_shstrndx].sh_offset)))
      for (const auto& s : sh)
        if (s.sh_name < names.size() && std::strcmp(names.c_str() + s.sh_name, ".gopclntab") == 0 && s.sh_size > 0)
          out.has_symtab = true;
  }
  for (const auto& s : sh) {
    if (s.sh_type == SHT_SYMTAB && s.sh_size > 0) out.has_symtab = true;
    if (s.sh_type != SHT_NOTE || s.sh_size > 4096 || !out.build_id.empty()) continue;
    std::vector<unsigned char> buf(s.sh_size);
    if (!read_at(fd, buf.data(), buf.size(), off_t(s.sh_offset))) continue;
    size_t off = 0;
    while (off + sizeof(Elf64_Nhdr) <= buf.size()) {
      Elf64_Nhdr nh;
      std::memcpy(&nh, &buf[off], sizeof nh);
      size_t name_off = off + sizeof nh, desc_off = name_off + ((nh.n_namesz + 3) & ~3u);
      size_t next = desc_off + ((nh.n_descsz + 3) & ~3u);
      if (next > buf.size()) break;
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && std::memcmp(&buf[name_off], "GNU", 4) == 0 &&
          nh.n_descsz > 0 && nh.n_descsz <= 64)
        out.build_id = hexbytes(&buf[desc_off], nh.n_descsz);
      off = next;
    }
  }
  return out;
}

std::string dpkg_owner(const std::string& path, const std::string& dpkg_info) {
  // Debian's merged /usr: dpkg may list /sbin/x for /usr/sbin/x and the other way round
  std::vector<std::string> names = {path};
  if (path.rfind("/usr/", 0) == 0) names.push_back(path.substr(4));
  else names.push_back("/usr" + path);
  DIR* d = opendir(dpkg_info.c_str());
  if (!d) return "";
  std::string owner;
  while (dirent* e = readdir(d)) {
    std::string f = e->d_name;
    if (f.size() < 6 || f.compare(f.size() - 5, 5, ".list") != 0) continue;
    std::ifstream in(dpkg_info + "/" + f);
    std::string line;
    bool hit = false;
    while (!hit && std::getline(in, line))
      for (const auto& n : names)
        if (line == n) hit = true;
    if (hit) {
      owner = f.substr(0, f.size() - 5);
      auto colon = owner.find(':');  // pkg:amd64.list
      if (colon != std::string::npos) owner.resize(colon);
      break;
    }
  }
  closedir(d);
  return owner;
}

std::string debuginfo_hint(const std::string& open_path, const std::string& path, const std::string& debug_root,
                           const std::string& dpkg_info) {
  auto e = read_elf_names(open_path);
  if (!e || e->has_symtab) return "";
  if (e->build_id.size() > 2) {
    std::string dbg = debug_root + "/.build-id/" + e->build_id.substr(0, 2) + "/" + e->build_id.substr(2) + ".debug";
    if (access(dbg.c_str(), R_OK) == 0) return "";
  }
  std::string pkg = dpkg_owner(path, dpkg_info);
  std::string what = base_name(path) + " is stripped: for function names install ";
  // DEBUGINFOD_URLS set: the tools ask its servers (common/debuginfod.h) and say how that went
  const char* urls = std::getenv("DEBUGINFOD_URLS");
  const std::string or_server = urls && *urls ? "" : ", or set DEBUGINFOD_URLS to a debuginfod server";
  if (pkg.empty())
    return what + "its debug symbols (a build-id debug file under " + debug_root + "/.build-id)" + or_server;
  return what + pkg + "-dbgsym (from Debian's debug archive, deb.debian.org/debian-debug)" + or_server;
}

}  // namespace bpfdiag
