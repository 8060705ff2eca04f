// doctor's advice for a target (-p), from the facts target.cpp gathered (no I/O here,
// unit-tested): what runs in the process, what its stacks will show with the suite's
// stack tools, and the commands to run, in the suite's own options. What the advice
// relies on:
//   - offcputime, profile, lockstat and pmheld unwind a -p/-t target's user stacks from
//     its files' .eh_frame (--unwind dwarf, their default with -p/-t); code without
//     tables (JIT code) is walked by its frame pointer; system-wide they walk frame
//     pointers only (docs/design/unwinding.md);
//   - names come from .symtab/.dynsym, a build-id debug file under
//     /usr/lib/debug/.build-id (no debuginfod), and /tmp/perf-PID.map (common/symbolize.h);
//   - --jvm-perfmap (offcputime, profile) asks a HotSpot JVM (JDK 17+) for its perf map
//     through its attach socket, starting the listener with SIGQUIT only when the JVM
//     handles SIGQUIT (common/jvm_attach.cpp).
#include <cctype>
#include <cstdio>
#include <cstring>

#include "tools/doctor/doctor.h"

namespace doctor {

namespace {

std::string base_name(const std::string& p) {
  auto i = p.rfind('/');
  return i == std::string::npos ? p : p.substr(i + 1);
}

Check target_check(const TargetFacts& t, const std::string& name) {
  Check k{"target", name, Verdict::Ok, false, "", ""};
  k.pid = t.pid;
  return k;
}

// What our tools make of the target's perf map, or "" when it has none.
std::string perf_map_text(const PerfMapFacts& m) {
  if (m.path.empty()) return "";
  if (!m.refused.empty()) return m.path + " is there but our tools ignore it: " + m.refused;
  std::string s = m.path + " (" + std::to_string(m.entries) + " entries";
  if (m.age_s >= 0) s += ", written " + std::to_string(m.age_s) + " s ago";
  return s + ") names its JIT code: our tools read it";
}

bool perf_map_used(const PerfMapFacts& m) { return !m.path.empty() && m.refused.empty() && m.entries > 0; }

std::string python_version_text(const PythonFacts& p) {
  if (!p.major) return "CPython (version unknown)";
  std::string v = "CPython " + std::to_string(p.major) + "." + std::to_string(p.minor);
  if (p.version_from.compare(0, 10, "Py_Version") == 0) v += "." + std::to_string(p.micro);  // the name has none
  return v + (p.version_from.empty() ? "" : " (" + p.version_from + ")");
}

Check python_advice(const TargetFacts& t) {
  const PythonFacts& py = t.python;
  Check k = target_check(t, "runtime");
  k.commands = stack_commands(t.pid);
  k.detail = python_version_text(py);
  const bool ge312 = py.major > 3 || (py.major == 3 && py.minor >= 12);
  const std::string interp =
      "Python code shows as interpreter frames (_PyEval_EvalFrameDefault), not as Python "
      "function names";
  // The trampoline (sub $8,%rsp; call) keeps no frame pointer and has no unwind table: the
  // unwinder goes on from %rbp there, which only an interpreter with frame pointers keeps.
  const std::string depth =
      py.interpreter_fp ? ""
                        : "; a stack names its innermost Python function and ends "
                          "past it ([unknown mapping]): the trampoline has no unwind table and this interpreter "
                          "keeps no frame pointer for our unwinder to go on from";
  if (perf_map_used(t.perf_map) && t.perf_map.python_entries > 0) {
    k.detail += ", running with its perf trampoline (-X perf): " + perf_map_text(t.perf_map) + ", " +
                std::to_string(t.perf_map.python_entries) + " of them Python functions (py::...)" + depth;
    return k;
  }
  if (ge312 && py.perf_trampoline) {
    k.detail += ", built with perf support, not enabled in this process: " + interp;
    k.set(Verdict::Warn, "for Python function names restart it with `" + base_name(t.exe) +
                             " -X perf ...` or PYTHONPERFSUPPORT=1 in its environment: it then writes "
                             "/tmp/perf-PID.map, which our tools read; then run the commands with its new PID" +
                             depth);
  } else if (ge312) {
    k.detail += ", built without perf support (no _Py_trampoline_func_start): " + interp;
    k.set(Verdict::Warn,
          "for Python function names run it on a CPython 3.12+ built with perf support "
          "(python -X perf or PYTHONPERFSUPPORT=1 writes /tmp/perf-PID.map, which our tools read)");
  } else {
    k.detail += ": " + interp + "; perf maps of Python functions need CPython 3.12+";
    k.set(Verdict::Warn,
          "for Python function names run it on CPython 3.12+ with -X perf (or PYTHONPERFSUPPORT=1): "
          "it writes /tmp/perf-PID.map, which our tools read; as it is, the commands give the "
          "interpreter's C stacks");
  }
  return k;
}

// How --jvm-perfmap will reach this JVM (common/jvm_attach.cpp's order), and whether it can.
bool jvm_attach_text(const JvmFacts& j, std::string& text, std::string& fix) {
  const std::string sock = "/tmp/.java_pid" + std::to_string(j.nspid);
  if (j.major && j.major < 17) {
    fix = "--jvm-perfmap needs JDK 17+ (Compiler.perfmap); this is JDK " + std::to_string(j.major) +
          ": Java frames stay [unknown] unless an agent writes /tmp/perf-PID.map (run it on JDK 17+ for "
          "--jvm-perfmap)";
    return false;
  }
  if (j.attach_disabled) {
    fix =
        "started with -XX:+DisableAttachMechanism: --jvm-perfmap cannot ask it; restart it without that flag, "
        "then run offcputime/profile -p NEWPID --jvm-perfmap";
    return false;
  }
  if (j.attach_socket) {
    text = "its attach listener is up (" + sock + "): --jvm-perfmap asks it directly, no signal sent";
    if (!j.catches_sigquit)
      text += " (it does not handle SIGQUIT, as with -Xrs, which starts the listener with the JVM)";
    return true;
  }
  if (!j.catches_sigquit) {
    fix =
        "it does not handle SIGQUIT (a JNI host that took the signal, or a JVM still starting) and its attach "
        "listener is not up (no " +
        sock +
        "): --jvm-perfmap will not signal it (SIGQUIT would end it) and "
        "Java frames stay [unknown]; restart it with -XX:+StartAttachListener (the listener then starts with "
        "the JVM), then run offcputime/profile -p NEWPID --jvm-perfmap";
    return false;
  }
  text = "it handles SIGQUIT: --jvm-perfmap starts its attach listener (/tmp/.attach_pid" + std::to_string(j.nspid) +
         " and SIGQUIT, as jcmd does) and asks for the map: no restart, no JVM flags";
  return true;
}

Check jvm_advice(const TargetFacts& t) {
  const JvmFacts& j = t.jvm;
  Check k = target_check(t, "runtime");
  k.detail = "HotSpot JVM, " +
             (j.version.empty() ? std::string("JDK version unknown (JDK 17+ needed)") : "JDK " + j.version) + " (" +
             t.evidence + "); Java methods are JIT code, named only by a perf map";
  const std::string map = perf_map_text(t.perf_map);
  if (!map.empty()) k.detail += "; " + map;
  std::string attach, fix;
  const bool can_attach = jvm_attach_text(j, attach, fix);
  if (!attach.empty()) k.detail += "; " + attach;
  if (!j.preserve_fp)
    k.detail +=
        "; C2-compiled methods keep no frame pointer, so a stack can end at one "
        "(-XX:+PreserveFramePointer at JVM start keeps them whole)";
  k.commands = stack_commands(t.pid, can_attach ? " --jvm-perfmap" : "");
  if (!can_attach) {
    k.set(Verdict::Warn, fix);
  } else if (perf_map_used(t.perf_map)) {
    k.detail += "; --jvm-perfmap rewrites the map with the methods compiled since";
  } else {
    k.set(Verdict::Warn, std::string("without a perf map Java frames are [unknown]: run the stack tools with "
                                     "--jvm-perfmap") +
                             (j.major ? "" : " (JDK 17+)") + ", as below");
  }
  return k;
}

Check node_advice(const TargetFacts& t) {
  Check k = target_check(t, "runtime");
  k.commands = stack_commands(t.pid);
  k.detail = "Node.js (" + t.evidence +
             "): JavaScript functions are V8 JIT code, named only by a perf map and "
             "walked by their frame pointers; V8's builtins (Builtins_*) are code in its executable without "
             "unwind rows, so a stack ends at the first of them ([no CFI])";
  if (perf_map_used(t.perf_map)) {
    k.detail += "; " + perf_map_text(t.perf_map);
    return k;
  }
  const std::string map = perf_map_text(t.perf_map);
  k.detail += map.empty() ? "; no perf map: JavaScript frames are [unknown]" : "; " + map;
  k.set(Verdict::Warn,
        "for JavaScript function names restart it with `node --perf-basic-prof` (or "
        "--perf-basic-prof-only-functions): it writes /tmp/perf-PID.map, which our tools read; then "
        "run the commands with its new PID");
  return k;
}

Check go_advice(const TargetFacts& t) {
  Check k = target_check(t, "runtime");
  k.commands = stack_commands(t.pid);
  k.detail = "Go" + (t.go_version.empty() ? std::string() : " " + t.go_version) + " (" + t.evidence +
             "): Go keeps frame pointers (the default since Go 1.7) and its functions are named from .symtab; "
             "stacks are of OS threads: a parked goroutine is not one, an idle thread waits in runtime.futex";
  return k;
}

Check unclassified_advice(const TargetFacts& t) {
  Check k = target_check(t, "runtime");
  k.commands = stack_commands(t.pid);
  k.detail = "unclassified runtime: " + std::to_string(t.anon_exec_mappings) +
             " executable mapping(s) of no file (JIT code of a runtime doctor does not know); stacks pass through "
             "such code only where it keeps frame pointers";
  if (perf_map_used(t.perf_map)) {
    k.detail += "; " + perf_map_text(t.perf_map);
    return k;
  }
  const std::string map = perf_map_text(t.perf_map);
  k.detail += map.empty() ? "; no perf map: frames in that code are [unknown]" : "; " + map;
  k.set(Verdict::Warn,
        "if the runtime can write a perf map (/tmp/perf-PID.map, \"ADDR SIZE name\" lines, as perf "
        "reads), turn that on: our tools read it");
  return k;
}

Check native_advice(const TargetFacts& t) {
  Check k = target_check(t, "runtime");
  k.commands = stack_commands(t.pid);
  k.detail =
      "native code: no JIT or interpreter found (no libjvm.so, libpython or libnode mapped, no Go build "
      "info, no executable memory without a file); functions are named from its files' symbols and "
      "stacks unwound from their .eh_frame (the checks below)";
  const std::string map = perf_map_text(t.perf_map);
  if (!map.empty()) k.detail += "; " + map;
  return k;
}

}  // namespace

const char* runtime_name(Runtime r) {
  switch (r) {
    case Runtime::Native:
      return "native";
    case Runtime::Go:
      return "go";
    case Runtime::CPython:
      return "cpython";
    case Runtime::HotSpot:
      return "hotspot";
    case Runtime::Node:
      return "node";
    case Runtime::Unclassified:
      return "unclassified";
  }
  return "?";
}

std::vector<std::string> stack_commands(uint32_t pid, const std::string& extra) {
  const std::string p = " -p " + std::to_string(pid);
  return {"offcputime" + p + extra, "profile" + p + extra};
}

Check runtime_check(const TargetFacts& t) {
  switch (t.runtime) {
    case Runtime::HotSpot:
      return jvm_advice(t);
    case Runtime::CPython:
      return python_advice(t);
    case Runtime::Node:
      return node_advice(t);
    case Runtime::Go:
      return go_advice(t);
    case Runtime::Unclassified:
      return unclassified_advice(t);
    case Runtime::Native:
      break;
  }
  return native_advice(t);
}

Check symbols_check(const std::string& what, const FileFacts& f, const TargetFacts& t) {
  Check k = target_check(t, what + "_symbols");
  if (!f.readable) {
    k.status = Verdict::Skip;
    k.detail = f.path + ": not a readable ELF file";
    return k;
  }
  const std::string dyn = "(.dynsym only: " + std::to_string(f.dynsym_functions) + " functions)";
  if (f.has_symtab) {
    k.detail = f.path + ": has .symtab (function names)";
  } else if (f.dbgsym_hint.empty()) {
    k.detail = f.path + ": stripped, build-id debug file installed under /usr/lib/debug/.build-id: our tools read it";
  } else if (t.runtime == Runtime::HotSpot && f.role == FileRole::Exe) {
    k.detail = f.path +
               ": the java launcher, stripped; its own frames are few (main, JavaMain): "
               "HotSpot's are named from libjvm.so, Java methods by a perf map (runtime)";
  } else {
    k.detail = f.path + ": stripped " + dyn + ", no build-id debug file" +
               (f.build_id.empty() ? std::string(" (and no build id)") : " for build id " + f.build_id);
    k.set(Verdict::Warn, f.dbgsym_hint +
                             "; our tools read build-id debug files under /usr/lib/debug/.build-id "
                             "(not debuginfod); until then only its exported functions are named, the others show as "
                             "[unknown] (" +
                             base_name(f.path) + "+0x...)");
  }
  return k;
}

Check frame_pointer_check(const std::string& what, const FileFacts& f, const TargetFacts& t) {
  Check k = target_check(t, what + "_frame_pointers");
  if (!f.fp_sampled) {
    k.status = Verdict::Skip;
    k.detail = f.fp_error;
    return k;
  }
  const std::string v = frame_pointer_verdict(f.fp);
  k.detail = strf(
      "%s: frame pointers %s (%llu of %llu sampled functions with a stack frame set up %%rbp; "
      "%llu leaf functions without a frame not counted)",
      f.path.c_str(), v.c_str(), static_cast<unsigned long long>(f.fp.with_fp),
      static_cast<unsigned long long>(f.fp.functions), static_cast<unsigned long long>(f.fp.frameless));
  const std::string name = base_name(f.path);
  if (t.runtime == Runtime::Go && f.role == FileRole::Exe) {
    k.detail +=
        "; Go code keeps frame pointers (Go 1.7+) after a stack-bound check this sample does not read past: "
        "stacks are whole with either --unwind mode";
    return k;
  }
  using ull = unsigned long long;
  const std::string rows = strf(
      "; our unwind table for it (%llu FDEs in .eh_frame) has rows for %llu of %llu "
      "sampled functions",
      ull(f.eh_frame_fdes), ull(f.cfi_covered), ull(f.cfi_checked));
  if (v == "unknown" || v == "yes") {
    if (v == "unknown") k.status = Verdict::Skip;
    return k;
  }
  k.detail += rows;
  if (f.cfi_checked && f.cfi_covered * 5 >= f.cfi_checked * 4) {
    k.detail +=
        ": covered, no rebuild needed: with -p the stack tools (offcputime, profile, lockstat, pmheld) "
        "unwind it from .eh_frame, their default --unwind dwarf; only system-wide runs (no -p: frame "
        "pointers) end stacks in " +
        name;
    return k;
  }
  k.set(Verdict::Warn, "a stack that reaches a function of " + name +
                           " without rows (no frame pointer, no unwind "
                           "table) ends there, shown as [no CFI]: its callers, up to main and the thread start, are "
                           "missing; rebuild it with unwind tables (-fasynchronous-unwind-tables, GCC's default on "
                           "x86-64) or with -fno-omit-frame-pointer");
  return k;
}

void set_python_version(PythonFacts& p, uint64_t hex) {
  const int major = static_cast<int>((hex >> 24) & 0xff), minor = static_cast<int>((hex >> 16) & 0xff);
  if (major < 2 || major > 9 || minor > 99) return;  // not a PY_VERSION_HEX
  p.major = major;
  p.minor = minor;
  p.micro = static_cast<int>((hex >> 8) & 0xff);
}

bool python_version_from_name(const std::string& name, int& major, int& minor) {
  for (size_t at = name.find("python"); at != std::string::npos; at = name.find("python", at + 1)) {
    const char* p = name.c_str() + at + 6;
    int a = 0, b = 0, n = 0;
    if (std::sscanf(p, "%1d.%2d%n", &a, &b, &n) == 2 && n >= 3 && a >= 2) {
      major = a;
      minor = b;
      return true;
    }
  }
  return false;
}

std::string go_buildinfo_version(const uint8_t* data, size_t n) {
  static const char kMagic[] = "\xff Go buildinf:";
  if (n < 33 || std::memcmp(data, kMagic, 14) != 0 || !(data[15] & 2)) return "";  // 1.18+: inline strings
  uint64_t len = 0;
  size_t off = 32;
  for (int shift = 0; off < n && shift < 35; shift += 7) {
    const uint8_t b = data[off++];
    len |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  if (len == 0 || len > 64 || off + len > n) return "";
  std::string v(reinterpret_cast<const char*>(data + off), len);
  if (v.compare(0, 2, "go") != 0) return "";
  for (char c : v)
    if (c < 0x21 || c > 0x7e) return "";
  return v;
}

std::string java_release_version(const std::string& text, int& major) {
  major = 0;
  const std::string key = "\nJAVA_VERSION=\"";
  const std::string t = "\n" + text;
  auto at = t.find(key);
  if (at == std::string::npos) return "";
  at += key.size();
  auto end = t.find('"', at);
  if (end == std::string::npos || end - at > 32) return "";
  std::string v = t.substr(at, end - at);
  for (char c : v)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '+')) return "";
  int a = 0, b = 0;
  const int got = std::sscanf(v.c_str(), "%d.%d", &a, &b);
  major = (got == 2 && a == 1) ? b : (got >= 1 ? a : 0);  // "1.8.0_402": 8
  return v;
}

}  // namespace doctor
