// doctor -p: the advice per runtime (tools/doctor/advice.cpp), from facts, and the
// parsers of a target's bytes it relies on.
#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tools/doctor/doctor.h"

using namespace doctor;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TargetFacts facts(Runtime r) {
  TargetFacts t;
  t.pid = 4242;
  t.comm = "x";
  t.exe = "/usr/bin/x";
  t.runtime = r;
  t.evidence = "test";
  return t;
}

const std::vector<std::string> kPlain = {"offcputime -p 4242", "profile -p 4242"};
const std::vector<std::string> kJvm = {"offcputime -p 4242 --jvm-perfmap", "profile -p 4242 --jvm-perfmap"};

PerfMapFacts map_with(uint64_t entries, uint64_t python_entries) {
  PerfMapFacts m;
  m.path = "/tmp/perf-4242.map";
  m.entries = entries;
  m.python_entries = python_entries;
  m.age_s = 3;
  return m;
}

FileFacts no_fp_file(uint64_t covered, uint64_t checked) {
  FileFacts f;
  f.path = "/opt/app/bin/server";
  f.readable = true;
  f.has_symtab = true;
  f.fp_sampled = true;
  f.fp = {100, 0, 20};
  f.eh_frame_fdes = 500;
  f.cfi_checked = checked;
  f.cfi_covered = covered;
  return f;
}

}  // namespace

TEST_CASE("native: our stack tools with -p, nothing to rebuild") {
  Check k = runtime_check(facts(Runtime::Native));
  CHECK(k.status == Verdict::Ok);
  CHECK(k.category == "target");
  CHECK(k.name == "runtime");
  CHECK(k.pid == 4242);
  CHECK(k.commands == kPlain);
  CHECK(has(k.detail, "native code"));
}

TEST_CASE("frame pointers: .eh_frame rows cover a binary without them; without rows, say what is lost") {
  const TargetFacts t = facts(Runtime::Native);
  Check covered = frame_pointer_check("exe", no_fp_file(190, 200), t);
  CHECK(covered.status == Verdict::Ok);
  CHECK(covered.name == "exe_frame_pointers");
  CHECK(has(covered.detail, "frame pointers no"));
  CHECK(has(covered.detail, "rows for 190 of 200 sampled functions"));
  CHECK(has(covered.detail, "default --unwind dwarf"));
  CHECK(has(covered.detail, "no rebuild needed"));
  CHECK_FALSE(has(covered.detail + covered.fix, "-fno-omit-frame-pointer"));

  Check bare = frame_pointer_check("exe", no_fp_file(0, 200), t);
  CHECK(bare.status == Verdict::Warn);
  CHECK(has(bare.detail, "rows for 0 of 200"));
  CHECK(has(bare.fix, "[no CFI]"));
  CHECK(has(bare.fix, "up to main and the thread start"));

  Check partial = frame_pointer_check("exe", no_fp_file(100, 200), t);  // under 80%: not covered
  CHECK(partial.status == Verdict::Warn);

  FileFacts fp = no_fp_file(0, 200);
  fp.fp = {100, 95, 3};  // frame pointers: fine either way
  CHECK(frame_pointer_check("exe", fp, t).status == Verdict::Ok);
  FileFacts few = no_fp_file(0, 2);
  few.fp = {2, 0, 0};
  CHECK(frame_pointer_check("exe", few, t).status == Verdict::Skip);

  FileFacts go = no_fp_file(0, 200);  // Go's prologues start with a stack check
  go.fp = {0, 0, 200};
  Check g = frame_pointer_check("exe", go, facts(Runtime::Go));
  CHECK(g.status == Verdict::Ok);
  CHECK(has(g.detail, "Go code keeps frame pointers"));
}

TEST_CASE("symbols: a stripped file names its -dbgsym package and what our symbolizer reads") {
  const TargetFacts t = facts(Runtime::Native);
  FileFacts f = no_fp_file(0, 0);
  f.path = "/usr/sbin/mariadbd";
  f.has_symtab = false;
  f.build_id = "abcd";
  f.dynsym_functions = 120;
  f.dbgsym_hint = "mariadbd is stripped: for function names install mariadb-server-core-dbgsym (...)";
  Check k = symbols_check("exe", f, t);
  CHECK(k.status == Verdict::Warn);
  CHECK(has(k.detail, ".dynsym only: 120 functions"));
  CHECK(has(k.fix, "mariadb-server-core-dbgsym"));
  CHECK(has(k.fix, "/usr/lib/debug/.build-id"));
  CHECK(has(k.fix, "[unknown] (mariadbd+0x...)"));
  f.dbgsym_hint = "";  // its build-id debug file is installed
  CHECK(symbols_check("exe", f, t).status == Verdict::Ok);
  // the java launcher: its own frames are few, HotSpot's come from libjvm.so
  f.dbgsym_hint = "java is stripped: ...";
  f.path = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java";
  Check launcher = symbols_check("exe", f, facts(Runtime::HotSpot));
  CHECK(launcher.status == Verdict::Ok);
  CHECK(has(launcher.detail, "java launcher"));
  FileFacts unreadable;
  unreadable.path = "/x";
  CHECK(symbols_check("exe", unreadable, t).status == Verdict::Skip);
}

