// doctor: can this machine be traced? Kernel requirements and feature checks, which of
// the suite's tools and modes work here, the debug symbols and frame pointers of a
// target (-p), and a short live check that events are delivered and nothing is lost.
// Files: cli.cpp (option table, BPF text and flags), model.cpp (verdicts: lockdown,
// frame pointers, the tool/mode matrix, the exit code), advice.cpp (a target's runtime
// and what to run for it, from facts: no I/O), render.cpp (text and NDJSON),
// probes.cpp (host probes), target.cpp (target probes: the facts advice.cpp judges),
// run.cpp (the checks in order, the live check).
#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "common/bpf_plan.h"
#include "common/options.h"
#include "common/output.h"
#include "common/registry.h"
#include "common/report.h"
#include "common/result.h"

namespace doctor {

struct Config {
  bool help = false;
  bool json = false;
  bool ebpf = false;
  bool live = true;            // --no-live turns the live check off
  bool list = false;           // -l/--list: the suite's tools, modes and needs (no checks)
  std::vector<uint32_t> pids;  // -p: targets whose symbols and frame pointers are checked
};

const bpfdiag::ToolSpec& tool_spec();
const char* help_text();  // generated from tool_spec()
bpfdiag::Result<Config> parse_args(int argc, char** argv);

// The live-check program and its flags (the thread whose events are counted, and the
// kernel's offsets of that thread's switch counts).
std::string bpf_text();
bpfdiag::Result<bpfdiag::BpfPlan> bpf_plan(uint32_t tid);

// --- checks ------------------------------------------------------------------------
enum class Verdict { Ok, Warn, Fail, Skip };
const char* status_name(Verdict s);  // "ok", "warn", "fail", "skip"

// One line of the report.
struct Check {
  std::string category;  // "system", "kernel", "bpf", "live", "tools", "target"
  std::string name;      // "btf", "tracefs", "lockstat -K", "frame_pointers", ...
  Verdict status = Verdict::Ok;
  bool required = false;  // a failure means the suite cannot be trusted here (exit 1)
  std::string detail;     // what was found, with the number behind it
  std::string fix;        // what to do when not ok ("" when ok)
  uint32_t pid = 0;       // category "target": the process checked
  // Command lines of the suite's own tools to run for this target, verbatim
  // ("offcputime -p 4242 --jvm-perfmap"); empty for most checks.
  std::vector<std::string> commands = {};

