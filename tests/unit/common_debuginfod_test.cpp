// common/debuginfod: the cache directory rules and the checks on a downloaded file
// (the lookups themselves run against a real debuginfod server in
// tests/integration/test_debuginfod.py).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/debuginfod.h"
#include "common/elf_file.h"
#include "common/untrusted_file.h"

using namespace bpfdiag;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/debuginfod-test-XXXXXX";
    path = mkdtemp(t);  // 0700, this user's
  }
  ~TempDir() { std::system(("chmod -R u+rwx '" + path + "'; rm -rf '" + path + "'").c_str()); }
  std::string operator/(const std::string& n) const { return path + "/" + n; }
};

mode_t mode_of(const std::string& p) {
  struct stat st {};
  stat(p.c_str(), &st);
  return st.st_mode & 07777;
}

// This test binary's own build-id (the build links with one).
std::string own_build_id() {
  auto r = open_untrusted("/proc/self/exe", UntrustedPolicy{kMaxElfSize, true, std::nullopt});
  auto e = ElfFile::open(r.file);
  return e ? e->build_id() : "";
}

}  // namespace

TEST_CASE("debuginfod cache: created private, parents checked, no links, no shared directories") {
  TempDir t;
  const uid_t me = geteuid();
  // missing: created (with missing parents), mode 0700
  CHECK(check_private_dir(t / "a/b/cache", me, true) == "");
  CHECK(mode_of(t / "a/b/cache") == 0700);
  CHECK(check_private_dir(t / "a/b/cache", me, true) == "");  // and accepted again
  // not created when not asked to
  CHECK(check_private_dir(t / "none", me, false).find("cannot be opened") != std::string::npos);
  // a cache others can read or write
  mkdir((t / "open").c_str(), 0700);
  chmod((t / "open").c_str(), 0777);
  CHECK(check_private_dir(t / "open", me, true) == "has mode 0777, not 0700 (it must be private)");
  chmod((t / "open").c_str(), 0755);
  CHECK(check_private_dir(t / "open", me, true).find("must be private") != std::string::npos);
  // a parent others can write (no sticky bit): whoever can write it can swap the cache
  mkdir((t / "shared").c_str(), 0700);
  chmod((t / "shared").c_str(), 0777);
  CHECK(check_private_dir(t / "shared/cache", me, true) == t / "shared is writable by others");
  // ... with the sticky bit (/tmp): others cannot rename what is ours
  chmod((t / "shared").c_str(), 01777);
  CHECK(check_private_dir(t / "shared/cache", me, true) == "");
  // a symbolic link anywhere on the way, or as the cache
  symlink((t / "a").c_str(), (t / "link").c_str());
  CHECK(check_private_dir(t / "link/b/cache", me, true).find("symbolic link") != std::string::npos);
  CHECK(check_private_dir(t / "link", me, true).find("symbolic link") != std::string::npos);
  // a file, a relative path, ..
  std::ofstream(t / "file") << "x";
  CHECK(check_private_dir(t / "file", me, true).find("not a directory") != std::string::npos);
  CHECK(check_private_dir("relative/cache", me, true) == "is not an absolute path");
  CHECK(check_private_dir(t / "a/../a/b/cache", me, true) == "has a . or .. component");
  // another owner's directory (as root: chown a fresh one)
  if (me == 0) {
    mkdir((t / "theirs").c_str(), 0700);
    CHECK(chown((t / "theirs").c_str(), 12345, 12345) == 0);
    CHECK(check_private_dir(t / "theirs", me, true) == "belongs to uid 12345, not to this user");
    CHECK(check_private_dir(t / "theirs/cache", me, true) == t / "theirs belongs to uid 12345");
  }
}

TEST_CASE("debuginfod file: used only with the build-id asked for, regular, not a link") {
  TempDir t;
  const std::string id = own_build_id();
  REQUIRE(id.size() >= 16);
  const std::string copy = t / "debuginfo";
  char self[4096] = {};
  REQUIRE(readlink("/proc/self/exe", self, sizeof self - 1) > 0);  // (a shell's /proc/self is the shell)
  CHECK(std::system(("cp '" + std::string(self) + "' '" + copy + "'").c_str()) == 0);
  std::string why;
  // the right build-id: accepted
  CHECK_MESSAGE(open_debuginfod_file(DebuginfodOutcome{true, copy, ""}, id, &why) != nullptr, why);
  // another build-id asked for: refused, and the poisoned entry removed
  std::string other = id;
  other[0] = other[0] == '0' ? '1' : '0';
  CHECK(open_debuginfod_file(DebuginfodOutcome{true, copy, ""}, other, &why) == nullptr);
  CHECK(why.find("its build-id is " + id.substr(0, 16) + "..., not the one asked for") != std::string::npos);
  CHECK(access(copy.c_str(), F_OK) != 0);
  // a symbolic link in the cache, a FIFO, not ELF
  symlink("/proc/self/exe", (t / "link").c_str());
  CHECK(open_debuginfod_file(DebuginfodOutcome{true, t / "link", ""}, id, &why) == nullptr);
  CHECK(why.find("symbolic link") != std::string::npos);
  mkfifo((t / "fifo").c_str(), 0600);
  CHECK(open_debuginfod_file(DebuginfodOutcome{true, t / "fifo", ""}, id, &why) == nullptr);
  CHECK(why.find("not a regular file") != std::string::npos);
  std::ofstream(t / "text") << "not ELF";
  CHECK(open_debuginfod_file(DebuginfodOutcome{true, t / "text", ""}, id, &why) == nullptr);
  CHECK(why.find("not an ELF file") != std::string::npos);
  // a lookup that found nothing: its reason
  CHECK(open_debuginfod_file(DebuginfodOutcome{false, "", "not found on the server"}, id, &why) == nullptr);
  CHECK(why == "not found on the server");
}

TEST_CASE("debuginfod: off without DEBUGINFOD_URLS") {
  // the test binary's environment (ctest) has none unless a developer set it
  const char* u = std::getenv("DEBUGINFOD_URLS");
  if (!u || !*u) CHECK(Debuginfod::get() == nullptr);
  CHECK(debuginfod_file_label("/usr/bin/prog", "0123456789abcdef0123") == "prog (build-id 0123456789abcdef...)");
}
