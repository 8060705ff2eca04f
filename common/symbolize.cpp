#include "common/symbolize.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace bpfdiag {

// --- formatting ---------------------------------------------------------------------

static std::string basename_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

static std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

std::string format_symbol(const SymbolInfo& s, bool with_offset) {
  if (!s.found) {
    if (s.module.empty()) return "[unknown]";
    return "[unknown] (" + basename_of(s.module) + "+" + hex(s.module_offset) + ")";
  }
  if (with_offset && s.offset) return s.name + "+" + hex(s.offset);
  return s.name;
}

std::string format_data_symbol(const SymbolInfo& s) {
  if (!s.found) return format_symbol(s, false);
  if (s.offset) return s.name + "+" + std::to_string(s.offset);
  return s.name;
}

std::string demangle(const std::string& name) {
  if (name.size() < 3 || name[0] != '_' || name[1] != 'Z') return name;
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !d) return name;
  std::string out = d;
  std::free(d);
  return out;
}

// --- one ELF file's symbols -----------------------------------------------------------

struct ElfSym {
  uint64_t addr;
  uint64_t size;
  std::string name;
};

struct LoadSeg {
  uint64_t vaddr, offset, filesz, memsz;
};

class ElfSymbols {
 public:
  bool ok = false;
  bool exec = false;  // ET_EXEC (no load bias)
  std::vector<LoadSeg> segs;
  std::vector<ElfSym> funcs;  // sorted by addr
  std::vector<ElfSym> objs;   // sorted by addr
  std::string build_id;

  static std::shared_ptr<ElfSymbols> load(const std::string& path, bool debug_files);

  // Segment containing file offset `off` (page-rounded), for load-bias computation.
  const LoadSeg* seg_for_offset(uint64_t off) const {
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

  // ELF vaddrs of the OBJECT symbols named `name`, matched as written or demangled
  // (`static pthread_mutex_t cache_lock` is _ZL10cache_lock). Sorted, unique.
  std::vector<uint64_t> find_objects(const std::string& name) const {
    std::vector<uint64_t> out;
    for (auto& s : objs)
      if (s.name == name || (s.name.compare(0, 2, "_Z") == 0 && demangle(s.name) == name))
        out.push_back(s.addr);
    return out;
  }

  // Load bias of a mapping at `map_start` of file offset `map_offset`; nullopt when
  // the offset is in no PT_LOAD segment. runtime address = bias + ELF vaddr.
  std::optional<uint64_t> bias_for_mapping(uint64_t map_start, uint64_t map_offset) const {
    const LoadSeg* seg = seg_for_offset(map_offset);
    if (!seg) return std::nullopt;
    return exec ? 0 : map_start - (seg->vaddr + map_offset - seg->offset);
  }

  static const ElfSym* find(const std::vector<ElfSym>& v, uint64_t vaddr, bool allow_sizeless) {
    auto it = std::upper_bound(v.begin(), v.end(), vaddr,
                               [](uint64_t a, const ElfSym& s) { return a < s.addr; });
    // Walk back over symbols at lower addresses: a sized symbol that covers vaddr wins;
    // nested/overlapping symbols are rare, so a short walk is enough.
    for (int n = 0; it != v.begin() && n < 8; ++n) {
      --it;
      if (vaddr < it->addr + it->size) return &*it;
      if (it->size == 0 && allow_sizeless && n == 0) return &*it;
      if (it->size == 0 && vaddr == it->addr) return &*it;
    }
    return nullptr;
  }

 private:
  void read_symbols(Elf* e);
  void finish();
};

static void read_build_id(Elf* e, std::string& out) {
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(e, scn))) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE) continue;
    Elf_Data* d = elf_getdata(scn, nullptr);
    if (!d) continue;
    size_t off = 0, name_off, desc_off;
    GElf_Nhdr nh;
    while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
          std::memcmp(static_cast<char*>(d->d_buf) + name_off, "GNU", 4) == 0) {
        const unsigned char* p = static_cast<unsigned char*>(d->d_buf) + desc_off;
        char b[3];
        for (size_t i = 0; i < nh.n_descsz; ++i) {
          std::snprintf(b, sizeof b, "%02x", p[i]);
          out += b;
        }
        return;
      }
    }
  }
}

