// Environment gates for unit tests. A case that cannot run here (not root, no BPF, no
// compiler) says so with a "SKIP:" message and is counted: the binary then exits 77,
// which ctest reports as skipped (doctest_main.cpp). Under CI=true, where the
// environment is known to provide these, the same gate is a failure so a broken setup
// cannot pass.
#pragma once
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

namespace bpfdiag_test {

constexpr int kSkipExitCode = 77;  // ctest SKIP_RETURN_CODE of unit_* (CMakeLists.txt)

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::strcmp(ci, "true") == 0;
}

// The running case's name (set by doctest_main.cpp's listener).
inline std::string& current_case() {
  static std::string name;
  return name;
}
// "case: reason" of every skip in this run.
inline std::set<std::string>& skipped_cases() {
  static std::set<std::string> s;
  return s;
}

// True when `ok`; otherwise reports the skip (a failure under CI=true) and returns
// false, so a case reads: if (!require_env(geteuid() == 0, "needs root")) return;
inline bool require_env(bool ok, const std::string& reason) {
  if (ok) return true;
  if (in_ci()) {
    FAIL_CHECK("CI=true, yet skipped: " << reason);
  } else {
    MESSAGE("SKIP: " << reason);
    skipped_cases().insert(current_case() + ": " + reason);
  }
  return false;
}

}  // namespace bpfdiag_test
