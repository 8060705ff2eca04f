#include <doctest/doctest.h>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>

#include "common/data_symbols.h"

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
