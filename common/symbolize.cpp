// The Symbolizer: per-process snapshots (mappings, modules, perf map) over the shared
// per-file symbol tables of symbol_tables.cpp, and forgetting processes that exited.
#include "common/symbolize.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/debuginfod.h"
#include "common/elf_symbols.h"
#include "common/jvm_attach.h"
#include "common/proc.h"
#include "common/runloop.h"
#include "common/target.h"
#include "common/timing.h"
#include "common/untrusted_file.h"

namespace bpfdiag {

using PathRef = std::shared_ptr<const std::string>;

struct Symbolizer::Module {
  uint64_t lo = 0, hi = 0;  // address range covered by the ELF image (incl. .bss)
  uint64_t bias = 0;        // runtime address - ELF vaddr
  std::shared_ptr<ElfSymbols> elf;
  PathRef path;             // as in /proc/PID/maps (interned)
};

struct PerfMapSym {
  uint64_t addr, size;
  std::string name;
};

struct Symbolizer::Process {
  std::vector<Module> modules;  // sorted by lo
  struct Mapping {
    uint64_t start, end;
    PathRef path;
  };
  std::vector<Mapping> maps;        // file-backed mappings (for [unknown] (module+off) names)
  std::vector<PerfMapSym> perfmap;  // sorted by addr
  uint64_t loaded_ns = 0;    // when the snapshot was taken (CLOCK_MONOTONIC)
  uint64_t start_time = 0;   // /proc/PID/stat starttime (0: process already gone)
  bool partial = false;      // mappings or symbol tables skipped after a stop signal
  std::unordered_map<std::string, FrameOrigin> origins;  // keep_origins(): by frame name
};

// The vDSO's symbols (__vdso_clock_gettime, ...) and its size: the kernel's own image,
// the same in every process of this kernel and ABI, read from this process's memory
// (getauxval(AT_SYSINFO_EHDR)), never from a target's: a process can rewrite its copy.
// Copied to a sealed memfd so the ELF reader gets a file. Null when there is none.
static const std::pair<std::shared_ptr<ElfSymbols>, uint64_t>& own_vdso() {
  static const std::pair<std::shared_ptr<ElfSymbols>, uint64_t> vdso = []() -> std::pair<std::shared_ptr<ElfSymbols>, uint64_t> {
    const uint64_t base = getauxval(AT_SYSINFO_EHDR);
    if (!base) return {nullptr, 0};
    uint64_t size = 0;
    std::ifstream f("/proc/self/maps");
    for (std::string line; std::getline(f, line);)
      if (auto m = parse_maps_line(line); m && m->path == "[vdso]" && m->start == base) size = m->end - m->start;
    if (!size || size > (1u << 20)) return {nullptr, 0};
    int fd = memfd_create("bpfdiag-vdso", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return {nullptr, 0};
    struct stat st;
    if (write(fd, reinterpret_cast<const void*>(base), size) != static_cast<ssize_t>(size) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0 || fstat(fd, &st) != 0) {
      close(fd);
      return {nullptr, 0};
    }
    auto file = std::make_shared<UntrustedFile>(fd, size, st.st_dev, st.st_ino, 0, 0);
    file->set_name("[vdso]");
    auto syms = ElfSymbols::load(file, /*debug_files=*/false);
    if (!syms || !syms->ok) return {nullptr, 0};
    return {syms, size};
  }();
  return vdso;
}

// Whether process `pid`'s vDSO at `start` is this process's image: its ELF header (class,
// machine, entry, section counts) read from the target's memory, for comparison only.
static bool same_vdso(uint32_t pid, uint64_t start) {
  unsigned char theirs[64];
  int fd = open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool same = pread(fd, theirs, sizeof theirs, static_cast<off_t>(start)) == static_cast<ssize_t>(sizeof theirs) &&
              std::memcmp(theirs, reinterpret_cast<const void*>(getauxval(AT_SYSINFO_EHDR)), sizeof theirs) == 0;
  close(fd);
  return same;
}

// Start time of pid (common/target.h): tells a process from a later one that reuses
// its PID. 0 when there is no such process.
static uint64_t start_time_of(uint32_t pid) { return proc_start_time(pid).value_or(0); }

Symbolizer::Symbolizer() : Symbolizer(Options{}) {}
Symbolizer::Symbolizer(Options o) : opt_(o) {}
Symbolizer::~Symbolizer() = default;

bool Symbolizer::remembered(uint32_t pid) const { return procs_.count(pid) != 0; }

bool Symbolizer::remember(uint32_t pid) {
  if (procs_.count(pid)) return true;
  auto p = std::make_unique<Process>();
  if (past_stop_deadline()) {  // the final report is due: no new snapshots
    p->partial = true;
    p->loaded_ns = monotonic_ns();
    procs_[pid] = std::move(p);
    return false;
  }
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
  if (past_stop_deadline() || !load_process(pid, *p)) {
    auto it = procs_.find(pid);
    if (it != procs_.end()) it->second->loaded_ns = monotonic_ns();  // rate-limit retries
    return false;
  }
  if (auto old = procs_.find(pid); old != procs_.end()) p->origins = std::move(old->second->origins);
  procs_[pid] = std::move(p);
  return true;
}

size_t Symbolizer::forget_exited(const std::function<bool(uint32_t)>& keep) {
  size_t n = 0;
  for (auto it = procs_.begin(); it != procs_.end();) {
    uint32_t pid = it->first;
    bool gone = it->second->start_time == 0 || start_time_of(pid) != it->second->start_time;
    if (gone && !(keep && keep(pid))) {
      it = procs_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  stats_.pids_forgotten += n;
  // symbol tables and path names no remembered process uses any more
  for (auto it = elf_cache_.begin(); it != elf_cache_.end();)
    it = it->second.use_count() == 1 ? elf_cache_.erase(it) : std::next(it);
  for (auto it = paths_.begin(); it != paths_.end();) it = it->second.expired() ? paths_.erase(it) : std::next(it);
  last_gc_ns_ = monotonic_ns();
  return n;
}

size_t Symbolizer::forget_exited_every(uint64_t interval_ns,
                                       const std::function<std::set<uint32_t>()>& still_needed) {
  uint64_t now = monotonic_ns();
  if (last_gc_ns_ && now - last_gc_ns_ < interval_ns) return 0;
  // A stop signal wants the final report now, and the sweep can wait for a later run:
  // it reads every remembered process's /proc stat and the caller's whole table (under
  // crowd_storm: thousands of processes, a 900 ms sweep between Ctrl-C and the report).
  if (stop_signal()) return 0;
  last_gc_ns_ = now;
  // Which remembered processes are gone: checked before asking what is still needed,
  // so anything a process did before it exited is already in that answer.
  std::set<uint32_t> gone;
  for (auto& [pid, p] : procs_) {
    if (stop_signal()) return 0;
    if (p->start_time == 0 || start_time_of(pid) != p->start_time) gone.insert(pid);
  }
  if (gone.empty() || stop_signal()) return 0;
  std::set<uint32_t> needed = still_needed ? still_needed() : std::set<uint32_t>{};
  if (stop_signal()) return 0;  // the answer may have been cut short: forget nothing
  return forget_exited([&](uint32_t pid) { return !gone.count(pid) || needed.count(pid); });
}

size_t Symbolizer::remembered_count() const { return procs_.size(); }
size_t Symbolizer::symbol_tables_count() const { return elf_cache_.size(); }

std::shared_ptr<const std::string> Symbolizer::intern(const std::string& s) {
  auto& w = paths_[s];
  if (auto sp = w.lock()) return sp;
  auto sp = std::make_shared<const std::string>(s);
  w = sp;
  return sp;
}

std::optional<PerfMapEntry> parse_perfmap_line(std::string_view l) {
  std::string line(l);
  char* end = nullptr;
  uint64_t a = std::strtoull(line.c_str(), &end, 16);
  if (!end || *end != ' ') return std::nullopt;
  char* end2 = nullptr;
  uint64_t sz = std::strtoull(end + 1, &end2, 16);
  if (!end2 || *end2 != ' ') return std::nullopt;
  return PerfMapEntry{a, sz, std::string(end2 + 1)};
}

// /tmp/perf-PID.map (JIT symbols): owned by root or the process's owner, regular,
// at most kMaxPerfMapSize, lines at most kMaxPerfMapLine.
static void load_perfmap(uint32_t pid, std::vector<PerfMapSym>& out) {
  auto uids = process_uids(pid);
  if (!uids) return;
  UntrustedPolicy pol;
  pol.max_size = kMaxPerfMapSize;
  pol.owner = uids->effective;
  std::string path = "/tmp/perf-" + std::to_string(pid) + ".map";
  std::string shown = path;
  UntrustedOpen r = open_untrusted(path, pol);
  if (!r.file && r.refused.empty() && r.err == ENOENT) {  // in a container's own /tmp?
    // named by its PID in its own PID namespace (a container's JVM writes perf-1.map)
    auto ids = jvm_ids(pid);
    const std::string nspath = "/tmp/perf-" + std::to_string(ids ? ids->nspid : pid) + ".map";
    r = open_in_proc_root(pid, nspath, pol);
    shown = "/proc/" + std::to_string(pid) + "/root" + nspath;
    if (!r.file && r.refused.empty() && r.err == ENOENT && nspath != path) {
      r = open_in_proc_root(pid, path, pol);
      shown = "/proc/" + std::to_string(pid) + "/root" + path;
    }
  }
  if (!r.file) {
    warn_if_refused(shown, r);
    return;
  }
  size_t skipped = read_capped_lines(*r.file, kMaxPerfMapSize, kMaxPerfMapLine, [&](std::string_view l) {
    if (auto e = parse_perfmap_line(l)) out.push_back({e->addr, e->size, std::move(e->name)});
  });
  if (skipped)
    warn_refused_keyed(shown + "#lines", std::to_string(skipped) + (skipped == 1 ? " line of " : " lines of ") + shown,
                       "longer than " + std::to_string(kMaxPerfMapLine) + " bytes");
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.addr < b.addr; });
  out.shrink_to_fit();
}

// The ELF image behind one mapping (open_mapping: its map_files entry, else its path
// inside the process's root without following links).
std::shared_ptr<ElfSymbols> Symbolizer::elf_for(uint32_t pid, const std::string& path, const std::string& range) {
  UntrustedOpen mapped = open_mapping(pid, range, "");
  // A refused map_files entry is a mapped device or an oversized file: legitimate
  // mappings (GPU drivers map devices), not worth a warning and not worth a retry.
  if (!mapped.file && !mapped.refused.empty()) return nullptr;
  UntrustedOpen r = mapped.file ? mapped : open_mapping(pid, "", path);
  if (!r.file) {
    warn_if_refused(path, r);
    return nullptr;
  }
  std::string key = r.file->identity();
  auto it = elf_cache_.find(key);
  if (it != elf_cache_.end()) return it->second;
  if (past_stop_deadline()) {  // the final report is due: no new symbol tables
    skipped_elf_ = true;
    return nullptr;
  }
  auto e = ElfSymbols::load(r.file, opt_.debug_files);
  elf_cache_[key] = e;
  return e;
}

bool Symbolizer::load_process(uint32_t pid, Process& p) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  if (!f) return false;
  std::string line;
  struct Raw {
    uint64_t start, end, off, inode;
    std::string path;
  };
  std::vector<Raw> raws;
  bool any = false;
  while (std::getline(f, line)) {
    auto m = parse_maps_line(line);
    if (!m) continue;
    any = true;
    Raw r{m->start, m->end, m->offset, m->inode, without_deleted_suffix(m->path)};
    if (r.path.empty()) continue;
    p.maps.push_back({r.start, r.end, intern(r.path)});
    if (r.path[0] == '/' && r.inode != 0) raws.push_back(r);
    // the target's vDSO, named from this process's own when it is the same image (a
    // 32-bit process maps another)
    if (r.path == "[vdso]" && own_vdso().first && m->end - m->start == own_vdso().second && same_vdso(pid, r.start))
      if (auto bias = own_vdso().first->bias_for_mapping(r.start, 0)) {
        Module v;
        v.path = intern(r.path);
        v.elf = own_vdso().first;
        v.bias = *bias;
        v.lo = r.start;
        v.hi = r.end;
        p.modules.push_back(std::move(v));
      }
  }
  if (!any) return false;
  p.start_time = start_time_of(pid);
  std::map<std::string, size_t> index;  // path -> module index
  skipped_elf_ = false;
  for (auto& r : raws) {
    if (index.count(r.path)) continue;
    auto elf = elf_for(pid, r.path, map_range(r.start, r.end));
    if (!elf || !elf->ok) continue;
    // runtime = bias + vaddr; this mapping starts at file offset r.off, which is
    // vaddr seg->vaddr + (r.off - seg->offset).
    auto bias = elf->bias_for_mapping(r.start, r.off);
    if (!bias) continue;
    Module m;
    m.path = intern(r.path);
    m.elf = elf;
    m.bias = *bias;
    m.lo = m.bias + elf->min_vaddr();
    m.hi = m.bias + elf->max_vaddr();
    index[r.path] = p.modules.size();
    p.modules.push_back(std::move(m));
  }
  p.partial = skipped_elf_;
  std::sort(p.modules.begin(), p.modules.end(), [](auto& a, auto& b) { return a.lo < b.lo; });
  p.modules.shrink_to_fit();
  p.maps.shrink_to_fit();
  load_perfmap(pid, p.perfmap);
  p.loaded_ns = monotonic_ns();
  return true;
}

SymbolInfo Symbolizer::lookup_in_process(uint32_t pid, uint64_t addr, bool want_data, FrameOrigin* origin) {
  SymbolInfo out;
  remember(pid);
  // An address outside every known module of a live process: it may have mapped
  // more since the snapshot (late ld.so work, dlopen, JIT). Re-read, rate-limited.
  {
    Process& p = *procs_[pid];
    bool covered = false;
    for (auto& m : p.modules) covered = covered || (addr >= m.lo && addr < m.hi);
    if (!covered && monotonic_ns() - p.loaded_ns > 100000000ULL) refresh(pid);
  }
  Process& p = *procs_[pid];
  for (auto& m : p.modules) {
    if (addr < m.lo || addr >= m.hi) continue;
    if (m.elf->debuginfod_pending) settle_debuginfod(*m.elf);
    uint64_t vaddr = addr - m.bias;
    out.module = *m.path;
    if (origin) *origin = FrameOrigin{*m.path, addr, m.lo, m.hi, m.elf->build_id};
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
    if (addr >= mp.start && addr < mp.end) {
      out.module = *mp.path;
      out.module_offset = addr - mp.start;
      break;
    }
  return out;
}

// A frame in a file whose debuginfod lookup was asked for: its outcome applied when it
// has come (waiting within the run's budget, not after a stop signal), counted once.
void Symbolizer::settle_debuginfod(ElfSymbols& e) {
  const bool wait = !stop_signal();
  switch (e.settle_debuginfod(wait)) {
    case ElfSymbols::Settled::Applied:
      stats_.debuginfod_files++;
      break;
    case ElfSymbols::Settled::Failed:
      if (!e.debuginfod_failed) stats_.debuginfod_failed++;
      e.debuginfod_failed = true;
      break;
    case ElfSymbols::Settled::Pending:  // still asked for: a later report may get it
      if (!e.debuginfod_failed) {
        stats_.debuginfod_failed++;
        debuginfod_note(e.build_id + "#late",
                        "no answer for " + debuginfod_file_label(e.name, e.build_id) + " in time for the report" +
                            (wait ? " (the run's " + std::to_string(kDebuginfodWaitNs / 1000000000ULL) + " s budget)"
                                  : std::string(" (stopped)")) +
                            ": its frames stay addresses");
      }
      e.debuginfod_failed = true;
      break;
  }
}

SymbolInfo Symbolizer::lookup_user(uint32_t pid, uint64_t addr) {
  FrameOrigin o;
  SymbolInfo s = lookup_in_process(pid, addr, false, keep_origins_ ? &o : nullptr);
  if (keep_origins_) {
    if (o.module.empty()) o = FrameOrigin{s.module, addr, 0, 0, ""};  // perf map, or a mapping without symbols
    auto it = procs_.find(pid);
    if (it != procs_.end()) it->second->origins.emplace(format_symbol(s, false), std::move(o));
  }
  if (!s.found) {
    auto it = procs_.find(pid);
    if (it != procs_.end() && it->second->partial)
      stats_.symbolize_skipped++;
    else
      stats_.user_unknown++;
  }
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

void Symbolizer::load_kallsyms() {
  kallsyms_loaded_ = true;
  ksyms_ = read_kallsyms().text;
  timing_mark("read /proc/kallsyms");
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
  if (keep_origins_) kernel_origins_.emplace(out.name, FrameOrigin{out.module, addr, 0, 0, ""});
  return out;
}

const FrameOrigin* Symbolizer::origin(uint32_t pid, const std::string& name) const {
  if (pid == 0) {
    auto it = kernel_origins_.find(name);
    return it == kernel_origins_.end() ? nullptr : &it->second;
  }
  auto p = procs_.find(pid);
  if (p == procs_.end()) return nullptr;
  auto it = p->second->origins.find(name);
  return it == p->second->origins.end() ? nullptr : &it->second;
}

std::string Symbolizer::kernel(uint64_t addr, bool with_offset) {
  return format_symbol(lookup_kernel(addr), with_offset);
}

std::vector<uint64_t> Symbolizer::find_data(uint32_t pid, const std::string& name) {
  std::vector<uint64_t> out;
  if (!remember(pid)) return out;
  for (auto& m : procs_[pid]->modules) {
    if (m.elf->debuginfod_pending) settle_debuginfod(*m.elf);
    for (uint64_t v : m.elf->find_objects(name)) out.push_back(m.bias + v);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<uint64_t> find_user_data_symbol(uint32_t pid, const std::string& name) {
  Symbolizer sym;
  return sym.find_data(pid, name);
}

}  // namespace bpfdiag
