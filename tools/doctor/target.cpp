// doctor's probes of a target (-p): the facts advice.cpp judges. What runs in it (a
// HotSpot JVM, CPython, Node.js, Go, JIT code of another runtime, native code), its
// executable, libc and runtime library (symbols: .symtab, or a build-id debug file;
// .eh_frame; whether their code sets up frame pointers), its perf map, and for a JVM
// how --jvm-perfmap would reach it. Everything the target controls (mapped files, its
// /tmp, its JDK's release file) is read as untrusted input (common/untrusted_file.h):
// no link followed, regular files only, size caps; nothing of the target's is executed.
#include <elf.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>

#include "common/debuginfo_hint.h"
#include "common/elf_file.h"
#include "common/jvm_attach.h"
#include "common/proc.h"
#include "common/pthread_probes.h"
#include "common/runloop.h"
#include "common/symbolize.h"
#include "common/untrusted_file.h"
#include "common/unwind_tables.h"
#include "tools/doctor/doctor.h"

namespace doctor {
using namespace bpfdiag;

namespace {

// Up to `max_functions` function symbols of `elf` (vaddr, size), spread evenly over the
// sorted list; compiler-generated start-up code left out.
std::vector<std::pair<uint64_t, uint64_t>> pick_functions(const ElfFile& elf, size_t max_functions) {
  static const char* const kSkip[] = {"_start",
                                      "_init",
                                      "_fini",
                                      "deregister_tm_clones",
                                      "register_tm_clones",
                                      "__do_global_dtors_aux",
                                      "frame_dummy",
                                      "_dl_relocate_static_pie"};
  std::vector<std::pair<uint64_t, uint64_t>> funcs;  // vaddr, size
  elf.for_each_symbol([&](const ElfSymbolEntry& s) {
    if (s.type != STT_FUNC || s.size < 8) return;
    for (const char* n : kSkip)
      if (s.name == n) return;
    funcs.emplace_back(s.value, s.size);
  });
  std::sort(funcs.begin(), funcs.end());
  funcs.erase(std::unique(funcs.begin(), funcs.end(), [](const auto& a, const auto& b) { return a.first == b.first; }),
              funcs.end());
  std::vector<std::pair<uint64_t, uint64_t>> picked;
  const size_t step = std::max<size_t>(1, funcs.size() / std::max<size_t>(1, max_functions));
  for (size_t i = 0; i < funcs.size() && picked.size() < max_functions; i += step) picked.push_back(funcs[i]);
  return picked;
}

// The prologues of `funcs`: frame pointer, a frame without one, or a frameless leaf.
FramePointerSample sample_prologues(const ElfFile& elf, const std::vector<std::pair<uint64_t, uint64_t>>& funcs) {
  FramePointerSample out;
  for (auto [vaddr, size] : funcs) {
    for (const auto& seg : elf.load_segments()) {
      if (!(seg.flags & 1 /* PF_X */) || vaddr < seg.vaddr || vaddr >= seg.vaddr + seg.filesz) continue;
      std::vector<uint8_t> code;
      if (!elf.read(vaddr - seg.vaddr + seg.offset, std::min<uint64_t>(size, 64), code)) break;
      switch (frame_setup(code.data(), code.size())) {
        case FrameSetup::FramePointer:
          out.functions++, out.with_fp++;
          break;
        case FrameSetup::NoFramePointer:
          out.functions++;
          break;
        case FrameSetup::Frameless:
          out.frameless++;
          break;
      }
      break;
    }
  }
  return out;
}

// How many of `funcs` start where our DWARF unwinder has a row (a CFA rule) for them.
uint64_t cfi_covered(const UnwindTable& t, const std::vector<std::pair<uint64_t, uint64_t>>& funcs) {
  uint64_t n = 0;
  for (const auto& f : funcs) {
    if (f.first > UINT32_MAX) continue;
    auto it =
        std::upper_bound(t.rows.begin(), t.rows.end(), f.first, [](uint64_t pc, const uw_row& r) { return pc < r.pc; });
    if (it != t.rows.begin() && ((it - 1)->types & 0xf) != UW_CFA_NONE) n++;
  }
  return n;
}

}  // namespace

Result<FramePointerSample> sample_frame_pointers(const std::string& path, size_t max_functions) {
  UntrustedPolicy pol;
  pol.follow_links = true;  // /proc/PID/exe, /proc/self/fd/N: kernel magic links
  auto r = open_untrusted(path, pol);
  if (!r.file) return Error{"cannot open " + path + ": " + (r.refused.empty() ? std::strerror(r.err) : r.refused)};
  auto elf = ElfFile::open(r.file);
  if (!elf) return Error{path + " is not an ELF file"};
  return sample_prologues(*elf, pick_functions(*elf, max_functions));
}

namespace {

std::string base_name(const std::string& p) {
  auto i = p.rfind('/');
  return i == std::string::npos ? p : p.substr(i + 1);
}

std::string dir_name(const std::string& p) {
  auto i = p.rfind('/');
  return i == std::string::npos || i == 0 ? "/" : p.substr(0, i);
}

// What the symbols and sections of a file say about the runtime in it.
struct ElfMarks {
  bool python = false;                 // _PyEval_EvalFrameDefault: CPython's interpreter
  bool trampoline = false;             // _Py_trampoline_func_start: CPython built with perf support
  std::optional<uint64_t> py_version;  // Py_Version's value (3.11+)
  bool node = false;                   // napi_module_register: Node.js
  bool go = false;                     // .go.buildinfo or .gopclntab
  std::string go_version;
};

// The file offset of [vaddr, vaddr+len) when a PT_LOAD segment holds it in the file.
std::optional<uint64_t> file_offset(const ElfFile& e, uint64_t vaddr, uint64_t len) {
  for (const auto& s : e.load_segments())
    if (vaddr >= s.vaddr && len <= s.filesz && vaddr - s.vaddr <= s.filesz - len) return vaddr - s.vaddr + s.offset;
  return std::nullopt;
}

void scan_elf(const ElfFile& e, ElfMarks& m, uint64_t& dynsym_functions) {
  uint64_t py_version_at = 0;
  e.for_each_symbol([&](const ElfSymbolEntry& s) {
    if (s.dynamic && (s.type == STT_FUNC || s.type == STT_GNU_IFUNC)) dynsym_functions++;
    if (s.name == "Py_Version" && s.size == 8) py_version_at = s.value;
    if (s.name == "_PyEval_EvalFrameDefault") m.python = true;
    if (s.name == "_Py_trampoline_func_start") m.trampoline = true;
    if (s.name == "napi_module_register") m.node = true;
  });
  std::vector<uint8_t> b;
  if (py_version_at)
    if (auto off = file_offset(e, py_version_at, 8); off && e.read(*off, 8, b) && b.size() == 8) {
      uint64_t v = 0;
      std::memcpy(&v, b.data(), 8);
      m.py_version = v;
    }
  if (auto at = e.section_addr(".go.buildinfo")) {
    m.go = true;
    for (uint64_t len : {128, 48})  // the header and a version string; less at the end of the segment
      if (auto off = file_offset(e, *at, len); off && e.read(*off, len, b)) {
        m.go_version = go_buildinfo_version(b.data(), b.size());
        break;
      }
  } else if (e.section_addr(".gopclntab")) {
    m.go = true;
  }
}

// Symbols, unwind rows and frame pointers of one file of the target, opened at
// `open_path` (a /proc magic link: /proc/PID/exe, /proc/self/fd/N), shown as `shown`.
FileFacts file_facts(const std::string& open_path, const std::string& shown, FileRole role, ElfMarks& marks) {
  FileFacts f;
  f.path = shown;
  f.role = role;
  auto names = read_elf_names(open_path);
  if (!names) return f;
  f.readable = true;
  f.has_symtab = names->has_symtab;
  f.build_id = names->build_id;
  f.dbgsym_hint = debuginfo_hint(open_path, shown);
  UntrustedPolicy pol;
  pol.follow_links = true;  // kernel magic links only (above)
  auto r = open_untrusted(open_path, pol);
  auto elf = r.file ? ElfFile::open(r.file) : nullptr;
  if (!elf) {
    f.fp_error = "cannot read " + shown + (r.refused.empty() ? "" : ": " + r.refused);
    return f;
  }
  scan_elf(*elf, marks, f.dynsym_functions);
  const auto funcs = pick_functions(*elf, 200);
  f.fp = sample_prologues(*elf, funcs);
  f.fp_sampled = true;
  // the table the stack tools would build for this file (common/unwind_tables.h)
  auto table = build_unwind_table(*r.file);
  f.eh_frame_fdes = table->st.fdes;
  f.cfi_checked = funcs.size();
  f.cfi_covered = table->has_cfi ? cfi_covered(*table, funcs) : 0;
  return f;
}

// The target's mappings: its runtime's library, and executable memory of no file.
struct MapScan {
  std::string lib, lib_range;  // libjvm.so, libpython*.so* or libnode.so* (the first found)
  Runtime lib_runtime = Runtime::Native;
  std::string libc, libc_range;  // libc.so.6 (not the stub libpthread.so.0 of glibc 2.34+)
  uint64_t anon_exec = 0;
};

MapScan scan_maps(uint32_t pid) {
  MapScan m;
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  for (std::string l; std::getline(f, l);) {
    auto e = parse_maps_line(l);
    if (!e) continue;
    if (e->perms[2] == 'x' && (e->path.empty() || e->path.compare(0, 6, "[anon:") == 0)) m.anon_exec++;
    const std::string b = base_name(without_deleted_suffix(e->path));
    if (m.libc.empty() && (b.compare(0, 8, "libc.so.") == 0 || b.compare(0, 7, "libc-2.") == 0)) {
      m.libc = without_deleted_suffix(e->path);
      m.libc_range = map_range(e->start, e->end);
    }
    Runtime r = Runtime::Native;
    if (b == "libjvm.so") r = Runtime::HotSpot;
    else if (b.compare(0, 9, "libpython") == 0 && b.find(".so") != std::string::npos) r = Runtime::CPython;
    else if (b.compare(0, 10, "libnode.so") == 0) r = Runtime::Node;
    if (r == Runtime::Native || (!m.lib.empty() && m.lib_runtime == Runtime::HotSpot)) continue;
    if (m.lib.empty() || r == Runtime::HotSpot) {  // a JVM that embeds Python is a JVM first
      m.lib = without_deleted_suffix(e->path);
      m.lib_range = map_range(e->start, e->end);
      m.lib_runtime = r;
    }
  }
  return m;
}

// /tmp/perf-PID.map where the symbolizer looks for it (common/symbolize.cpp load_perfmap):
// the host's /tmp, else the process's own; owned by root or the process's user.
PerfMapFacts perf_map_facts(uint32_t pid) {
  PerfMapFacts m;
  auto uids = process_uids(pid);
  if (!uids) return m;
  UntrustedPolicy pol;
  pol.max_size = kMaxPerfMapSize;
  pol.owner = uids->effective;
  const std::string path = "/tmp/perf-" + std::to_string(pid) + ".map";
  std::string shown = path;
  UntrustedOpen r = open_untrusted(path, pol);
  if (!r.file && r.refused.empty() && r.err == ENOENT) {
    r = open_in_proc_root(pid, path, pol);
    shown = "/proc/" + std::to_string(pid) + "/root" + path;
  }
  if (!r.file) {
    if (!r.refused.empty()) m.path = shown, m.refused = r.refused;
    return m;
  }
  m.path = shown;
  read_capped_lines(*r.file, kMaxPerfMapSize, kMaxPerfMapLine, [&](std::string_view l) {
    auto e = parse_perfmap_line(l);
    if (!e) return;
    m.entries++;
    if (e->name.compare(0, 4, "py::") == 0) m.python_entries++;
  });
  const int64_t now = static_cast<int64_t>(realtime_ns());
  if (r.file->mtime_ns() > 0 && now >= r.file->mtime_ns()) m.age_s = (now - r.file->mtime_ns()) / 1000000000LL;
  return m;
}

// A small text file as process `pid` sees it (its root, no link followed), "" if none.
std::string read_in_root(uint32_t pid, const std::string& path, uint64_t cap) {
  UntrustedPolicy pol;
  pol.max_size = cap;
  auto r = open_in_proc_root(pid, path, pol);
  std::string text;
  if (r.file) read_capped_lines(*r.file, cap, 4096, [&](std::string_view l) { text.append(l).push_back('\n'); });
  return text;
}

// /proc/PID/status (effective uid, SigCgt, NSpid) and /proc/PID/cmdline of a JVM, as
// common/jvm_attach.cpp reads them; its attach socket; its JDK's release file.
JvmFacts jvm_facts(uint32_t pid, const std::string& libjvm) {
  JvmFacts j;
  j.libjvm = libjvm;
  j.nspid = pid;
  uid_t uid = 0;
  if (auto ids = jvm_ids(pid)) {
    uid = ids->uid;
    j.nspid = ids->nspid;
    j.catches_sigquit = ids->catches_sigquit;
  }
  std::ifstream cl("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string cmdline(64 * 1024, '\0');
  cl.read(cmdline.data(), static_cast<std::streamsize>(cmdline.size()));
  cmdline.resize(static_cast<size_t>(cl.gcount()));
  for (size_t at = 0, end; at < cmdline.size(); at = end + 1) {
    end = cmdline.find('\0', at);
    if (end == std::string::npos) end = cmdline.size();
    const std::string arg = cmdline.substr(at, end - at);
    if (arg == "-XX:+DisableAttachMechanism") j.attach_disabled = true;
    if (arg == "-XX:+PreserveFramePointer") j.preserve_fp = true;
  }
  const int tmp = open_dir_in_proc_root(pid, "/tmp");
  if (tmp >= 0) {
    struct stat sb {};
    const std::string sock = ".java_pid" + std::to_string(j.nspid);
    j.attach_socket =
        fstatat(tmp, sock.c_str(), &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(sb.st_mode) && sb.st_uid == uid;
    close(tmp);
  }
  // JAVA_HOME/lib/server/libjvm.so (JDK 9+), JAVA_HOME/jre/lib/amd64/server/libjvm.so (8)
  std::string dir = dir_name(libjvm);
  for (int up = 0; up < 5 && j.version.empty() && dir != "/"; ++up) {
    dir = dir_name(dir);
    j.version = java_release_version(read_in_root(pid, dir + "/release", 64 * 1024), j.major);
  }
  return j;
}

// The runtime, from the mappings and the marks of the executable and the runtime's library.
void classify(TargetFacts& t, const MapScan& maps, const ElfMarks& exe, const ElfMarks& lib) {
  if (maps.lib_runtime != Runtime::Native) {
    t.runtime = maps.lib_runtime;
    t.evidence = base_name(maps.lib) + " mapped: " + maps.lib;
  } else if (exe.python) {
    t.runtime = Runtime::CPython;
    t.evidence = "CPython's interpreter in " + t.exe;
  } else if (exe.node) {
    t.runtime = Runtime::Node;
    t.evidence = "Node's N-API in " + t.exe;
  } else if (exe.go) {
    t.runtime = Runtime::Go;
    t.evidence = "Go build info in " + t.exe;
    t.go_version = exe.go_version;
  } else if (maps.anon_exec) {
    t.runtime = Runtime::Unclassified;
  }
  t.anon_exec_mappings = maps.anon_exec;
  if (t.runtime != Runtime::CPython) return;
  PythonFacts& p = t.python;
  p.perf_trampoline = exe.trampoline || lib.trampoline;
  const auto& hex = lib.py_version ? lib.py_version : exe.py_version;
  if (hex) set_python_version(p, *hex);
  if (p.major) {
    p.version_from = "Py_Version in " + (lib.py_version ? maps.lib : t.exe);
  } else if (python_version_from_name(base_name(maps.lib), p.major, p.minor)) {
    p.version_from = "the name " + base_name(maps.lib);
  } else if (python_version_from_name(base_name(t.exe), p.major, p.minor)) {
    p.version_from = "the name " + base_name(t.exe);
  }
}

// The check names of a runtime's library: libjvm_symbols, libpython_frame_pointers, ...
std::string runtime_lib_name(Runtime r) {
  switch (r) {
    case Runtime::HotSpot:
      return "libjvm";
    case Runtime::CPython:
      return "libpython";
    case Runtime::Node:
      return "libnode";
    default:
      return "runtime_lib";
  }
}

void add_file_checks(std::vector<Check>& out, const std::string& what, const FileFacts& f, const TargetFacts& t) {
  out.push_back(symbols_check(what, f, t));
  if (f.readable) out.push_back(frame_pointer_check(what, f, t));
}

// libc.so.6 as the process maps it; else what find_pthread_lib says (linked in, none).
void add_libc_checks(std::vector<Check>& out, uint32_t pid, const MapScan& maps, const TargetFacts& t) {
  ElfMarks marks;
  if (!maps.libc.empty()) {
    UntrustedOpen r = open_mapping(pid, maps.libc_range, maps.libc);  // held open while read
    if (r.file) {
      add_file_checks(out, "libc", file_facts(r.file->fd_path(), maps.libc, FileRole::Libc, marks), t);
      return;
    }
  }
  auto lib = find_pthread_lib(pid);
  if (!lib) {
    out.push_back(Check{"target", "libc", Verdict::Skip, false, lib.error(), ""});
  } else if (lib->static_exe) {
    out.push_back(Check{"target", "libc", Verdict::Ok, false, "glibc is linked into the executable", ""});
  } else {
    add_file_checks(out, "libc", file_facts(lib->probe_path(), lib->display, FileRole::Libc, marks), t);
  }
}

// "PID 42 (java), 21 threads, /usr/lib/jvm/.../bin/java"; skip when it has no executable.
Check process_check(TargetFacts& t) {
  Check k{"target", "process", Verdict::Ok, false, "", ""};
  char exe[4096];
  const std::string link = "/proc/" + std::to_string(t.pid) + "/exe";
  ssize_t n = readlink(link.c_str(), exe, sizeof exe - 1);
  if (n <= 0) {
    k.status = Verdict::Skip;
    k.detail = "PID " + std::to_string(t.pid) + " (" + t.comm +
               "): no executable (kernel thread, or gone): " + std::strerror(errno);
    return k;
  }
  exe[n] = 0;
  t.exe = exe;
  k.detail = "PID " + std::to_string(t.pid) + " (" + t.comm + "), " + std::to_string(proc_threads(t.pid).size()) +
             " threads, " + t.exe;
  return k;
}

}  // namespace

std::vector<Check> probe_target(uint32_t pid) {
  std::vector<Check> out;
  TargetFacts t;
  t.pid = pid;
  t.comm = proc_comm(pid);
  out.push_back(process_check(t));
  if (out.back().status != Verdict::Skip) {
    const MapScan maps = scan_maps(pid);
    ElfMarks exe_marks, lib_marks;
    const FileFacts exe = file_facts("/proc/" + std::to_string(pid) + "/exe", t.exe, FileRole::Exe, exe_marks);
    std::optional<FileFacts> rlib;
    if (!maps.lib.empty()) {
      UntrustedOpen r = open_mapping(pid, maps.lib_range, maps.lib);  // held open while read
      if (r.file) rlib = file_facts(r.file->fd_path(), maps.lib, FileRole::RuntimeLib, lib_marks);
    }
    classify(t, maps, exe_marks, lib_marks);
    const FileFacts& interp = rlib && lib_marks.python ? *rlib : exe;
    t.python.interpreter_fp = interp.fp_sampled && frame_pointer_verdict(interp.fp) == "yes";
    if (t.runtime == Runtime::HotSpot) t.jvm = jvm_facts(pid, maps.lib);
    t.perf_map = perf_map_facts(pid);
    out.push_back(runtime_check(t));
    add_file_checks(out, "exe", exe, t);
    add_libc_checks(out, pid, maps, t);
    if (rlib) add_file_checks(out, runtime_lib_name(t.runtime), *rlib, t);
  }
  for (auto& k : out) k.pid = pid;
  return out;
}

}  // namespace doctor
