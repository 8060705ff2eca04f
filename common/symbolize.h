// Address -> symbol resolution shared by every stack and lock tool.
//
// Kernel text symbols come from /proc/kallsyms (CONFIG_KALLSYMS_ALL is off on our
// target, so only functions). User symbols are read from the ELF .symtab/.dynsym of
// every file a process maps (through /proc/PID/map_files, else /proc/PID/root, so
// deleted files and containers work; detached debug files under
// /usr/lib/debug/.build-id are used when present, else a debuginfod server's when
// DEBUGINFOD_URLS is set: common/debuginfod.h), plus the JIT map /tmp/perf-PID.map.
// All of these are opened as untrusted input (common/untrusted_file.h): a FIFO, a
// symlink or a huge file there is refused with one warning line, never read.
// A process's mappings are snapshot the first time the tool sees it (remember()), so
// its stacks stay resolvable after it exits; symbol tables are per file, shared by
// every process that maps it. forget_exited() drops processes that are gone once the
// tool no longer needs them, so long runs under fork-heavy loads stay bounded.
//
// PUBLIC API (everything else is an implementation detail):
//   Symbolizer sym;                      // one per tool; not thread-safe
//   sym.remember(pid);                   // call when a pid first appears in events
//   sym.kernel(addr)          -> "anon_pipe_read"          or "[unknown]"
//   sym.user(pid, addr)       -> "worker_loop"             or "[unknown] (libfoo.so+0x1a2b)"
//   sym.data(pid, addr)       -> "cache_lock" / "cache_lock+8" or "[unknown] (prog+0x4040)"
//   sym.lookup_*(...)         -> the same with structured fields (name, offset, module)
//   sym.stats()               -> how many lookups failed (for DataQuality)
//   sym.keep_origins(); sym.origin(pid, "worker_loop") -> where a frame name came from
//                                (module, an address, the mapping), for --pprof
//   sym.forget_exited(keep)   -> drop exited processes (after their stacks were printed)
//   sym.forget_exited_every(interval, still_needed) -> the same, rate-limited, for
//                                tools that print once at the end (offcputime)
//   find_user_data_symbol(pid, "cache_lock"), find_kernel_data_symbol(name),
//   kernel_data_symbol_at(addr) -> name -> address for lock filters
//   read_kallsyms()           -> the one /proc/kallsyms parser (text + data)
//   demangle(name)            -> C++ names demangled ("ns::f(int)")
//
// Names are demangled by default (Symbolizer::Options::demangle).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bpfdiag {

// A resolved address.
struct SymbolInfo {
  bool found = false;    // false: no symbol covers the address
  std::string name;      // symbol name (demangled if enabled); "" when !found
  uint64_t offset = 0;   // address - symbol start
  std::string module;    // file path ("[kernel]" or "[module_name]" for the kernel), may be ""
  uint64_t module_offset = 0;  // address relative to the module's load base (ELF vaddr)
};

// One line of a JIT's /tmp/perf-PID.map, "ADDR SIZE name" (hex): nullopt when malformed.
struct PerfMapEntry {
  uint64_t addr = 0, size = 0;
  std::string name;
};
std::optional<PerfMapEntry> parse_perfmap_line(std::string_view line);

// "name", "name+0x1f" (with_offset), or "[unknown]"/"[unknown] (libc.so.6+0x1234)".
std::string format_symbol(const SymbolInfo& s, bool with_offset);
// "cache_lock" or "cache_lock+8" (decimal byte offset, as data symbols read best), or
// "[unknown] (module+0xoff)".
std::string format_data_symbol(const SymbolInfo& s);

// C++ demangling; returns the input when it is not a mangled name.
std::string demangle(const std::string& name);

class ElfSymbols;  // one file's symbol tables (implementation detail)

// Where a frame the Symbolizer named came from (Symbolizer::origin), for pprof output
// (common/pprof): the file, an address that got this name, the file's address range
// in the process, its build id. Kernel frames: module "[kernel]" or "[name]" (a
// kernel module), no range.
struct FrameOrigin {
  std::string module;        // path as in /proc/PID/maps, "" when unknown
  uint64_t addr = 0;         // the first address named so
  uint64_t start = 0, limit = 0;  // the module's address range (0, 0: unknown)
  std::string build_id;      // lower-case hex, "" when unknown
};

// /proc/kallsyms, the one parser: text (t/T/w/W) and data (d/D/b/B/r/R) symbols, each
// sorted by address; zero addresses (kptr_restrict) dropped. Data symbols are few
// unless CONFIG_KALLSYMS_ALL is on.
struct KernelSymbol {
  uint64_t addr;
  std::string name;
  std::string module;  // "" for vmlinux, else "[module]"
  char type;           // kallsyms type letter
};
struct KernelSymbols {
  std::vector<KernelSymbol> text, data;
};
KernelSymbols read_kallsyms(const std::string& path = "/proc/kallsyms");

// --- reverse data-symbol lookup (name -> addresses), e.g. lockstat -L cache_lock ---
// Runtime addresses of ELF OBJECT symbols named `name` in every file `pid` maps
// (.symtab, .dynsym and detached .build-id debug files, load bias applied; C++ names
// match demangled, so `static pthread_mutex_t cache_lock` (_ZL10cache_lock) is found
// as cache_lock). Empty when there is none or the process is gone.
std::vector<uint64_t> find_user_data_symbol(uint32_t pid, const std::string& name);
// Same for one ELF file given one file-backed mapping of it (`map_start`, `map_offset`).
std::vector<uint64_t> find_data_symbol_in_file(const std::string& path, const std::string& name,
                                               uint64_t map_start, uint64_t map_offset);
