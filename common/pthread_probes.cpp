#include "common/timing.h"
#include "common/pthread_probes.h"

#include <bcc/BPF.h>
#include <gelf.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/bpf_session.h"
#include "common/elf_file.h"
#include "common/parse.h"
#include "common/proc.h"
#include "common/runloop.h"

namespace bpfdiag {

const char* pthread_fn_name(PthreadFn fn) {
  switch (fn) {
    case PthreadFn::MutexLock: return "pthread_mutex_lock";
    case PthreadFn::MutexTrylock: return "pthread_mutex_trylock";
    case PthreadFn::MutexTimedlock: return "pthread_mutex_timedlock";
    case PthreadFn::MutexClocklock: return "pthread_mutex_clocklock";
    case PthreadFn::MutexUnlock: return "pthread_mutex_unlock";
    case PthreadFn::CondWait: return "pthread_cond_wait";
    case PthreadFn::CondTimedwait: return "pthread_cond_timedwait";
    case PthreadFn::CondClockwait: return "pthread_cond_clockwait";
  }
  return "?";
}

bool pthread_fn_optional(PthreadFn fn) {
  return fn == PthreadFn::MutexClocklock || fn == PthreadFn::CondClockwait;
}

namespace {

// Argument registers each function's handlers read (entry: the mutex/cond pointers).
uint16_t arg_regs(PthreadFn fn) {
  switch (fn) {
    case PthreadFn::CondWait:
    case PthreadFn::CondTimedwait:
    case PthreadFn::CondClockwait:
      return kRegRdi | kRegRsi;
    default:
      return kRegRdi;
  }
}

// --- ELF access ----------------------------------------------------------------------

struct FuncSym {
  uint64_t vaddr = 0, size = 0;
};

// Default-version FUNC symbol `name`: from .dynsym honouring symbol versions (a hidden
// compat version only when nothing better exists), else from .symtab (static
// executables, whose names may carry "@VER" / "@@VER").
bool find_func(const ElfFile& elf, const std::string& name, FuncSym& out) {
  bool found_default = false, found_any = false, found_dynamic = false;
  elf.for_each_symbol([&](const ElfSymbolEntry& s) {
    if (found_default || (found_dynamic && !s.dynamic)) return;
    if (s.type != STT_FUNC && s.type != STT_GNU_IFUNC) return;
    std::string_view sn = s.name;
    bool hidden = s.hidden;
    auto at = sn.find('@');
    if (at != std::string_view::npos) {
      hidden = hidden || sn.compare(at, 2, "@@") != 0;
      sn = sn.substr(0, at);
    }
    if (sn != name) return;
    if (hidden) {
      if (!found_any) out = {s.value, s.size};  // only if nothing better appears
      found_any = true;
      found_dynamic = found_dynamic || s.dynamic;
      return;
    }
    out = {s.value, s.size};
    found_default = found_any = true;
  });
  return found_any;
}

// The executable PT_LOAD segment containing vaddr: its bytes and start address.
bool exec_segment(const ElfFile& elf, uint64_t vaddr, std::vector<uint8_t>& bytes, uint64_t& seg_vaddr) {
  for (const auto& ph : elf.load_segments()) {
    if (!(ph.flags & PF_X)) continue;
    if (vaddr < ph.vaddr || vaddr >= ph.vaddr + ph.filesz) continue;
    if (!elf.read(ph.offset, ph.filesz, bytes)) return false;
    seg_vaddr = ph.vaddr;
    return true;
  }
  return false;
}

// "; is PID N still running?" only when the error says it may be gone.
std::string gone_hint(int pid, int err) {
  if (pid <= 0 || (err != ENOENT && err != ESRCH)) return "";
  return "; is PID " + std::to_string(pid) + " still running?";
}

}  // namespace

// --- finding the library ---------------------------------------------------------------

Result<PthreadLib> pthread_lib_from_maps(const std::string& maps_text, const std::string& root) {
  std::istringstream in(maps_text);
  std::string line, libc, libpthread;
  std::string libc_range, libpthread_range;
  while (std::getline(in, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = without_deleted_suffix(line.substr(slash));
    std::string range = line.substr(0, line.find(' '));
    std::string base = path.substr(path.rfind('/') + 1);
    if (libpthread.empty() && base.rfind("libpthread.so", 0) == 0) libpthread = path, libpthread_range = range;
    if (libc.empty() && base.rfind("libc.so", 0) == 0) libc = path, libc_range = range;
    if (libc.empty() && base.rfind("libc-2.", 0) == 0 && base.find(".so") != std::string::npos)
      libc = path, libc_range = range;
  }
  std::string chosen = !libpthread.empty() ? libpthread : libc;
  if (chosen.empty()) return Error{"no libc.so.6 or libpthread.so.0 mapped"};
  PthreadLib lib;
  lib.display = chosen;
  lib.path = root + chosen;
  lib.map_range = !libpthread.empty() ? libpthread_range : libc_range;
  return lib;
}

// Opens the library `lib` names as untrusted input: its map_files entry (the mapped
// inode itself), else its path inside the process's root without following links.
static Status open_lib(uint32_t pid, PthreadLib& lib) {
  UntrustedOpen r = open_mapping(pid, lib.map_range, lib.display);
  if (!r.file) {
    if (!r.refused.empty()) return Error{"cannot use " + lib.display + ": " + r.refused};
    return Error{"cannot open " + lib.display + ": " + std::strerror(r.err) + gone_hint(lib.pid, r.err)};
  }
  lib.file = r.file;
  return std::nullopt;
}

Result<PthreadLib> find_pthread_lib(uint32_t pid) {
  std::string proc = pid ? "/proc/" + std::to_string(pid) : std::string("/proc/self");
  if (pid && !pid_exists(pid)) return Error{"no process with PID " + std::to_string(pid)};
  std::ifstream f(proc + "/maps");
  int err = errno;
  std::stringstream ss;
  if (f) ss << f.rdbuf();
  if (!f) {
    return Error{"cannot read " + proc + "/maps: " + std::strerror(err) +
                 gone_hint(static_cast<int>(pid), err)};
  }
  auto lib = pthread_lib_from_maps(ss.str(), pid ? proc + "/root" : "");
  if (lib) {
    lib.value().pid = pid ? static_cast<int>(pid) : -1;
    if (auto st = open_lib(pid, lib.value())) return Error{st->message};
    return lib;
  }
  if (!pid) return Error{"this tool has no libc mapped (cannot happen with a dynamic build)"};
  if (ss.str().empty()) {
    if (!pid_exists(pid)) return Error{"no process with PID " + std::to_string(pid)};
    return Error{"PID " + std::to_string(pid) + " (" + proc_comm(pid) +
                 ") is a kernel thread; only user processes have pthread mutexes"};
  }
  // statically linked glibc: the pthread functions are in the executable itself
  std::string exe = proc + "/exe";
  UntrustedPolicy ep;
  ep.follow_links = true;  // a kernel magic link to the mapped executable
  UntrustedOpen r = open_untrusted(exe, ep);
  warn_if_refused(exe, r);
  auto elf = ElfFile::open(r.file);
  FuncSym s;
  if (elf && find_func(*elf, "pthread_mutex_lock", s)) {
    PthreadLib out;
    out.pid = static_cast<int>(pid);
    out.path = exe;
    out.file = r.file;
    char buf[4096];
    ssize_t n = readlink(exe.c_str(), buf, sizeof buf - 1);
    out.display = n > 0 ? std::string(buf, static_cast<size_t>(n)) : exe;
    out.static_exe = true;
    return out;
  }
  return Error{"PID " + std::to_string(pid) + " (" + proc_comm(pid) +
               ") has no libc.so.6 or libpthread.so.0 mapped and no pthread_mutex_lock symbol "
               "in its executable (statically linked and stripped, or not using glibc "
               "pthreads); only glibc pthread mutexes can be traced"};
}

// --- resolving and attaching ------------------------------------------------------------

Result<std::vector<ProbePoint>> resolve_pthread_probes(const PthreadLib& lib,
                                                       const std::vector<PthreadFn>& fns,
                                                       const ProbeOptions& opts) {
  std::shared_ptr<UntrustedFile> file = lib.file;
  if (!file) {
    UntrustedOpen r = open_untrusted(lib.path, {});
    if (!r.file) {
      if (!r.refused.empty()) return Error{"cannot use " + lib.path + ": " + r.refused};
      return Error{"cannot read " + lib.path + ": " + std::strerror(r.err) + gone_hint(lib.pid, r.err)};
    }
    file = r.file;
  }
  auto elfp = ElfFile::open(file);
  if (!elfp) return Error{"cannot read " + lib.display + ": not an ELF file"};
  const ElfFile& elf = *elfp;
  std::vector<ProbePoint> out;
  std::vector<uint8_t> seg;
  uint64_t seg_vaddr = 0;
  // Candidate moves (index in out, offset) awaiting the branch check: one scan of the
  // segment for all of them (libc's code is ~1.5 MB; a scan per function cost ~5% of
  // pmheld's startup).
  std::vector<std::pair<size_t, uint64_t>> pending;
  auto check_pending = [&] {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (auto& [i, off] : pending) ranges.push_back({out[i].sym_vaddr, out[i].sym_vaddr + off});
    std::vector<bool> hit = branch_targets_ranges(seg.data(), seg.size(), seg_vaddr, ranges);
    for (size_t k = 0; k < pending.size(); ++k)
      if (!hit[k]) {
        out[pending[k].first].offset = pending[k].second;
        out[pending[k].first].emulated = true;
      }
    pending.clear();
  };
  for (PthreadFn fn : fns) {
    FuncSym s;
    if (!find_func(elf, pthread_fn_name(fn), s)) {
      if (pthread_fn_optional(fn)) continue;
      return Error{std::string("no symbol ") + pthread_fn_name(fn) + " in " + lib.display +
                   " (not glibc?)"};
    }
    ProbePoint pt{fn, s.vaddr, 0, false};
    if (seg.empty() || s.vaddr < seg_vaddr || s.vaddr >= seg_vaddr + seg.size()) {
      if (!pending.empty()) check_pending();
      seg.clear();
      exec_segment(elf, s.vaddr, seg, seg_vaddr);
    }
    if (!seg.empty() && s.vaddr >= seg_vaddr && s.vaddr < seg_vaddr + seg.size()) {
      const uint8_t* code = seg.data() + (s.vaddr - seg_vaddr);
      size_t avail = seg.size() - (s.vaddr - seg_vaddr);
      size_t len = s.size ? std::min<size_t>(s.size, avail) : std::min<size_t>(64, avail);
      X86Insn first = decode_x86(code, len);
      pt.emulated = first.ok && first.emulated;
      if (!opts.at_symbol && !pt.emulated) {
        uint64_t off = cheap_probe_offset(code, len, arg_regs(fn), fn != PthreadFn::MutexUnlock);
        if (off) pending.push_back({out.size(), off});
      }
    }
    out.push_back(pt);
  }
  if (!pending.empty()) check_pending();
  timing_mark("resolve pthread probe points");
  return out;
}

std::string describe_probe_point(const ProbePoint& p) {
  std::string s = pthread_fn_name(p.fn);
  if (p.offset) s += "+" + format_hex(p.offset);
  s += p.emulated ? " (emulated instruction)" : " (single-stepped instruction)";
  return s;
}

Status attach_pthread_probes(BpfSession& s, const PthreadLib& lib,
                             const std::vector<ProbePoint>& points,
                             const std::vector<PthreadHandler>& handlers) {
  for (const auto& h : handlers) {
    const ProbePoint* pt = nullptr;
    for (const auto& p : points)
      if (p.fn == h.fn) pt = &p;
    if (!pt) continue;  // optional function absent from this glibc
    for (int ret = 0; ret < 2; ++ret) {
      const std::string& fn = ret ? h.return_fn : h.entry_fn;
      if (fn.empty()) continue;
      if (auto st = s.attach_uprobe_at(lib.probe_path(), pt->sym_vaddr + pt->offset, fn, ret != 0, lib.pid)) {
        std::string msg = st->message;
        std::string hint = lib.pid > 0 && !pid_exists(static_cast<uint32_t>(lib.pid))
                               ? "; is PID " + std::to_string(lib.pid) + " still running?"
                               : "";
        return Error{std::string("cannot attach ") + (ret ? "uretprobe" : "uprobe") + " to " +
                     lib.display + ":" + pthread_fn_name(h.fn) +
                     (pt->offset ? "+" + format_hex(pt->offset) : "") + ": " + msg + hint};
      }
      if (timing_on()) timing_mark(std::string(ret ? "uretprobe " : "uprobe ") + pthread_fn_name(h.fn));
    }
  }
  return std::nullopt;
}

}  // namespace bpfdiag