void ElfSymbols::read_symbols(Elf* e) {
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(e, scn))) {
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM)) continue;
    Elf_Data* d = elf_getdata(scn, nullptr);
    if (!d || sh.sh_entsize == 0) continue;
    size_t n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < n; ++i) {
      GElf_Sym s;
      if (!gelf_getsym(d, static_cast<int>(i), &s)) continue;
      if (s.st_shndx == SHN_UNDEF || s.st_value == 0) continue;
      int type = GELF_ST_TYPE(s.st_info);
      const char* nm = elf_strptr(e, sh.sh_link, s.st_name);
      if (!nm || !*nm) continue;
      if (type == STT_FUNC || type == STT_GNU_IFUNC)
        funcs.push_back({s.st_value, s.st_size, nm});
      else if (type == STT_OBJECT || type == STT_COMMON)
        objs.push_back({s.st_value, s.st_size, nm});
    }
  }
}

void ElfSymbols::finish() {
  for (auto* v : {&funcs, &objs}) {
    // Prefer sized, global-looking names on duplicate addresses: sort by addr, then by
    // size descending, then name; drop exact duplicates (symtab and dynsym overlap).
    std::sort(v->begin(), v->end(), [](const ElfSym& a, const ElfSym& b) {
      if (a.addr != b.addr) return a.addr < b.addr;
      if (a.size != b.size) return a.size > b.size;
      return a.name < b.name;
    });
    v->erase(std::unique(v->begin(), v->end(),
                         [](const ElfSym& a, const ElfSym& b) { return a.addr == b.addr; }),
             v->end());
  }
}

std::shared_ptr<ElfSymbols> ElfSymbols::load(const std::string& path, bool debug_files) {
  auto out = std::make_shared<ElfSymbols>();
  elf_version(EV_CURRENT);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  Elf* e = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  GElf_Ehdr eh;
  if (!e || elf_kind(e) != ELF_K_ELF || !gelf_getehdr(e, &eh)) {
    if (e) elf_end(e);
    close(fd);
    return out;
  }
  out->exec = eh.e_type == ET_EXEC;
  size_t nph = 0;
  elf_getphdrnum(e, &nph);
  for (size_t i = 0; i < nph; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(e, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD)
      out->segs.push_back({ph.p_vaddr, ph.p_offset, ph.p_filesz, ph.p_memsz});
  }
  bool has_symtab = false;
  Elf_Scn* scn = nullptr;
  while ((scn = elf_nextscn(e, scn))) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_SYMTAB) has_symtab = true;
  }
  read_build_id(e, out->build_id);
  out->read_symbols(e);
  elf_end(e);
  close(fd);
  // Detached debug symbols (e.g. Debian's libc6-dbg) carry the full .symtab.
  if (!has_symtab && debug_files && out->build_id.size() > 2) {
    std::string dbg = "/usr/lib/debug/.build-id/" + out->build_id.substr(0, 2) + "/" +
                      out->build_id.substr(2) + ".debug";
    int dfd = open(dbg.c_str(), O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
      Elf* de = elf_begin(dfd, ELF_C_READ_MMAP, nullptr);
      if (de && elf_kind(de) == ELF_K_ELF) out->read_symbols(de);
      if (de) elf_end(de);
      close(dfd);
    }
  }
  out->finish();
  out->ok = !out->segs.empty();
  return out;
}

// --- processes --------------------------------------------------------------------------

struct Symbolizer::Module {
  std::string path;       // as in /proc/PID/maps
  uint64_t lo = 0, hi = 0;  // address range covered by the ELF image (incl. .bss)
  uint64_t bias = 0;      // runtime address - ELF vaddr
  std::shared_ptr<ElfSymbols> elf;
};

struct PerfMapSym {
  uint64_t addr, size;
  std::string name;
};

