#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sys/stat.h>
#include <string>

#include "common/symbolize.h"
#include "tests/unit/test_env.h"

using bpfdiag_test::require_env;

// Known symbols of this test binary: a non-static function and data objects.
extern "C" __attribute__((noinline)) int bpfdiag_symtest_function(int x) {
  asm volatile("" ::: "memory");
  return x * 3 + 1;
}
extern "C" {
long bpfdiag_symtest_data[4] = {1, 2, 3, 4};  // .data
long bpfdiag_symtest_bss[16];                 // .bss
}
namespace symtest_ns {
__attribute__((noinline)) int cpp_function(int a) {
  asm volatile("" ::: "memory");
  return a + 7;
}
}  // namespace symtest_ns

using namespace bpfdiag;

TEST_CASE("symbolize: a function of the test binary itself") {
  Symbolizer sym;
  uint32_t pid = static_cast<uint32_t>(getpid());
  CHECK(sym.remember(pid));
  auto addr = reinterpret_cast<uint64_t>(&bpfdiag_symtest_function);
  CHECK(sym.user(pid, addr) == "bpfdiag_symtest_function");
  auto info = sym.lookup_user(pid, addr + 3);
  CHECK(info.found);
  CHECK(info.name == "bpfdiag_symtest_function");
  CHECK(info.offset == 3);
  CHECK(sym.user(pid, addr + 3, true) == "bpfdiag_symtest_function+0x3");
  CHECK(sym.stats().user_unknown == 0);
}

TEST_CASE("symbolize: C++ names are demangled") {
  Symbolizer sym;
  uint32_t pid = static_cast<uint32_t>(getpid());
  auto addr = reinterpret_cast<uint64_t>(&symtest_ns::cpp_function);
  CHECK(sym.user(pid, addr) == "symtest_ns::cpp_function(int)");
  CHECK(demangle("_ZN10symtest_ns12cpp_functionEi") == "symtest_ns::cpp_function(int)");
  CHECK(demangle("main") == "main");
  Symbolizer raw(Symbolizer::Options{false, true});
  CHECK(raw.user(pid, addr) == "_ZN10symtest_ns12cpp_functionEi");
}

TEST_CASE("symbolize: a libc function (dynsym or detached debug symbols)") {
  Symbolizer sym;
  uint32_t pid = static_cast<uint32_t>(getpid());
  auto addr = reinterpret_cast<uint64_t>(&::getpid);
  auto s = sym.lookup_user(pid, addr);
  REQUIRE(s.found);
  // glibc exports getpid as getpid / __getpid (same address)
  CHECK(s.name.find("getpid") != std::string::npos);
  CHECK(s.module.find("libc") != std::string::npos);
}

TEST_CASE("symbolize: data symbols with offsets (.data and .bss, PIE bias)") {
  Symbolizer sym;
  uint32_t pid = static_cast<uint32_t>(getpid());
  CHECK(sym.data(pid, reinterpret_cast<uint64_t>(&bpfdiag_symtest_data[0])) == "bpfdiag_symtest_data");
  CHECK(sym.data(pid, reinterpret_cast<uint64_t>(&bpfdiag_symtest_data[1])) == "bpfdiag_symtest_data+8");
  CHECK(sym.data(pid, reinterpret_cast<uint64_t>(&bpfdiag_symtest_bss[15])) == "bpfdiag_symtest_bss+120");
  auto d = sym.lookup_data(pid, reinterpret_cast<uint64_t>(&bpfdiag_symtest_bss[2]));
  CHECK(d.found);
  CHECK(d.offset == 16);
}

TEST_CASE("symbolize: unknown addresses") {
  Symbolizer sym;
  uint32_t pid = static_cast<uint32_t>(getpid());
  CHECK(sym.user(pid, 0x10) == "[unknown]");
  CHECK(sym.stats().user_unknown == 1);
  // a heap address lies in an anonymous mapping: no module
  long* heap = new long[1024];
  CHECK(sym.data(pid, reinterpret_cast<uint64_t>(heap)).rfind("[unknown]", 0) == 0);
  delete[] heap;
  SymbolInfo s;
  s.module = "/usr/lib/x86_64-linux-gnu/libfoo.so";
  s.module_offset = 0x1a2b;
  CHECK(format_symbol(s, false) == "[unknown] (libfoo.so+0x1a2b)");
}

