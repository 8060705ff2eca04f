// Symbol tables behind the Symbolizer: name formatting, one ELF file's symbols
// (ElfSymbols, read through the shared ElfFile reader), /proc/kallsyms, and the
// name -> address helpers used by lock filters.
#include <cxxabi.h>
#include <gelf.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/debuginfod.h"
#include "common/elf_symbols.h"
#include "common/go_pclntab.h"
#include "common/parse.h"
#include "common/symbolize.h"
#include "common/untrusted_file.h"

namespace bpfdiag {

// --- formatting ---------------------------------------------------------------------

static std::string basename_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string format_symbol(const SymbolInfo& s, bool with_offset) {
  if (!s.found) {
    if (s.module.empty()) return "[unknown]";
    return "[unknown] (" + basename_of(s.module) + "+" + format_hex(s.module_offset) + ")";
  }
  if (with_offset && s.offset) return s.name + "+" + format_hex(s.offset);
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

std::vector<uint64_t> ElfSymbols::find_objects(const std::string& name) const {
  std::vector<uint64_t> out;
  for (auto& s : objs)
    if (s.name == name || (s.name.compare(0, 2, "_Z") == 0 && demangle(s.name) == name))
      out.push_back(s.addr);
  return out;
}

const ElfSym* ElfSymbols::find(const std::vector<ElfSym>& v, uint64_t vaddr, bool allow_sizeless) {
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

void ElfSymbols::add_symbols(const ElfFile& e) {
  e.for_each_symbol([&](const ElfSymbolEntry& s) {
    if (s.type == STT_FUNC || s.type == STT_GNU_IFUNC)
      funcs.push_back({s.value, s.size, std::string(s.name)});
    else if (s.type == STT_OBJECT || s.type == STT_COMMON)
      objs.push_back({s.value, s.size, std::string(s.name)});
  });
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
    v->shrink_to_fit();
  }
}

std::shared_ptr<ElfSymbols> ElfSymbols::load(std::shared_ptr<UntrustedFile> f, bool debug_files) {
  auto out = std::make_shared<ElfSymbols>();
  if (f) out->name = f->name();
  auto e = ElfFile::open(std::move(f));
  if (!e) return out;
  out->exec = e->is_exec();
  out->segs = e->load_segments();
  out->build_id = e->build_id();
  bool has_symtab = e->has_symtab();
  out->add_symbols(*e);
  // a stripped Go binary still names its functions for its own runtime (go_pclntab.h)
  if (!has_symtab) {
    if (auto go = read_go_functions(*e); go) {
      for (auto& f : *go) out->funcs.push_back({f.entry, f.end - f.entry, std::move(f.name)});
      has_symtab = !go->empty();
    }
  }
  e.reset();
  // Detached debug symbols (e.g. Debian's libc6-dbg) carry the full .symtab. The
  // directory is root's; the name is hex we formatted, so links there may be followed.
  if (!has_symtab && debug_files && out->build_id.size() > 2) {
    std::string dbg = "/usr/lib/debug/.build-id/" + out->build_id.substr(0, 2) + "/" +
                      out->build_id.substr(2) + ".debug";
    UntrustedPolicy pol;
    pol.follow_links = true;
    auto r = open_untrusted(dbg, pol);
    warn_if_refused(dbg, r);
    if (auto de = ElfFile::open(r.file)) out->add_symbols(*de);
    // none here: a debuginfod server's, when DEBUGINFOD_URLS names one (in the background)
    else if (Debuginfod* d = Debuginfod::get()) out->debuginfod_pending = d->request(out->build_id, out->name);
  }
  out->finish();
  out->ok = !out->segs.empty();
  return out;
}

ElfSymbols::Settled ElfSymbols::settle_debuginfod(bool wait) {
  if (!debuginfod_pending) return Settled::Failed;
  Debuginfod* d = Debuginfod::get();
  std::optional<DebuginfodOutcome> r;
  if (d) r = d->result(build_id, wait);
  else r = DebuginfodOutcome{false, "", "not asked for"};
  if (!r) return Settled::Pending;
  debuginfod_pending = false;
  std::string why;
  const std::string label = debuginfod_file_label(name, build_id);
  if (auto de = open_debuginfod_file(*r, build_id, &why)) {
    add_symbols(*de);
    finish();
    debuginfod_note(build_id, "symbols for " + label + " from " + (d ? d->urls() : std::string("?")));
    return Settled::Applied;
  }
  debuginfod_note(build_id, "no symbols for " + label + ": " + why);
  return Settled::Failed;
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
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);  // ~120k lines: 1 KiB reads were ~8,000 syscalls
  out.text.reserve(1 << 17);                  // ~120k text symbols on 6.18: no regrowth
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
  // Aliases share an address (e.g. _stext/_text): the first one read wins lookups. The
  // kernel lists them in address order (checked, then not sorted again: 82 -> 43 ms).
  auto by_addr = [](const KernelSymbol& a, const KernelSymbol& b) { return a.addr < b.addr; };
  for (auto* v : {&out.text, &out.data})
    if (!std::is_sorted(v->begin(), v->end(), by_addr)) std::stable_sort(v->begin(), v->end(), by_addr);
  return out;
}

// Process-wide snapshot for the name -> address helpers (read on first use).
static const KernelSymbols& shared_kallsyms() {
  static const KernelSymbols k = read_kallsyms();
  return k;
}

// --- data symbols by name (lock filters) ------------------------------------------

std::vector<uint64_t> find_data_symbol_in_file(const std::string& path, const std::string& name,
                                               uint64_t map_start, uint64_t map_offset) {
  UntrustedPolicy pol;  // the caller names the file: links allowed, the type and size still checked
  pol.follow_links = true;
  auto r = open_untrusted(path, pol);
  warn_if_refused(path, r);
  std::vector<uint64_t> out;
  if (!r.file) return out;
  auto elf = ElfSymbols::load(r.file, /*debug_files=*/true);
  if (!elf->ok) return out;
  if (elf->debuginfod_pending) elf->settle_debuginfod(/*wait=*/true);
  auto bias = elf->bias_for_mapping(map_start, map_offset);
  if (!bias) return out;
  for (uint64_t v : elf->find_objects(name)) out.push_back(*bias + v);
  return out;
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