struct Symbolizer::Process {
  std::vector<Module> modules;  // sorted by lo
  struct Mapping {
    uint64_t start, end;
    std::string path;
  };
  std::vector<Mapping> maps;      // every mapping (for [unknown] (module+off) names)
  std::vector<PerfMapSym> perfmap;  // sorted by addr
  bool perfmap_tried = false;
  uint64_t loaded_ns = 0;  // when the snapshot was taken (CLOCK_MONOTONIC)
};

static uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

Symbolizer::Symbolizer() : Symbolizer(Options{}) {}
Symbolizer::Symbolizer(Options o) : opt_(o) {}
Symbolizer::~Symbolizer() = default;

bool Symbolizer::remembered(uint32_t pid) const { return procs_.count(pid) != 0; }

bool Symbolizer::remember(uint32_t pid) {
  if (procs_.count(pid)) return true;
  auto p = std::make_unique<Process>();
  if (!load_process(pid, *p)) {
    stats_.pids_unreadable++;
    procs_[pid] = std::move(p);  // remember the failure too: don't retry every event
    return false;
  }
  procs_[pid] = std::move(p);
  return true;
}

bool Symbolizer::refresh(uint32_t pid) {
  auto p = std::make_unique<Process>();
  if (!load_process(pid, *p)) {
    auto it = procs_.find(pid);
    if (it != procs_.end()) it->second->loaded_ns = mono_ns();  // rate-limit retries
    return false;
  }
  procs_[pid] = std::move(p);
  return true;
}

static void load_perfmap(uint32_t pid, std::vector<PerfMapSym>& out) {
  std::ifstream f("/tmp/perf-" + std::to_string(pid) + ".map");
  if (!f) f.open("/proc/" + std::to_string(pid) + "/root/tmp/perf-" + std::to_string(pid) + ".map");
  std::string line;
  while (std::getline(f, line)) {
    char* end = nullptr;
    uint64_t a = std::strtoull(line.c_str(), &end, 16);
    if (!end || *end != ' ') continue;
    char* end2 = nullptr;
    uint64_t sz = std::strtoull(end + 1, &end2, 16);
    if (!end2 || *end2 != ' ') continue;
    out.push_back({a, sz, std::string(end2 + 1)});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.addr < b.addr; });
}

std::shared_ptr<ElfSymbols> Symbolizer::elf_for(uint32_t pid, const std::string& path, uint64_t dev,
                                                uint64_t inode, const std::string& map_files_path) {
  std::string key = std::to_string(dev) + ":" + std::to_string(inode) + ":" + path;
  auto it = elf_cache_.find(key);
  if (it != elf_cache_.end()) return it->second;
  // Through the process's root first (containers), then map_files (deleted files),
  // then the plain path.
  std::shared_ptr<ElfSymbols> e;
  for (const std::string& cand :
       {"/proc/" + std::to_string(pid) + "/root" + path, map_files_path, path}) {
    if (cand.empty()) continue;
    e = ElfSymbols::load(cand, opt_.debug_files);
    if (e->ok) break;
  }
  elf_cache_[key] = e;
  return e;
}

bool Symbolizer::load_process(uint32_t pid, Process& p) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  if (!f) return false;
  std::string line;
  struct Raw {
    uint64_t start, end, off, dev, inode;
    std::string path;
  };
  std::vector<Raw> raws;
  while (std::getline(f, line)) {
    Raw r{};
    char perms[8] = {0};
    unsigned maj = 0, min = 0;
    int consumed = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &r.start,
                    &r.end, perms, &r.off, &maj, &min, &r.inode, &consumed) < 7)
      continue;
    r.dev = (static_cast<uint64_t>(maj) << 32) | min;
    if (consumed > 0 && static_cast<size_t>(consumed) < line.size()) r.path = line.substr(consumed);
    const std::string del = " (deleted)";
    if (r.path.size() > del.size() && r.path.compare(r.path.size() - del.size(), del.size(), del) == 0)
      r.path.resize(r.path.size() - del.size());
    p.maps.push_back({r.start, r.end, r.path});
    if (!r.path.empty() && r.path[0] == '/' && r.inode != 0) raws.push_back(r);
  }
  if (p.maps.empty()) return false;
  std::map<std::string, size_t> index;  // path -> module index
  for (auto& r : raws) {
    if (index.count(r.path)) continue;
    char mf[96];
    std::snprintf(mf, sizeof mf, "/proc/%u/map_files/%" PRIx64 "-%" PRIx64, pid, r.start, r.end);
    auto elf = elf_for(pid, r.path, r.dev, r.inode, mf);
    if (!elf->ok) continue;
    // runtime = bias + vaddr; this mapping starts at file offset r.off, which is
    // vaddr seg->vaddr + (r.off - seg->offset).
    auto bias = elf->bias_for_mapping(r.start, r.off);
    if (!bias) continue;
    Module m;
    m.path = r.path;
    m.elf = elf;
    m.bias = *bias;
    m.lo = m.bias + elf->min_vaddr();
    m.hi = m.bias + elf->max_vaddr();
    index[r.path] = p.modules.size();
    p.modules.push_back(std::move(m));
  }
  std::sort(p.modules.begin(), p.modules.end(), [](auto& a, auto& b) { return a.lo < b.lo; });
  load_perfmap(pid, p.perfmap);
  p.perfmap_tried = true;
  p.loaded_ns = mono_ns();
  return true;
}

