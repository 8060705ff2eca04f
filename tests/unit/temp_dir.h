// A private temporary directory for a unit test case, removed with everything in it
// when the case ends. One definition for every test file (a unity build puts several
// test files in one translation unit).
#pragma once
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace bpfdiag_test {

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "bpfdiag-test") {
    std::string t = "/tmp/" + prefix + "-XXXXXX";
    REQUIRE(mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // path/name
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  // writes path/name with `text` and mode `mode`
  void write(const std::string& name, const std::string& text, mode_t mode = 0644) const {
    std::ofstream(path + "/" + name, std::ios::binary) << text;
    REQUIRE(chmod((path + "/" + name).c_str(), mode) == 0);
  }
};

}  // namespace bpfdiag_test