  // Not ok: the verdict and what to do.
  void set(Verdict v, std::string what_to_do) {
    status = v;
    fix = std::move(what_to_do);
  }
};

// printf into a std::string (details with numbers).
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Exit code of a report: 1 when a required check failed, else 0.
int exit_code(const std::vector<Check>& checks);
// Counts per status name ("ok", "warn", "fail", "skip").
std::map<std::string, uint64_t> status_counts(const std::vector<Check>& checks);

// "none [integrity] confidentiality" -> "integrity"; "" when unparsable.
std::string lockdown_mode(const std::string& file_text);

// Frame pointers: what the code at a function's start does with the stack. A frame
// pointer is `push %rbp; mov %rsp,%rbp` (possibly after endbr64 and other pushes);
// a function that pushes, moves %rsp or calls without it has a frame but no frame
// pointer; one that does none of these before its first branch is frameless (a leaf:
// compilers skip the frame there even with -fno-omit-frame-pointer) and says nothing.
enum class FrameSetup { FramePointer, NoFramePointer, Frameless };
FrameSetup frame_setup(const uint8_t* code, size_t n);
struct FramePointerSample {
  uint64_t functions = 0;  // functions with a stack frame examined
  uint64_t with_fp = 0;    // of which set up a frame pointer
  uint64_t frameless = 0;  // leaf functions without a frame (not counted above)
};
// "yes" (>= 80% of functions), "no" (<= 20%), "mixed"; "unknown" with < 5 functions.
std::string frame_pointer_verdict(const FramePointerSample& s);

// What the machine offers, as found by the probes; input of the tool/mode matrix.
struct Features {
  bool root = false;
  bool btf = false;
  bool tracefs = false;
  bool uprobes = false;
  bool perf_cpu_clock = false;        // software cpu-clock perf events open
  std::set<std::string> tracepoints;  // "category:name" found in tracefs
};
// One row per tool and mode of the registry (common/registry.h): category "tools", a
// warning when the mode cannot work here, naming what is missing.
std::vector<Check> tool_matrix(const Features& f, const std::vector<const bpfdiag::ToolEntry*>& tools);
// Every tracepoint (and raw tracepoint) the matrix asks about (probes.cpp looks each
// one up in tracefs).
std::vector<std::string> matrix_tracepoints(const std::vector<const bpfdiag::ToolEntry*>& tools);
// What a mode needs, in words: "tracepoints sched:sched_switch, ...; perf cpu-clock".
std::string needs_text(const bpfdiag::ModeNeeds& m);

// --- a target's runtime and the advice for it (advice.cpp) -----------------------------
// What runs in a process decides what names its stacks can get: native code is named by
// its ELF symbols and unwound from .eh_frame; JIT code (Java, JavaScript, Python 3.12+
// with its perf trampoline) is named only by a perf map (/tmp/perf-PID.map).
enum class Runtime { Native, Go, CPython, HotSpot, Node, Unclassified };
const char* runtime_name(Runtime r);  // "native", "go", "cpython", "hotspot", "node", "unclassified"

// One ELF file of the target: its executable, its libc, its runtime's library.
enum class FileRole { Exe, Libc, RuntimeLib };
struct FileFacts {
  std::string path;  // as the process sees it
  FileRole role = FileRole::Exe;
  bool readable = false;  // an ELF file we could read
  bool has_symtab = false;
  std::string build_id;           // hex, "" if none
  std::string dbgsym_hint;        // "" when names are there (.symtab or a build-id debug file)
  uint64_t dynsym_functions = 0;  // functions .dynsym names (what a stripped file keeps)
  uint64_t eh_frame_fdes = 0;     // FDEs in its .eh_frame our unwind table was built from
  uint64_t cfi_checked = 0;       // functions looked up in that table (the frame-pointer sample's)
  uint64_t cfi_covered = 0;       // of which start where the table has a CFA rule
  bool fp_sampled = false;
  FramePointerSample fp;
  std::string fp_error;  // why no sample was taken
};

// /tmp/perf-PID.map as the stack tools' symbolizer finds it (the host's /tmp, else the
// process's own): owned by root or the process's user, regular, size-capped.
struct PerfMapFacts {
  std::string path;             // "" when there is none
  std::string refused;          // non-empty: it is there but our tools ignore it (why)
  uint64_t entries = 0;         // well-formed lines
  uint64_t python_entries = 0;  // "py::" lines (CPython's perf trampoline)
  int64_t age_s = -1;           // seconds since it was last written
};

struct JvmFacts {
  std::string libjvm;            // the libjvm.so it maps
  std::string version;           // JAVA_VERSION of its release file ("17.0.15"), "" unknown
  int major = 0;                 // 17; 0 unknown
  bool attach_socket = false;    // /tmp/.java_pidNSPID in its root: a socket of its user
  bool catches_sigquit = false;  // SigCgt has SIGQUIT (not -Xrs, not still starting)
  bool attach_disabled = false;  // -XX:+DisableAttachMechanism on its command line
  bool preserve_fp = false;      // -XX:+PreserveFramePointer on its command line
  uint32_t nspid = 0;            // its PID in its own PID namespace (names its attach files)
};

struct PythonFacts {
  int major = 0, minor = 0, micro = 0;  // 0.0.0: unknown
  std::string version_from;             // "Py_Version in /usr/bin/python3.11", "the name libpython3.12.so.1.0"
  bool perf_trampoline = false;         // _Py_trampoline_func_start: built with perf support (3.12+)
  bool interpreter_fp = false;          // the file with _PyEval_EvalFrameDefault keeps frame pointers
};

struct TargetFacts {
  uint32_t pid = 0;
  std::string comm;
  std::string exe;  // its executable, as the process sees it
  Runtime runtime = Runtime::Native;
  std::string evidence;  // what showed the runtime ("libjvm.so mapped", ...)
  JvmFacts jvm;
  PythonFacts python;
  std::string go_version;           // "go1.22.1" from .go.buildinfo, "" unknown
  uint64_t anon_exec_mappings = 0;  // executable mappings of no file (JIT code)
  PerfMapFacts perf_map;
};

// "offcputime -p PID<extra>" and "profile -p PID<extra>": the stack tools' commands.
std::vector<std::string> stack_commands(uint32_t pid, const std::string& extra = "");
// The runtime line of a target: what it is, what its stacks will show, what to run.
Check runtime_check(const TargetFacts& t);
// Symbols and frame pointers of one file, judged for what our tools do with them
// (DWARF unwinding from .eh_frame with -p; build-id debug files under /usr/lib/debug).
Check symbols_check(const std::string& what, const FileFacts& f, const TargetFacts& t);
Check frame_pointer_check(const std::string& what, const FileFacts& f, const TargetFacts& t);
// Parsers of a target's bytes (hostile input: bounded, never trusted for sizes).
// PY_VERSION_HEX (Py_Version's value) -> major, minor, micro.
void set_python_version(PythonFacts& p, uint64_t hex);
// "python3.12", "libpython3.12.so.1.0", "python3.12d" -> 3, 12; false when none.
bool python_version_from_name(const std::string& name, int& major, int& minor);
// The Go version in a .go.buildinfo section's bytes (Go 1.18+ layout), "" when none.
std::string go_buildinfo_version(const uint8_t* data, size_t n);
// JAVA_VERSION="17.0.15" of a JDK's release file -> "17.0.15" (and 17); "1.8.0_402" -> 8.
std::string java_release_version(const std::string& text, int& major);

// --- probes (probes.cpp) -------------------------------------------------------------
struct SystemProbe {
  Features features;
  std::vector<Check> checks;
};
// Privileges, kernel, BTF, tracefs, lockdown, fentry, tp_btf, kprobes, uprobes, perf
// events, perf_event_paranoid, memlock, kernel headers, libbcc.
SystemProbe probe_system(const std::vector<const bpfdiag::ToolEntry*>& tools);
// Process `pid`: its runtime and what to run for it, the symbols and frame pointers of
// its executable, its libc and its runtime's library.
std::vector<Check> probe_target(uint32_t pid);
// Frame-pointer sample of an ELF file's functions (up to `max_functions`).
bpfdiag::Result<FramePointerSample> sample_frame_pointers(const std::string& path, size_t max_functions);

// --- the live check (run.cpp) ------------------------------------------------------
struct LiveResult {
  uint64_t syscalls_made = 0, syscalls_counted = 0;  // tracepoint syscalls:sys_enter_getppid
  uint64_t events_received = 0, events_lost = 0;     // perf buffer, one event per syscall
  uint64_t events_duplicated = 0;                    // a sequence number seen twice
  // raw tracepoint sched_switch: switches the handler ran for, against the kernel's own
  // count of the thread's switches between the first and the last of them
  uint64_t sleeps_made = 0, switches_counted = 0, switches_kernel = 0;
  uint64_t uprobe_calls = 0, uprobe_hits = 0;  // uprobe on libc getppid
  std::string uprobe_error;                    // why the uprobe was not attached
  uint64_t compile_ns = 0, total_ns = 0;
};
// Checks made from a live-check result.
std::vector<Check> live_checks(const LiveResult& r);

// --- output --------------------------------------------------------------------------
// Text: one line per check ("ok    btf          ..."), then a summary line. JSON:
// doctor.start, one doctor.check per check, doctor.summary (final).
void render(std::ostream& os, const Config& c, const std::vector<Check>& checks, const bpfdiag::DataQuality& dq,
            uint64_t elapsed_ns);
void render_start(std::ostream& os, const Config& c);
nlohmann::json check_json(const Check& k);
// --list: text, one line per mode (what it needs, what it gives); JSON: one doctor.tool
// record per tool (its options and modes, common/registry.h tool_json), final.
void render_tool_list(std::ostream& os, const Config& c, const std::vector<const bpfdiag::ToolEntry*>& tools);
bpfdiag::DataQuality empty_quality();

bpfdiag::Status run(const Config& c);

}  // namespace doctor