TEST_CASE("symbolize: symbols stay resolvable after the process exits") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    char c;
    close(fds[1]);
    (void)!read(fds[0], &c, 1);
    _exit(0);
  }
  close(fds[0]);
  Symbolizer sym;
  CHECK(sym.remember(static_cast<uint32_t>(child)));
  close(fds[1]);  // child exits
  int status;
  waitpid(child, &status, 0);
  // Same binary, same (inherited) layout: the child's address of our function.
  auto addr = reinterpret_cast<uint64_t>(&bpfdiag_symtest_function);
  CHECK(sym.user(static_cast<uint32_t>(child), addr) == "bpfdiag_symtest_function");
  Symbolizer late;
  CHECK_FALSE(late.remember(static_cast<uint32_t>(child)));
  CHECK(late.user(static_cast<uint32_t>(child), addr) == "[unknown]");
}

TEST_CASE("symbolize: JIT symbols from /tmp/perf-PID.map") {
  // A fake JIT region: an anonymous executable-looking address described by the map.
  uint32_t pid = static_cast<uint32_t>(getpid());
  std::string path = "/tmp/perf-" + std::to_string(pid) + ".map";
  long* region = new long[64];
  auto base = reinterpret_cast<uint64_t>(region);
  {
    std::ofstream f(path);
    char line[128];
    std::snprintf(line, sizeof line, "%lx 40 jitted_function_one\n%lx 40 LazyCompile:*foo bar.js:1\n",
                  static_cast<unsigned long>(base), static_cast<unsigned long>(base + 0x40));
    f << line;
  }
  Symbolizer sym;
  CHECK(sym.user(pid, base + 4) == "jitted_function_one");
  CHECK(sym.user(pid, base + 0x41) == "LazyCompile:*foo bar.js:1");
  unlink(path.c_str());
  delete[] region;
}

TEST_CASE("symbolize: kernel symbols from kallsyms") {
  Symbolizer sym;
  if (!require_env(sym.kernel_symbols_available(), "kallsyms addresses not readable (not root or kptr_restrict)")) return;
  // find "schedule" in kallsyms ourselves
  std::ifstream f("/proc/kallsyms");
  std::string line;
  uint64_t addr = 0;
  while (std::getline(f, line)) {
    char name[256];
    unsigned long long a;
    char t;
    if (std::sscanf(line.c_str(), "%llx %c %255s", &a, &t, name) == 3 && std::strcmp(name, "schedule") == 0) {
      addr = a;
      break;
    }
  }
  REQUIRE(addr != 0);
  CHECK(sym.kernel(addr) == "schedule");
  CHECK(sym.kernel(addr + 5) == "schedule");
  CHECK(sym.kernel(addr + 5, true) == "schedule+0x5");
  CHECK(sym.lookup_kernel(addr).module == "[kernel]");
  CHECK(sym.kernel(0x1234) == "[unknown]");
  CHECK(sym.stats().kernel_unknown == 1);
}

namespace {
// A child that waits on a pipe until told to exit.
struct Child {
  pid_t pid = -1;
  int fd = -1;
  Child() {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // close every inherited fd but our read end (other children's write ends too,
      // or they would never see EOF)
      for (int f = 3; f < 1024; ++f)
        if (f != fds[0]) close(f);
      char c;
      (void)!read(fds[0], &c, 1);
      _exit(0);
    }
    close(fds[0]);
    fd = fds[1];
  }
  void exit_and_reap() {
    close(fd);
    int status;
    waitpid(pid, &status, 0);
  }
};
}  // namespace