TEST_CASE("HotSpot: --jvm-perfmap when the attach mechanism will answer, else why not") {
  TargetFacts t = facts(Runtime::HotSpot);
  t.jvm.version = "17.0.15";
  t.jvm.major = 17;
  t.jvm.nspid = 4242;
  t.jvm.catches_sigquit = true;  // default flags: SIGQUIT starts the listener
  Check k = runtime_check(t);
  CHECK(k.status == Verdict::Warn);  // no perf map yet
  CHECK(k.commands == kJvm);
  CHECK(has(k.detail, "JDK 17.0.15"));
  CHECK(has(k.detail, "it handles SIGQUIT"));
  CHECK(has(k.detail, "-XX:+PreserveFramePointer"));
  CHECK(has(k.fix, "--jvm-perfmap"));

  t.perf_map = map_with(681, 0);  // written: used, and --jvm-perfmap refreshes it
  k = runtime_check(t);
  CHECK(k.status == Verdict::Ok);
  CHECK(k.commands == kJvm);
  CHECK(has(k.detail, "/tmp/perf-4242.map (681 entries, written 3 s ago)"));
  CHECK(has(k.detail, "our tools read it"));

  t.perf_map = {};
  t.jvm.catches_sigquit = false;  // -Xrs: the listener started with the JVM
  t.jvm.attach_socket = true;
  k = runtime_check(t);
  CHECK(k.commands == kJvm);
  CHECK(has(k.detail, "attach listener is up (/tmp/.java_pid4242)"));
  CHECK(has(k.detail, "no signal sent"));
  CHECK(has(k.detail, "-Xrs"));

  t.jvm.attach_socket = false;  // no handler, no listener: not signalled
  k = runtime_check(t);
  CHECK(k.status == Verdict::Warn);
  CHECK(k.commands == kPlain);
  CHECK(has(k.fix, "-XX:+StartAttachListener"));
  CHECK(has(k.fix, "SIGQUIT would end it"));

  t.jvm.catches_sigquit = true;
  t.jvm.attach_disabled = true;
  k = runtime_check(t);
  CHECK(k.commands == kPlain);
  CHECK(has(k.fix, "-XX:+DisableAttachMechanism"));

  t.jvm.attach_disabled = false;
  t.jvm.major = 11;
  t.jvm.version = "11.0.22";
  k = runtime_check(t);
  CHECK(k.commands == kPlain);
  CHECK(has(k.fix, "JDK 17+"));

  t.jvm.major = 0;
  t.jvm.version = "";
  t.jvm.preserve_fp = true;
  k = runtime_check(t);
  CHECK(k.commands == kJvm);
  CHECK(has(k.detail, "JDK version unknown"));
  CHECK_FALSE(has(k.detail, "PreserveFramePointer"));
}

TEST_CASE("CPython: interpreter frames before 3.12; -X perf from 3.12; a perf map in use") {
  TargetFacts t = facts(Runtime::CPython);
  t.exe = "/usr/bin/python3.11";
  set_python_version(t.python, 0x030b02f0);
  t.python.version_from = "Py_Version in /usr/bin/python3.11";
  Check k = runtime_check(t);
  CHECK(k.status == Verdict::Warn);
  CHECK(k.commands == kPlain);
  CHECK(has(k.detail, "CPython 3.11.2"));
  CHECK(has(k.detail, "_PyEval_EvalFrameDefault"));
  CHECK(has(k.fix, "3.12+"));
  CHECK_FALSE(has(k.detail + k.fix, "-fno-omit-frame-pointer"));

  t.exe = "/usr/bin/python3.12";
  set_python_version(t.python, 0x030c01f0);
  t.python.version_from = "Py_Version in /usr/lib/libpython3.12.so.1.0";
  t.python.perf_trampoline = true;
  k = runtime_check(t);
  CHECK(k.status == Verdict::Warn);
  CHECK(has(k.detail, "CPython 3.12.1"));
  CHECK(has(k.fix, "`python3.12 -X perf ...`"));
  CHECK(has(k.fix, "PYTHONPERFSUPPORT=1"));
  CHECK(has(k.fix, "innermost Python function"));  // the trampoline's limit, without frame pointers

  t.python.perf_trampoline = false;
  k = runtime_check(t);
  CHECK(has(k.detail, "built without perf support"));

  t.python.perf_trampoline = true;
  t.python.interpreter_fp = true;
  t.perf_map = map_with(178, 170);
  k = runtime_check(t);
  CHECK(k.status == Verdict::Ok);
  CHECK(k.commands == kPlain);
  CHECK(has(k.detail, "170 of them Python functions"));
  CHECK_FALSE(has(k.detail, "innermost"));

  TargetFacts named = facts(Runtime::CPython);  // the version from a name has no micro
  named.python.major = 3;
  named.python.minor = 10;
  named.python.version_from = "the name libpython3.10.so.1.0";
  CHECK(has(runtime_check(named).detail, "CPython 3.10 (the name libpython3.10.so.1.0)"));
  CHECK(has(runtime_check(facts(Runtime::CPython)).detail, "version unknown"));
}

