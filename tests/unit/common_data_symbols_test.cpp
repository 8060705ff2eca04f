#include <doctest/doctest.h>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/data_symbols.h"
#include "tests/unit/test_env.h"

using bpfdiag_test::require_env;

// A C++ static (mangled _ZL...) and an extern "C" global, like the locks users name.
static pthread_mutex_t ds_test_static_lock = PTHREAD_MUTEX_INITIALIZER;
extern "C" {
int ds_test_global_counter = 42;
}

TEST_CASE("data_symbols: finds this process's own globals at their runtime address") {
  auto a = bpfdiag::find_user_data_symbol(static_cast<uint32_t>(getpid()), "ds_test_static_lock");
  REQUIRE(a.size() == 1);
  CHECK(a[0] == reinterpret_cast<uint64_t>(&ds_test_static_lock));
  auto b = bpfdiag::find_user_data_symbol(static_cast<uint32_t>(getpid()), "ds_test_global_counter");
  REQUIRE(!b.empty());
  CHECK(std::find(b.begin(), b.end(), reinterpret_cast<uint64_t>(&ds_test_global_counter)) != b.end());
  CHECK(bpfdiag::find_user_data_symbol(static_cast<uint32_t>(getpid()), "no_such_symbol_here").empty());
  CHECK(bpfdiag::find_user_data_symbol(4194304, "ds_test_static_lock").empty());  // no such pid
}

namespace ds_test_ns {
pthread_mutex_t ns_lock = PTHREAD_MUTEX_INITIALIZER;  // _ZN10ds_test_ns7ns_lockE
}

TEST_CASE("data_symbols: namespaced C++ globals match their demangled name; the Symbolizer agrees") {
  uint32_t self = static_cast<uint32_t>(getpid());
  auto a = bpfdiag::find_user_data_symbol(self, "ds_test_ns::ns_lock");
  REQUIRE(a.size() == 1);
  CHECK(a[0] == reinterpret_cast<uint64_t>(&ds_test_ns::ns_lock));
  CHECK(bpfdiag::find_user_data_symbol(self, "ns_lock").empty());  // not a partial match
  bpfdiag::Symbolizer sym;
  CHECK(sym.find_data(self, "ds_test_static_lock") ==
        std::vector<uint64_t>{reinterpret_cast<uint64_t>(&ds_test_static_lock)});
  // the reverse direction resolves the same address to the same name
  CHECK(sym.data(self, reinterpret_cast<uint64_t>(&ds_test_static_lock)) == "ds_test_static_lock");
  CHECK(sym.data(self, reinterpret_cast<uint64_t>(&ds_test_static_lock) + 8) == "ds_test_static_lock+8");
}

TEST_CASE("data_symbols: find_data_symbol_in_file applies the mapping's load bias") {
  // this test binary: its first mapping in /proc/self/maps
  FILE* f = std::fopen("/proc/self/maps", "r");
  REQUIRE(f);
  char line[512];
  uint64_t start = 0, off = 0;
  std::string path;
  char exe[512] = {};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(n > 0);
  while (std::fgets(line, sizeof line, f)) {
    char p[400] = {};
    unsigned long long s, e, o;
    if (std::sscanf(line, "%llx-%llx %*s %llx %*s %*s %399s", &s, &e, &o, p) == 4 &&
        std::string(p) == exe) {
      start = s;
      off = o;
      path = p;
      break;
    }
  }
  std::fclose(f);
  REQUIRE(!path.empty());
  auto a = bpfdiag::find_data_symbol_in_file(path, "ds_test_static_lock", start, off);
  REQUIRE(a.size() == 1);
  CHECK(a[0] == reinterpret_cast<uint64_t>(&ds_test_static_lock));
  CHECK(bpfdiag::find_data_symbol_in_file("/nonexistent", "ds_test_static_lock", start, off).empty());
}

namespace {
// read_kallsyms over a listing written to a temporary file (removed after)
bpfdiag::KernelSymbols kallsyms_of(const std::string& listing) {
  char tmpl[] = "/tmp/ds_kallsymsXXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, listing.data(), listing.size()) == static_cast<ssize_t>(listing.size()));
  close(fd);
  auto k = bpfdiag::read_kallsyms(tmpl);
  unlink(tmpl);
  return k;
}
}  // namespace

TEST_CASE("read_kallsyms: one parser splits text and data, drops hidden addresses") {
  const char text[] =
      "ffffffff81000000 T _stext\n"
      "ffffffff81000000 T _text\n"
      "ffffffff81001000 t helper\n"
      "ffffffff82000000 D jiffies_64\n"
      "ffffffff82000040 b cache_lock\n"
      "ffffffff82000080 r some_table\n"
      "ffffffffc0000000 t mod_fn\t[mymod]\n"
      "ffffffffc0001000 d mod_lock\t[mymod]\n"
      "0000000000000000 D hidden\n"
      "ffffffff83000000 A absolute_sym\n";
  auto k = kallsyms_of(text);
  REQUIRE(k.text.size() == 4);
  CHECK(k.text[0].name == "_stext");  // aliases keep file order
  CHECK(k.text[3].name == "mod_fn");
  CHECK(k.text[3].module == "[mymod]");
  REQUIRE(k.data.size() == 4);
  CHECK(k.data[0].name == "jiffies_64");
  CHECK(k.data[1].name == "cache_lock");
  CHECK(k.data[1].type == 'b');
  CHECK(k.data[3].name == "mod_lock");
  CHECK(k.data[3].module == "[mymod]");
  CHECK(bpfdiag::read_kallsyms("/nonexistent").text.empty());
}

TEST_CASE("read_kallsyms: a listing out of address order is sorted, aliases in file order") {
  auto k = kallsyms_of(
      "ffffffffc0000000 t mod_fn\t[mymod]\n"
      "ffffffff81001000 t helper\n"
      "ffffffff81000000 T _stext\n"
      "ffffffff81000000 T _text\n");
  REQUIRE(k.text.size() == 4);
  CHECK(k.text[0].name == "_stext");
  CHECK(k.text[1].name == "_text");
  CHECK(k.text[2].name == "helper");
  CHECK(k.text[3].name == "mod_fn");
}

TEST_CASE("kernel data symbols: name and address lookups agree with /proc/kallsyms") {
  auto k = bpfdiag::read_kallsyms();
  if (!require_env(!k.data.empty(), "no kernel data symbols visible (not root or kptr_restrict)")) return;
  const auto& d = k.data.back();
  auto a = bpfdiag::find_kernel_data_symbol(d.name);
  CHECK(std::find(a.begin(), a.end(), d.addr) != a.end());
  CHECK(!bpfdiag::kernel_data_symbol_at(d.addr).empty());
  CHECK(bpfdiag::kernel_data_symbol_at(1).empty());
  CHECK(bpfdiag::find_kernel_data_symbol("no_such_kernel_symbol_xyz").empty());
}