SymbolInfo Symbolizer::lookup_in_process(uint32_t pid, uint64_t addr, bool want_data) {
  SymbolInfo out;
  remember(pid);
  // An address outside every known module of a live process: it may have mapped
  // more since the snapshot (late ld.so work, dlopen, JIT). Re-read, rate-limited.
  {
    Process& p = *procs_[pid];
    bool covered = false;
    for (auto& m : p.modules) covered = covered || (addr >= m.lo && addr < m.hi);
    if (!covered && mono_ns() - p.loaded_ns > 100000000ULL) refresh(pid);
  }
  Process& p = *procs_[pid];
  for (auto& m : p.modules) {
    if (addr < m.lo || addr >= m.hi) continue;
    uint64_t vaddr = addr - m.bias;
    out.module = m.path;
    out.module_offset = vaddr;
    const ElfSym* s = want_data ? ElfSymbols::find(m.elf->objs, vaddr, false)
                                : ElfSymbols::find(m.elf->funcs, vaddr, true);
    if (s) {
      out.found = true;
      out.name = opt_.demangle ? demangle(s->name) : s->name;
      out.offset = vaddr - s->addr;
    }
    return out;
  }
  if (!want_data) {
    auto it = std::upper_bound(p.perfmap.begin(), p.perfmap.end(), addr,
                               [](uint64_t a, const PerfMapSym& s) { return a < s.addr; });
    if (it != p.perfmap.begin()) {
      --it;
      if (addr < it->addr + std::max<uint64_t>(it->size, 1)) {
        out.found = true;
        out.name = it->name;
        out.offset = addr - it->addr;
        out.module = "/tmp/perf-" + std::to_string(pid) + ".map";
        return out;
      }
    }
  }
  for (auto& mp : p.maps)
    if (addr >= mp.start && addr < mp.end && !mp.path.empty()) {
      out.module = mp.path;
      out.module_offset = addr - mp.start;
      break;
    }
  return out;
}

SymbolInfo Symbolizer::lookup_user(uint32_t pid, uint64_t addr) {
  SymbolInfo s = lookup_in_process(pid, addr, false);
  if (!s.found) stats_.user_unknown++;
  return s;
}

std::string Symbolizer::user(uint32_t pid, uint64_t addr, bool with_offset) {
  return format_symbol(lookup_user(pid, addr), with_offset);
}

SymbolInfo Symbolizer::lookup_data(uint32_t pid, uint64_t addr) {
  return lookup_in_process(pid, addr, true);
}

std::string Symbolizer::data(uint32_t pid, uint64_t addr) {
  return format_data_symbol(lookup_data(pid, addr));
}

// --- kernel ----------------------------------------------------------------------------

static bool is_text_type(char t) { return t == 't' || t == 'T' || t == 'w' || t == 'W'; }
static bool is_data_type(char t) {
  return t == 'd' || t == 'D' || t == 'b' || t == 'B' || t == 'r' || t == 'R';
}