// Kernel data symbols (kallsyms types d/D/b/B/r/R) named `name`.
std::vector<uint64_t> find_kernel_data_symbol(const std::string& name);
// Kernel data symbol starting exactly at `addr`: "" if none.
std::string kernel_data_symbol_at(uint64_t addr);

class Symbolizer {
 public:
  struct Options {
    bool demangle = true;
    bool debug_files = true;  // look in /usr/lib/debug/.build-id for detached symbols
  };
  struct Stats {
    uint64_t kernel_unknown = 0;  // kernel addresses with no kallsyms entry
    uint64_t user_unknown = 0;    // user addresses with no symbol
    uint64_t pids_unreadable = 0; // remember() failed: process gone before first sight
    uint64_t pids_forgotten = 0;  // exited processes dropped by forget_exited()
    // user frames left unnamed because their process's mappings or file's symbols
    // were not loaded: a stop signal's budget was spent (past_stop_deadline())
    uint64_t symbolize_skipped = 0;
    // DEBUGINFOD_URLS (common/debuginfod.h): files whose symbols came from a debuginfod
    // server, and lookups that gave none a frame needed (not found, refused, failed,
    // or no answer within the run's wait budget); each said once on stderr
    uint64_t debuginfod_files = 0;
    uint64_t debuginfod_failed = 0;
  };

  Symbolizer();
  explicit Symbolizer(Options o);
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // Snapshots pid's mappings and loads the symbol tables of every mapped file (each
  // file parsed once, shared between processes). Cheap when already remembered.
  // Returns false when the process is already gone (its stacks then show [unknown]).
  bool remember(uint32_t pid);
  // Drops and re-reads pid's mappings (e.g. after dlopen), keeping old data on failure.
  bool refresh(uint32_t pid);
  bool remembered(uint32_t pid) const;

  // Kernel text address (from /proc/kallsyms, loaded on first use).
  SymbolInfo lookup_kernel(uint64_t addr);
  std::string kernel(uint64_t addr, bool with_offset = false);
  // True once kallsyms was read and has real (non-zero) addresses.
  bool kernel_symbols_available();

  // User code address in pid. Remembers pid on first use.
  SymbolInfo lookup_user(uint32_t pid, uint64_t addr);
  std::string user(uint32_t pid, uint64_t addr, bool with_offset = false);

  // Data address (ELF OBJECT symbols: .data/.bss/.rodata of the binary and its
  // libraries, PIE load bias applied; TLS excluded). Remembers pid on first use.
  SymbolInfo lookup_data(uint32_t pid, uint64_t addr);
  std::string data(uint32_t pid, uint64_t addr);

  // Runtime addresses of data symbols named `name` (as find_user_data_symbol), from
  // this Symbolizer's snapshot of pid and its shared ELF cache.
  std::vector<uint64_t> find_data(uint32_t pid, const std::string& name);

  const Stats& stats() const { return stats_; }

  // From now on, remember where each frame name returned by user()/kernel() (and the
  // lookup_* results as format_symbol(s, false) names them) came from: origin().
  // Off by default (memory: one entry per distinct name and process).
  void keep_origins() { keep_origins_ = true; }
  // The origin of frame `name` (without offset) in process `pid` (0: kernel frames);
  // nullptr when it was not named here since keep_origins() or its process is forgotten.
  const FrameOrigin* origin(uint32_t pid, const std::string& name) const;

  // Forgets every remembered process that has exited (or whose PID now belongs to a
  // later process) unless keep(pid) is true, and the symbol tables no remaining process
  // uses. Call it at a point where the forgotten processes' stacks were printed (after
  // a report) or will never be asked for. Returns how many were forgotten.
  size_t forget_exited(const std::function<bool(uint32_t pid)>& keep = {});
  // At most once per interval_ns: when some remembered process has exited, asks
  // still_needed() for the pids whose stacks are yet to be printed (e.g. the tgids in
  // a BPF counts map) and forgets the other exited ones. Cheap to call from a poll loop.
  size_t forget_exited_every(uint64_t interval_ns, const std::function<std::set<uint32_t>()>& still_needed);
  size_t remembered_count() const;     // processes currently held (tests, -v)
  size_t symbol_tables_count() const;  // ELF files currently held

 private:
  struct Module;   // one mapped file in one process
  struct Process;  // a snapshot of one process
  bool load_process(uint32_t pid, Process& p);
  std::shared_ptr<ElfSymbols> elf_for(uint32_t pid, const std::string& path, const std::string& range);
  std::shared_ptr<const std::string> intern(const std::string& s);
  void load_kallsyms();
  SymbolInfo lookup_in_process(uint32_t pid, uint64_t addr, bool want_data, FrameOrigin* origin = nullptr);
  void settle_debuginfod(ElfSymbols& e);

  Options opt_;
  Stats stats_;
  bool kallsyms_loaded_ = false;
  std::vector<KernelSymbol> ksyms_;
  std::map<uint32_t, std::unique_ptr<Process>> procs_;
  // key: UntrustedFile::identity() (dev:inode:mtime:size of the opened file)
  std::map<std::string, std::shared_ptr<ElfSymbols>> elf_cache_;
  std::unordered_map<std::string, std::weak_ptr<const std::string>> paths_;  // interned
  uint64_t last_gc_ns_ = 0;
  bool skipped_elf_ = false;  // load_process: some file's symbols were skipped (deadline)
  bool keep_origins_ = false;
  std::unordered_map<std::string, FrameOrigin> kernel_origins_;
};

}  // namespace bpfdiag
