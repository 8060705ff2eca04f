// USDT probes: the SystemTap SDT notes (.note.stapsdt) that software ships so tracers
// can see its own events (PostgreSQL's lock__wait__start, HotSpot's, CPython's), read
// from the file the traced process maps, and the arguments decoded for BPF (x86-64).
//
// A note says where the probe is (its pc), its semaphore (a counter the software
// checks before preparing the arguments; the kernel increments it for a uprobe given
// its file offset as ref_ctr_offset) and how to find each argument, in the assembler
// syntax the compiler chose: `-4@%r13d` (signed 4 bytes in r13), `1@14(%r12)` (a byte
// at r12+14), `8@$0` (a constant). Files come from traced processes: notes are read
// through the one ELF reader (common/elf_file.h, bounded), and a note or argument
// that does not parse is left out, never guessed.
//
// PUBLIC API:
//   auto probes = read_usdt_probes(elf);            // every well-formed note, capped
//   auto off = file_offset_of(elf, probes[0].pc);   // for the uprobe API (common/elf_file.h)
//   auto a = parse_usdt_arg("-4@%r13d");            // a->kind, a->reg (pt_regs slot)
//   auto f = find_usdt_files(pids, {"postgresql"}); // mapped files with those providers
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace bpfdiag {

class ElfFile;
class UntrustedFile;

constexpr size_t kMaxUsdtProbes = 65536;  // notes read per file (libjvm has 567)
constexpr size_t kMaxUsdtArgs = 12;       // sdt.h allows 12 arguments
constexpr size_t kMaxUsdtFiles = 256;     // distinct files scanned per run
constexpr size_t kMaxUsdtPids = 32768;    // processes whose maps are read per run

struct UsdtArg {
  enum class Kind { Reg, Mem, Imm };
  Kind kind = Kind::Imm;
  int size = 8;  // bytes: 1, 2, 4 or 8
  bool is_signed = false;
  int reg = -1;       // Reg/Mem: the register's slot in x86-64 struct pt_regs (r15 = 0 ... ss = 20)
  int64_t value = 0;  // Mem: the displacement; Imm: the constant
};

// One argument spec; nullopt for what a BPF program cannot read from the registers
// alone (%rip-relative, index registers, high-byte registers, other architectures).
std::optional<UsdtArg> parse_usdt_arg(std::string_view spec);
// The register's pt_regs slot for an x86-64 name (rax, eax, ax, al, r13d, ...); -1 if none.
int usdt_reg_slot(std::string_view name);

struct UsdtProbe {
  std::string provider, name;
  uint64_t pc = 0;         // virtual address of the probe point (prelink-adjusted)
  uint64_t semaphore = 0;  // virtual address of its semaphore, 0 when it has none
  std::string args_text;
  std::vector<std::optional<UsdtArg>> args;  // one per argument; nullopt: not readable
};

// One note's descriptor (pc, base, semaphore, then provider, name, args strings);
// nullopt when malformed. `base_addr`: the .stapsdt.base section's address (0: none).
std::optional<UsdtProbe> parse_stapsdt_note(std::string_view desc, uint64_t base_addr);
// Every well-formed stapsdt note of `elf` (at most kMaxUsdtProbes).
std::vector<UsdtProbe> read_usdt_probes(const ElfFile& elf);

// A mapped file carrying probes of the wanted providers.
struct UsdtFile {
  std::shared_ptr<UntrustedFile> file;  // opened as untrusted input (map_files first)
  std::string display;                  // the path as the first process that maps it sees it
  std::set<uint32_t> pids;              // the scanned processes that map it
  std::vector<UsdtProbe> probes;        // of the wanted providers only
  std::shared_ptr<ElfFile> elf;
};
struct UsdtScan {
  std::vector<UsdtFile> files;
  size_t pids_scanned = 0, files_read = 0;
  bool capped = false;  // kMaxUsdtPids or kMaxUsdtFiles reached
};
// The executable files that `pids` map (every process when empty) with notes of any of
// `providers`, each file once (by identity).
UsdtScan find_usdt_files(const std::vector<uint32_t>& pids, const std::set<std::string>& providers);

}  // namespace bpfdiag
