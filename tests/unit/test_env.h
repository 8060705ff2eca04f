// Environment gates for unit tests. A case that cannot run here (not root, no BPF, no
// compiler) says so with a "SKIP:" message; under CI=true, where the environment is
// known to provide these, the same gate is a failure so a broken setup cannot pass.
#pragma once
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace bpfdiag_test {

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::strcmp(ci, "true") == 0;
}

// True when `ok`; otherwise reports the skip (a failure under CI=true) and returns
// false, so a case reads: if (!require_env(geteuid() == 0, "needs root")) return;
inline bool require_env(bool ok, const std::string& reason) {
  if (ok) return true;
  if (in_ci()) {
    FAIL_CHECK("CI=true, yet skipped: " << reason);
  } else {
    MESSAGE("SKIP: " << reason);
  }
  return false;
}

}  // namespace bpfdiag_test
