// Probing glibc's pthread mutex and condition-variable functions with uprobes, shared
// by pmheld and lockstat --uprobes.
//
// PUBLIC API:
//   auto lib = find_pthread_lib(pid);          // 0 = every process, via our own libc
//   auto pts = resolve_pthread_probes(*lib, {PthreadFn::MutexLock, ...}, opts);
//   attach_pthread_probes(session, *lib, *pts, {{PthreadFn::MutexLock, "on_lock",
//                                                "on_lock_ret"}, ...});
//
// Where the library is: glibc 2.34+ keeps pthread in libc.so.6, older glibc in
// libpthread.so.0 (preferred when mapped). The file is opened as untrusted input
// (common/untrusted_file.h) through /proc/PID/map_files/<range> (the very inode the
// process maps, so containers and deleted or swapped paths are safe), else through
// /proc/PID/root without following links; the uprobes are attached to that open file
// (/proc/self/fd/N), never to a path the target could replace by a FIFO. A process with
// neither library mapped is checked for a statically linked glibc (symbols in its
// executable); a kernel thread or anything else gets a one-line error saying why.
// ELF reading is the suite's one reader, common/elf_file.h.
//
// Symbols: resolved from .dynsym honouring symbol versions (pthread_cond_wait has an
// old GLIBC_2.2.5 compat version; the default @@ version is the one programs call),
// falling back to .symtab (static executables).
//
// Probe placement: a uprobe on a function's first instruction usually costs ~10 us
// per hit here because the instruction is single-stepped, while instructions the
// kernel emulates (push reg, jmp, jcc, call) cost ~0.5 us. resolve_pthread_probes()
// walks each function's straight-line prologue and moves the probe to the first
// emulated instruction when that is provably equivalent: every instruction before it
// decodes, none branches or writes an argument register the probe reads, none moves
// the stack pointer when a return probe shares the point (the return address must
// still be at *sp), and no direct branch anywhere in the file's code targets the
// skipped bytes (so the point is reached exactly once per call). Otherwise, or with
// Options::at_symbol, the probe stays on the symbol.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/untrusted_file.h"
#include "common/x86_prologue.h"

namespace bpfdiag {

class BpfSession;

enum class PthreadFn {
  MutexLock,       // pthread_mutex_lock(mutex)
  MutexTrylock,    // pthread_mutex_trylock(mutex)
  MutexTimedlock,  // pthread_mutex_timedlock(mutex, abstime)
  MutexClocklock,  // pthread_mutex_clocklock(mutex, clock, abstime)  (glibc 2.30+)
  MutexUnlock,     // pthread_mutex_unlock(mutex)
  CondWait,        // pthread_cond_wait(cond, mutex)
  CondTimedwait,   // pthread_cond_timedwait(cond, mutex, abstime)
  CondClockwait,   // pthread_cond_clockwait(cond, mutex, clock, abstime)  (glibc 2.30+)
};
const char* pthread_fn_name(PthreadFn fn);
// Functions that may be missing from older glibc without it being an error.
bool pthread_fn_optional(PthreadFn fn);

// The file holding a process's pthread functions.
struct PthreadLib {
  int pid = -1;          // uprobe pid filter; -1: every process using this file
  std::string path;      // path we open, e.g. /proc/123/root/usr/lib/x86_64-linux-gnu/libc.so.6
  std::string display;   // the path as the process sees it (for messages)
  bool static_exe = false;  // glibc linked into the executable
  std::string map_range;    // "7f00-7f01": its mapping, for /proc/PID/map_files ("" if none)
  std::shared_ptr<UntrustedFile> file;  // the validated open file (find_pthread_lib)
  // What libbcc and the uprobe API get: the open file's /proc/self/fd/N, else path.
  std::string probe_path() const { return file ? file->fd_path() : path; }
};

// pid 0: every process that maps the same libc as this tool (uprobes without a pid
// filter). Errors: "no process with PID N", "PID N (kthreadd) is a kernel thread ...",
// "PID N has no libc.so.6 or libpthread.so.0 mapped and no pthread symbols in its
// executable (...)", "cannot open ...: <reason>".
Result<PthreadLib> find_pthread_lib(uint32_t pid);
// Same, from a maps file's text (unit tests); `root` prefixes mapped paths.
Result<PthreadLib> pthread_lib_from_maps(const std::string& maps_text, const std::string& root);

struct ProbePoint {
  PthreadFn fn;
  uint64_t sym_vaddr = 0;  // ELF virtual address of the symbol
  uint64_t offset = 0;     // probe at sym_vaddr + offset
  bool emulated = false;   // the probed instruction is emulated (cheap)
};

struct ProbeOptions {
  bool at_symbol = false;  // keep every probe on the symbol's first instruction
};

// Resolves `fns` in lib.file (or lib.path, opened as untrusted input when there is no
// file); optional functions that are absent are left out.
Result<std::vector<ProbePoint>> resolve_pthread_probes(const PthreadLib& lib,
                                                       const std::vector<PthreadFn>& fns,
                                                       const ProbeOptions& opts);

// One function's BPF handlers; an empty name means no probe of that kind.
struct PthreadHandler {
  PthreadFn fn;
  std::string entry_fn;   // uprobe handler (args in PT_REGS_PARM*)
  std::string return_fn;  // uretprobe handler (PT_REGS_RC)
};

// Attaches the handlers at the resolved points. On error the session still owns what
// was attached and detaches it when destroyed. Error: "cannot attach uprobe to
// <path>:<symbol>+0x..: <reason>; is PID N still running?"
Status attach_pthread_probes(BpfSession& s, const PthreadLib& lib,
                             const std::vector<ProbePoint>& points,
                             const std::vector<PthreadHandler>& handlers);

// "pthread_mutex_lock+0xe (jcc, emulated)" style descriptions for -v.
std::string describe_probe_point(const ProbePoint& p);

}  // namespace bpfdiag
