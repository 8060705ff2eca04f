// Golden-file checks for doctest unit tests: compare a whole rendered report with
// tests/golden/<name>; UPDATE_GOLDEN=1 in the environment rewrites the file instead
// (review the change in the diff). The source dir comes from the BPFDIAG_SOURCE_DIR
// compile definition CMake gives every unit test binary.
#pragma once
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#ifndef BPFDIAG_SOURCE_DIR
#error "BPFDIAG_SOURCE_DIR must name the source tree (CMakeLists.txt sets it for unit tests)"
#endif

namespace bpfdiag_test {

inline std::string golden_path(const std::string& name) {
  return std::string(BPFDIAG_SOURCE_DIR) + "/tests/golden/" + name;
}

// nullopt when `text` equals the golden file `path`; else what differs: the first
// differing line (1-based) with both versions, or that the file is missing.
inline std::optional<std::string> golden_diff_file(const std::string& path, const std::string& text) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "golden file " + path + " is missing (UPDATE_GOLDEN=1 writes it)";
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string want = ss.str();
  if (want == text) return std::nullopt;
  std::istringstream a(want), b(text);
  std::string la, lb;
  for (int line = 1;; ++line) {
    bool ha = static_cast<bool>(std::getline(a, la)), hb = static_cast<bool>(std::getline(b, lb));
    if (!ha && !hb) break;  // only a trailing newline differs
    if (!ha || !hb || la != lb) {
      return path + ":" + std::to_string(line) + " differs (UPDATE_GOLDEN=1 rewrites it)\n  golden: " +
             (ha ? la : std::string("<end of file>")) + "\n  actual: " + (hb ? lb : std::string("<end of output>"));
    }
  }
  return path + ": differs in the final newline (UPDATE_GOLDEN=1 rewrites it)";
}

// Checks `text` against tests/golden/<name> (or rewrites it under UPDATE_GOLDEN=1).
inline void check_golden(const std::string& name, const std::string& text) {
  const std::string path = golden_path(name);
  const char* upd = std::getenv("UPDATE_GOLDEN");
  if (upd && std::string(upd) == "1") {
    std::ofstream o(path, std::ios::binary | std::ios::trunc);
    o << text;
    CHECK_MESSAGE(static_cast<bool>(o), "cannot write " << path);
    MESSAGE("updated golden file " << path);
    return;
  }
  auto d = golden_diff_file(path, text);
  CHECK_MESSAGE(!d, *d);
}

}  // namespace bpfdiag_test