TEST_CASE("Node.js, Go and an unclassified runtime") {
  TargetFacts n = facts(Runtime::Node);
  Check k = runtime_check(n);
  CHECK(k.status == Verdict::Warn);
  CHECK(k.commands == kPlain);
  CHECK(has(k.fix, "node --perf-basic-prof"));
  n.perf_map = map_with(2356, 0);
  CHECK(runtime_check(n).status == Verdict::Ok);

  TargetFacts g = facts(Runtime::Go);
  g.go_version = "go1.22.1";
  k = runtime_check(g);
  CHECK(k.status == Verdict::Ok);
  CHECK(k.commands == kPlain);
  CHECK(has(k.detail, "Go go1.22.1"));
  CHECK(has(k.detail, "frame pointers"));

  TargetFacts u = facts(Runtime::Unclassified);
  u.anon_exec_mappings = 3;
  k = runtime_check(u);
  CHECK(k.status == Verdict::Warn);
  CHECK(k.commands == kPlain);
  CHECK(has(k.detail, "3 executable mapping(s) of no file"));
  u.perf_map = map_with(10, 0);
  u.perf_map.refused = "owned by uid 1000, not root or the process's user";
  k = runtime_check(u);
  CHECK(k.status == Verdict::Warn);  // a refused map names nothing
  u.perf_map.refused = "";
  CHECK(runtime_check(u).status == Verdict::Ok);
}

TEST_CASE("parsers of a target's bytes") {
  PythonFacts p;
  set_python_version(p, 0x030b02f0);
  CHECK((p.major == 3 && p.minor == 11 && p.micro == 2));
  PythonFacts bad;
  set_python_version(bad, 0xdeadbeefcafe);  // not a PY_VERSION_HEX
  CHECK(bad.major == 0);
  int a = 0, b = 0;
  CHECK(python_version_from_name("libpython3.12.so.1.0", a, b));
  CHECK((a == 3 && b == 12));
  CHECK(python_version_from_name("python3.13d", a, b));
  CHECK((a == 3 && b == 13));
  CHECK_FALSE(python_version_from_name("python3", a, b));
  CHECK_FALSE(python_version_from_name("java", a, b));

  std::string bi = std::string("\xff Go buildinf:", 14) + std::string(1, 8) + std::string(1, 2);
  bi.resize(32, '\0');
  bi += std::string(1, 8) + "go1.22.1" + std::string(16, '\0');
  auto bytes = [](const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); };
  CHECK(go_buildinfo_version(bytes(bi), bi.size()) == "go1.22.1");
  CHECK(go_buildinfo_version(bytes(bi), 36) == "");  // cut: the string runs past the end
  std::string old = bi;
  old[15] = 0;  // before Go 1.18: pointers, not inline strings
  CHECK(go_buildinfo_version(bytes(old), old.size()) == "");
  std::string junk = bi;
  junk[32] = 100;  // a length past the bytes
  CHECK(go_buildinfo_version(bytes(junk), junk.size()) == "");

  int major = 0;
  CHECK(java_release_version("IMPLEMENTOR=\"Debian\"\nJAVA_VERSION=\"17.0.15\"\n", major) == "17.0.15");
  CHECK(major == 17);
  CHECK(java_release_version("JAVA_VERSION=\"1.8.0_402\"\n", major) == "1.8.0_402");
  CHECK(major == 8);
  CHECK(java_release_version("JAVA_RUNTIME_VERSION=\"17\"\n", major) == "");
  CHECK(java_release_version("JAVA_VERSION=\"17\x1b[2J\"\n", major) == "");  // not printed as is
  CHECK(major == 0);
}

TEST_CASE("commands: a \"run:\" line each in text, an array in JSON") {
  Check k = runtime_check(facts(Runtime::Native));
  Config c;
  std::ostringstream text;
  render(text, c, {k}, empty_quality(), 1);
  CHECK(has(text.str(), "\n      run: offcputime -p 4242\n      run: profile -p 4242\n"));
  nlohmann::json j = check_json(k);
  CHECK(j["commands"] == nlohmann::json::array({"offcputime -p 4242", "profile -p 4242"}));
  CHECK(j["pid"] == 4242);
  Check none{"kernel", "btf", Verdict::Ok, true, "found", ""};
  CHECK_FALSE(check_json(none).contains("commands"));
  CHECK(stack_commands(7, " --jvm-perfmap") ==
        std::vector<std::string>{"offcputime -p 7 --jvm-perfmap", "profile -p 7 --jvm-perfmap"});
  CHECK(std::string(runtime_name(Runtime::HotSpot)) == "hotspot");
}