KernelSymbols read_kallsyms(const std::string& path) {
  KernelSymbols out;
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return out;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    char* end = nullptr;
    uint64_t a = std::strtoull(line, &end, 16);
    if (!end || end[0] != ' ' || !end[1] || end[2] != ' ') continue;
    char t = end[1];
    bool text = is_text_type(t);
    if (!text && !is_data_type(t)) continue;
    if (a == 0) continue;  // kptr_restrict hides addresses
    char* name = end + 3;
    size_t len = std::strcspn(name, "\t\n ");
    std::string mod;
    char* br = std::strchr(name + len, '[');
    if (br) {
      char* cl = std::strchr(br, ']');
      if (cl) mod.assign(br, static_cast<size_t>(cl - br + 1));
    }
    (text ? out.text : out.data).push_back({a, std::string(name, len), mod, t});
  }
  std::fclose(f);
  // Aliases share an address (e.g. _stext/_text): the first one read wins lookups.
  for (auto* v : {&out.text, &out.data})
    std::stable_sort(v->begin(), v->end(), [](auto& a, auto& b) { return a.addr < b.addr; });
  return out;
}

// Process-wide snapshot for the name -> address helpers (read on first use).
static const KernelSymbols& shared_kallsyms() {
  static const KernelSymbols k = read_kallsyms();
  return k;
}

void Symbolizer::load_kallsyms() {
  kallsyms_loaded_ = true;
  ksyms_ = read_kallsyms().text;
}

bool Symbolizer::kernel_symbols_available() {
  if (!kallsyms_loaded_) load_kallsyms();
  return !ksyms_.empty();
}

SymbolInfo Symbolizer::lookup_kernel(uint64_t addr) {
  if (!kallsyms_loaded_) load_kallsyms();
  SymbolInfo out;
  auto it = std::upper_bound(ksyms_.begin(), ksyms_.end(), addr,
                             [](uint64_t a, const KernelSymbol& s) { return a < s.addr; });
  if (it == ksyms_.begin() || addr < 0xffff000000000000ULL) {
    stats_.kernel_unknown++;
    return out;
  }
  --it;
  // Aliases share an address (e.g. _stext/_text); the first one read wins after the
  // stable sort.
  out.found = true;
  out.name = it->name;
  out.offset = addr - it->addr;
  out.module = it->module.empty() ? "[kernel]" : it->module;
  out.module_offset = addr;
  return out;
}

std::string Symbolizer::kernel(uint64_t addr, bool with_offset) {
  return format_symbol(lookup_kernel(addr), with_offset);
}

// --- data symbols by name (lock filters) ------------------------------------------

std::vector<uint64_t> find_data_symbol_in_file(const std::string& path, const std::string& name,
                                               uint64_t map_start, uint64_t map_offset) {
  auto elf = ElfSymbols::load(path, /*debug_files=*/true);
  std::vector<uint64_t> out;
  if (!elf->ok) return out;
  auto bias = elf->bias_for_mapping(map_start, map_offset);
  if (!bias) return out;
  for (uint64_t v : elf->find_objects(name)) out.push_back(*bias + v);
  return out;
}

std::vector<uint64_t> Symbolizer::find_data(uint32_t pid, const std::string& name) {
  std::vector<uint64_t> out;
  if (!remember(pid)) return out;
  for (auto& m : procs_[pid]->modules)
    for (uint64_t v : m.elf->find_objects(name)) out.push_back(m.bias + v);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<uint64_t> find_user_data_symbol(uint32_t pid, const std::string& name) {
  Symbolizer sym;
  return sym.find_data(pid, name);
}

std::vector<uint64_t> find_kernel_data_symbol(const std::string& name) {
  std::vector<uint64_t> out;
  for (auto& k : shared_kallsyms().data)
    if (k.name == name) out.push_back(k.addr);
  return out;
}

std::string kernel_data_symbol_at(uint64_t addr) {
  auto& d = shared_kallsyms().data;
  auto it = std::lower_bound(d.begin(), d.end(), addr,
                             [](const KernelSymbol& s, uint64_t a) { return s.addr < a; });
  return it != d.end() && it->addr == addr ? it->name : "";
}

}  // namespace bpfdiag