TEST_CASE("symbolize: forget_exited drops exited processes, keeps live and kept ones") {
  Symbolizer sym;
  uint32_t self = static_cast<uint32_t>(getpid());
  CHECK(sym.remember(self));
  size_t tables = sym.symbol_tables_count();
  CHECK(tables > 0);
  Child a, b;
  CHECK(sym.remember(static_cast<uint32_t>(a.pid)));
  CHECK(sym.remember(static_cast<uint32_t>(b.pid)));
  // the children map the same files: their symbol tables are shared, not copied
  CHECK(sym.symbol_tables_count() == tables);
  CHECK(sym.remembered_count() == 3);
  CHECK(sym.forget_exited() == 0);  // all alive
  a.exit_and_reap();
  b.exit_and_reap();
  // b's stacks are still to be printed: kept
  CHECK(sym.forget_exited([&](uint32_t pid) { return pid == static_cast<uint32_t>(b.pid); }) == 1);
  CHECK_FALSE(sym.remembered(static_cast<uint32_t>(a.pid)));
  CHECK(sym.remembered(static_cast<uint32_t>(b.pid)));
  auto addr = reinterpret_cast<uint64_t>(&bpfdiag_symtest_function);
  CHECK(sym.user(static_cast<uint32_t>(b.pid), addr) == "bpfdiag_symtest_function");
  CHECK(sym.forget_exited() == 1);
  CHECK(sym.remembered_count() == 1);
  CHECK(sym.remembered(self));
  CHECK(sym.stats().pids_forgotten == 2);
  CHECK(sym.user(self, addr) == "bpfdiag_symtest_function");
}

TEST_CASE("symbolize: forgetting keeps memory bounded over many short-lived processes") {
  Symbolizer sym;
  uint32_t self = static_cast<uint32_t>(getpid());
  sym.remember(self);
  size_t tables = sym.symbol_tables_count();
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 20; ++i) {
      Child c;
      sym.remember(static_cast<uint32_t>(c.pid));
      c.exit_and_reap();
    }
    sym.forget_exited();
    CHECK(sym.remembered_count() == 1);
    CHECK(sym.symbol_tables_count() == tables);
  }
}

TEST_CASE("symbolize: forget_exited_every asks what is needed only when someone exited") {
  Symbolizer sym;
  sym.remember(static_cast<uint32_t>(getpid()));
  int asked = 0;
  auto needed = [&] {
    ++asked;
    return std::set<uint32_t>{};
  };
  CHECK(sym.forget_exited_every(0, needed) == 0);
  CHECK(asked == 0);  // nobody exited
  Child c;
  sym.remember(static_cast<uint32_t>(c.pid));
  c.exit_and_reap();
  CHECK(sym.forget_exited_every(3600ULL * 1000000000ULL, needed) == 0);  // rate-limited
  CHECK(asked == 0);
  CHECK(sym.forget_exited_every(0, [&] {
    ++asked;
    return std::set<uint32_t>{static_cast<uint32_t>(c.pid)};
  }) == 0);  // still needed
  CHECK(asked == 1);
  CHECK(sym.forget_exited_every(0, needed) == 1);
  CHECK(asked == 2);
}

TEST_CASE("symbolize: hostile perf maps are refused without blocking or reading") {
  uint32_t pid = static_cast<uint32_t>(getpid());
  std::string path = "/tmp/perf-" + std::to_string(pid) + ".map";
  long* region = new long[64];
  auto base = reinterpret_cast<uint64_t>(region);
  unlink(path.c_str());
  // a FIFO: an open() for reading would block forever
  REQUIRE(mkfifo(path.c_str(), 0644) == 0);
  {
    Symbolizer sym;
    CHECK(sym.user(pid, base).rfind("[unknown]", 0) == 0);  // returns: the FIFO was never opened
  }
  unlink(path.c_str());
  // a symlink to /dev/zero: endless data
  REQUIRE(symlink("/dev/zero", path.c_str()) == 0);
  {
    Symbolizer sym;
    CHECK(sym.user(pid, base).rfind("[unknown]", 0) == 0);
  }
  unlink(path.c_str());
  if (geteuid() == 0) {
    // a map planted by another user for our (root) process
    {
      std::ofstream f(path);
      char line[64];
      std::snprintf(line, sizeof line, "%lx 40 planted\n", static_cast<unsigned long>(base));
      f << line;
    }
    REQUIRE(chown(path.c_str(), 65534, 65534) == 0);
    Symbolizer sym;
    CHECK(sym.user(pid, base + 4) != "planted");
    unlink(path.c_str());
  }
  delete[] region;
}
