#include "common/data_symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <cstring>

#include "common/symbolize.h"

namespace bpfdiag {

std::vector<uint64_t> find_data_symbol_in_file(const std::string& path, const std::string& name,
                                               uint64_t map_start, uint64_t map_offset) {
  std::vector<uint64_t> out;
  if (elf_version(EV_CURRENT) == EV_NONE) return out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  Elf* e = elf_begin(fd, ELF_C_READ, nullptr);
  GElf_Ehdr eh;
  if (!e || !gelf_getehdr(e, &eh)) {
    if (e) elf_end(e);
    close(fd);
    return out;
  }
  // load bias from the PT_LOAD segment that this mapping's file offset belongs to
  uint64_t bias = 0;
  if (eh.e_type == ET_DYN) {
    size_t n = 0;
    elf_getphdrnum(e, &n);
    bool found = false;
    for (size_t i = 0; i < n && !found; ++i) {
      GElf_Phdr ph;
      if (!gelf_getphdr(e, static_cast<int>(i), &ph) || ph.p_type != PT_LOAD) continue;
      uint64_t align = ph.p_align ? ph.p_align : 4096;
      if (align > 4096) align = 4096;  // mappings are page-granular
      uint64_t seg_off = ph.p_offset & ~(align - 1);
      if (map_offset >= seg_off && map_offset < ph.p_offset + ph.p_filesz + align) {
        bias = map_start - map_offset - ((ph.p_vaddr & ~(align - 1)) - seg_off);
        found = true;
      }
    }
    if (!found) {
      elf_end(e);
      close(fd);
      return out;
    }
  }
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(e, scn))) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM)) continue;
    Elf_Data* d = elf_getdata(scn, nullptr);
    if (!d || !sh.sh_entsize) continue;
    size_t cnt = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < cnt; ++i) {
      GElf_Sym s;
      if (!gelf_getsym(d, static_cast<int>(i), &s) || GELF_ST_TYPE(s.st_info) != STT_OBJECT) continue;
      const char* nm = elf_strptr(e, sh.sh_link, s.st_name);
      if (!nm) continue;
      // C++ statics are mangled (_ZL10cache_lock): compare the demangled name too
      if (name == nm || (nm[0] == '_' && nm[1] == 'Z' && std::strstr(nm, name.c_str()) &&
                         demangle(nm) == name))
        out.push_back(bias + s.st_value);
    }
  }
  elf_end(e);
  close(fd);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<uint64_t> find_user_data_symbol(uint32_t pid, const std::string& name) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  std::set<std::string> done;
  std::vector<uint64_t> out;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, off, dev, inode, path;
    in >> range >> perms >> off >> dev >> inode;
    std::getline(in, path);
    path.erase(0, path.find_first_not_of(' '));
    if (path.empty() || path[0] != '/' || done.count(path)) continue;
    done.insert(path);  // the first mapping of a file has the lowest offset
    uint64_t start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    uint64_t offset = std::stoull(off, nullptr, 16);
    std::string file = "/proc/" + std::to_string(pid) + "/root" + path;
    for (uint64_t a : find_data_symbol_in_file(file, name, start, offset)) out.push_back(a);
  }
  return out;
}

namespace {
bool is_data_type(char t) { return std::string("dDbBrR").find(t) != std::string::npos; }
}  // namespace

std::vector<uint64_t> find_kernel_data_symbol(const std::string& name) {
  std::ifstream in("/proc/kallsyms");
  std::string addr, type, sym;
  std::vector<uint64_t> out;
  while (in >> addr >> type >> sym) {
    in.ignore(1 << 20, '\n');
    if (sym == name && type.size() == 1 && is_data_type(type[0])) {
      uint64_t a = std::stoull(addr, nullptr, 16);
      if (a) out.push_back(a);
    }
  }
  return out;
}

std::string kernel_data_symbol_at(uint64_t addr) {
  static std::map<uint64_t, std::string>* table = nullptr;
  if (!table) {
    table = new std::map<uint64_t, std::string>();
    std::ifstream in("/proc/kallsyms");
    std::string a, type, sym;
    while (in >> a >> type >> sym) {
      in.ignore(1 << 20, '\n');
      if (type.size() == 1 && is_data_type(type[0])) (*table)[std::stoull(a, nullptr, 16)] = sym;
    }
    table->erase(0);
  }
  auto it = table->find(addr);
  return it == table->end() ? "" : it->second;
}

}  // namespace bpfdiag
