#include "common/usdt.h"

#include <dirent.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "common/elf_file.h"
#include "common/proc.h"
#include "common/untrusted_file.h"

namespace bpfdiag {

namespace {

// x86-64 struct pt_regs, in order (the slot is the field's index).
constexpr const char* kPtRegs[] = {"r15", "r14", "r13", "r12", "rbp",      "rbx", "r11", "r10",    "r9",  "r8", "rax",
                                   "rcx", "rdx", "rsi", "rdi", "orig_rax", "rip", "cs",  "eflags", "rsp", "ss"};

// The low parts of the legacy registers: 32-, 16- and 8-bit names.
struct Alias {
  const char* name;
  const char* full;
};
constexpr Alias kAliases[] = {
    {"eax", "rax"}, {"ax", "rax"}, {"al", "rax"},  {"ebx", "rbx"}, {"bx", "rbx"}, {"bl", "rbx"},
    {"ecx", "rcx"}, {"cx", "rcx"}, {"cl", "rcx"},  {"edx", "rdx"}, {"dx", "rdx"}, {"dl", "rdx"},
    {"esi", "rsi"}, {"si", "rsi"}, {"sil", "rsi"}, {"edi", "rdi"}, {"di", "rdi"}, {"dil", "rdi"},
    {"ebp", "rbp"}, {"bp", "rbp"}, {"bpl", "rbp"}, {"esp", "rsp"}, {"sp", "rsp"}, {"spl", "rsp"},
};

bool parse_i64(std::string_view s, int64_t& out) {
  if (s.empty() || s.size() > 24) return false;
  std::string t(s);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(t.c_str(), &end, 0);
  if (errno || !end || *end) return false;
  out = v;
  return true;
}

}  // namespace

int usdt_reg_slot(std::string_view name) {
  for (size_t i = 0; i < sizeof kPtRegs / sizeof *kPtRegs; ++i)
    if (name == kPtRegs[i]) return static_cast<int>(i);
  for (const auto& a : kAliases)
    if (name == a.name) return usdt_reg_slot(a.full);
  // r8..r15 and their d/w/b (or l) low parts
  if (name.size() >= 2 && name[0] == 'r' && name[1] >= '0' && name[1] <= '9') {
    size_t i = 1;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    std::string_view num = name.substr(1, i - 1), suffix = name.substr(i);
    if (!(suffix.empty() || suffix == "d" || suffix == "w" || suffix == "b" || suffix == "l")) return -1;
    if (num.size() > 2) return -1;
    std::string full = "r" + std::string(num);
    for (size_t j = 0; j < sizeof kPtRegs / sizeof *kPtRegs; ++j)
      if (full == kPtRegs[j] && num != "") return static_cast<int>(j);
  }
  return -1;
}

std::optional<UsdtArg> parse_usdt_arg(std::string_view spec) {
  UsdtArg a;
  auto at = spec.find('@');
  if (at != std::string_view::npos) {
    int64_t n = 0;
    if (!parse_i64(spec.substr(0, at), n)) return std::nullopt;
    a.is_signed = n < 0;
    n = n < 0 ? -n : n;
    if (n != 1 && n != 2 && n != 4 && n != 8) return std::nullopt;
    a.size = static_cast<int>(n);
    spec = spec.substr(at + 1);
  }
  if (spec.empty()) return std::nullopt;
  if (spec[0] == '$') {  // a constant
    if (!parse_i64(spec.substr(1), a.value)) return std::nullopt;
    a.kind = UsdtArg::Kind::Imm;
    return a;
  }
  if (spec[0] == '%') {  // a register
    a.reg = usdt_reg_slot(spec.substr(1));
    if (a.reg < 0) return std::nullopt;
    a.kind = UsdtArg::Kind::Reg;
    return a;
  }
  // DISP(%reg): memory at a register plus a displacement (no index, no symbol)
  auto open = spec.find('('), close = spec.rfind(')');
  if (open == std::string_view::npos || close != spec.size() - 1 || close < open + 3 || spec[open + 1] != '%')
    return std::nullopt;
  std::string_view disp = spec.substr(0, open), reg = spec.substr(open + 2, close - open - 2);
  if (!disp.empty() && !parse_i64(disp, a.value)) return std::nullopt;
  a.reg = usdt_reg_slot(reg);
  if (a.reg < 0 || a.reg == usdt_reg_slot("rip")) return std::nullopt;  // %rip-relative: a symbol's address
  a.kind = UsdtArg::Kind::Mem;
  return a;
}

std::optional<UsdtProbe> parse_stapsdt_note(std::string_view desc, uint64_t base_addr) {
  if (desc.size() < 3 * 8 + 3) return std::nullopt;
  UsdtProbe p;
  p.pc = read_le(desc.data(), 8);
  uint64_t note_base = read_le(desc.data() + 8, 8);
  p.semaphore = read_le(desc.data() + 16, 8);
  // prelinked or otherwise moved: the note's base is where .stapsdt.base was
  if (base_addr && note_base) p.pc += base_addr - note_base;
  std::string_view rest = desc.substr(24);
  std::string_view parts[3];
  for (auto& part : parts) {
    auto nul = rest.find('\0');
    if (nul == std::string_view::npos) return std::nullopt;
    part = rest.substr(0, nul);
    rest = rest.substr(nul + 1);
  }
  if (parts[0].empty() || parts[1].empty()) return std::nullopt;
  p.provider = std::string(parts[0]);
  p.name = std::string(parts[1]);
  p.args_text = std::string(parts[2]);
  std::string_view a = parts[2];
  while (!a.empty()) {
    auto sp = a.find(' ');
    std::string_view one = a.substr(0, sp);
    if (!one.empty()) {
      if (p.args.size() >= kMaxUsdtArgs) return std::nullopt;
      p.args.push_back(parse_usdt_arg(one));
    }
    if (sp == std::string_view::npos) break;
    a = a.substr(sp + 1);
  }
  return p;
}

std::vector<UsdtProbe> read_usdt_probes(const ElfFile& elf) {
  std::vector<UsdtProbe> out;
  uint64_t base = elf.section_addr(".stapsdt.base").value_or(0);
  elf.for_each_note(".note.stapsdt", [&](uint32_t type, std::string_view name, std::string_view desc) {
    if (type != 3 /* NT_STAPSDT */ || name != "stapsdt" || out.size() >= kMaxUsdtProbes) return;
    if (auto p = parse_stapsdt_note(desc, base)) out.push_back(std::move(*p));
  });
  return out;
}

UsdtScan find_usdt_files(const std::vector<uint32_t>& pids, const std::set<std::string>& providers) {
  UsdtScan scan;
  std::map<std::pair<uint64_t, uint64_t>, size_t> seen;  // (dev, inode) -> index+1 in files (0: no probes)
  std::vector<uint32_t> todo = pids.empty() ? proc_all_pids() : pids;
  for (uint32_t pid : todo) {
    if (scan.pids_scanned >= kMaxUsdtPids) {
      scan.capped = true;
      break;
    }
    ++scan.pids_scanned;
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    std::string line;
    for (size_t n = 0; n < 65536 && std::getline(maps, line); ++n) {
      auto m = parse_maps_line(line);
      if (!m || m->perms[2] != 'x' || m->inode == 0 || m->path.empty() || m->path[0] != '/') continue;
      auto key = std::make_pair((uint64_t(m->maj) << 32) | m->min, m->inode);
      auto it = seen.find(key);
      if (it != seen.end()) {
        if (it->second) scan.files[it->second - 1].pids.insert(pid);
        continue;
      }
      if (scan.files_read >= kMaxUsdtFiles) {
        scan.capped = true;
        continue;
      }
      ++scan.files_read;
      seen[key] = 0;
      UntrustedOpen r = open_mapping(pid, map_range(m->start, m->end), "");
      if (!r.file) continue;  // gone, a device, or oversized: no probes to read
      std::shared_ptr<ElfFile> elf(ElfFile::open(r.file).release());
      if (!elf) continue;
      UsdtFile f;
      for (auto& p : read_usdt_probes(*elf))
        if (providers.count(p.provider)) f.probes.push_back(std::move(p));
      if (f.probes.empty()) continue;
      f.file = r.file;
      f.elf = elf;
      f.display = m->path;
      f.pids.insert(pid);
      scan.files.push_back(std::move(f));
      seen[key] = scan.files.size();
    }
  }
  return scan;
}

}  // namespace bpfdiag
