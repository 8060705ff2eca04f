#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/elf_file.h"
#include "common/untrusted_file.h"
#include "tests/unit/test_env.h"

using bpfdiag_test::require_env;

using namespace bpfdiag;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/untrusted-test-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string operator/(const std::string& n) const { return path + "/" + n; }
};

void write_file(const std::string& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Captures what `fn` writes to stderr (fd 2).
template <class F>
std::string capture_stderr(F fn) {
  std::fflush(stderr);
  char t[] = "/tmp/untrusted-err-XXXXXX";
  int fd = mkstemp(t);
  int saved = dup(2);
  dup2(fd, 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string out;
  char buf[4096];
  ssize_t n;
  lseek(fd, 0, SEEK_SET);
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  unlink(t);
  return out;
}

}  // namespace

TEST_CASE("untrusted: a regular file opens, read-only, at its identity") {
  TempDir d;
  write_file(d / "ok", "hello\n");
  auto r = open_untrusted(d / "ok", {});
  REQUIRE(r.file.get() != nullptr);
  CHECK(r.refused.empty());
  CHECK(r.file->size() == 6);
  int fl = fcntl(r.file->fd(), F_GETFL);
  CHECK((fl & O_ACCMODE) == O_RDONLY);
  CHECK((fl & O_NONBLOCK) != 0);
  CHECK((fcntl(r.file->fd(), F_GETFD) & FD_CLOEXEC) != 0);
  struct stat st {};
  REQUIRE(stat((d / "ok").c_str(), &st) == 0);
  CHECK(r.file->ino() == st.st_ino);
  // the fd path reaches the same inode
  struct stat st2 {};
  REQUIRE(stat(r.file->fd_path().c_str(), &st2) == 0);
  CHECK(st2.st_ino == st.st_ino);
}

TEST_CASE("untrusted: a FIFO is refused at once, never opened for reading") {
  TempDir d;
  REQUIRE(mkfifo((d / "fifo").c_str(), 0644) == 0);
  auto t0 = std::chrono::steady_clock::now();
  auto r = open_untrusted(d / "fifo", {});
  CHECK(seconds_since(t0) < 1.0);
  CHECK_FALSE(r.file.get() != nullptr);
  CHECK(r.refused == "not a regular file (a FIFO)");
  auto r2 = open_in_proc_root(static_cast<uint32_t>(getpid()), d / "fifo", {});
  CHECK_FALSE(r2.file.get() != nullptr);
  CHECK(r2.refused == "not a regular file (a FIFO)");
}

TEST_CASE("untrusted: symlinks are refused (last component or in the path)") {
  TempDir d;
  write_file(d / "target", "x\n");
  REQUIRE(symlink("/dev/zero", (d / "zero").c_str()) == 0);
  REQUIRE(symlink((d / "target").c_str(), (d / "link").c_str()) == 0);
  REQUIRE(mkdir((d / "real").c_str(), 0755) == 0);
  write_file(d / "real/f", "y\n");
  REQUIRE(symlink((d / "real").c_str(), (d / "dirlink").c_str()) == 0);

  auto z = open_untrusted(d / "zero", {});
  CHECK_FALSE(z.file.get() != nullptr);
  CHECK(z.refused == "is a symbolic link");
  auto l = open_untrusted(d / "link", {});
  CHECK_FALSE(l.file.get() != nullptr);
  CHECK(l.refused == "is a symbolic link");
  auto dl = open_untrusted(d / "dirlink/f", {});
  CHECK_FALSE(dl.file.get() != nullptr);
  CHECK(dl.refused == "symbolic link in path");
  auto pr = open_in_proc_root(static_cast<uint32_t>(getpid()), d / "zero", {});
  CHECK_FALSE(pr.file.get() != nullptr);
  CHECK_FALSE(pr.refused.empty());
  // callers that name the file themselves may follow links; the type is still checked
  UntrustedPolicy follow;
  follow.follow_links = true;
  CHECK(open_untrusted(d / "link", follow).file.get() != nullptr);
  auto zf = open_untrusted(d / "zero", follow);
  CHECK_FALSE(zf.file.get() != nullptr);
  CHECK(zf.refused == "not a regular file (a device)");
}

TEST_CASE("untrusted: directories and devices are refused") {
  TempDir d;
  auto dir = open_untrusted(d.path, {});
  CHECK_FALSE(dir.file.get() != nullptr);
  CHECK(dir.refused == "not a regular file (a directory)");
  auto dev = open_untrusted("/dev/zero", {});
  CHECK_FALSE(dev.file.get() != nullptr);
  CHECK(dev.refused == "not a regular file (a device)");
}

TEST_CASE("untrusted: files over the size cap are refused") {
  TempDir d;
  int fd = open((d / "big").c_str(), O_CREAT | O_WRONLY, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, static_cast<off_t>(kMaxPerfMapSize + 1)) == 0);  // sparse
  close(fd);
  UntrustedPolicy pol;
  pol.max_size = kMaxPerfMapSize;
  auto r = open_untrusted(d / "big", pol);
  CHECK_FALSE(r.file.get() != nullptr);
  CHECK(r.refused == "larger than 64 MiB");
  CHECK(open_untrusted(d / "big", {}).file.get() != nullptr);  // under the ELF cap
}

TEST_CASE("untrusted: owner rule (root or the process's uid)") {
  TempDir d;
  write_file(d / "map", "1000 10 f\n");
  struct stat st {};
  REQUIRE(stat((d / "map").c_str(), &st) == 0);
  UntrustedPolicy pol;
  pol.owner = st.st_uid;
  CHECK(open_untrusted(d / "map", pol).file.get() != nullptr);
  if (!require_env(geteuid() == 0, "not root: cannot chown for the wrong-owner case")) return;
  REQUIRE(chown((d / "map").c_str(), 65534, 65534) == 0);
  pol.owner = 1000;  // neither root nor the file's owner
  auto r = open_untrusted(d / "map", pol);
  CHECK_FALSE(r.file.get() != nullptr);
  CHECK(r.refused == "owned by uid 65534, not by root or the process owner (uid 1000)");
  pol.owner = 65534;
  CHECK(open_untrusted(d / "map", pol).file.get() != nullptr);
  REQUIRE(chown((d / "map").c_str(), 0, 0) == 0);
  pol.owner = 1000;
  CHECK(open_untrusted(d / "map", pol).file.get() != nullptr);  // root's files are accepted
}

TEST_CASE("untrusted: missing files are silent failures, not refusals") {
  auto r = open_untrusted("/nonexistent/perf-1.map", {});
  CHECK_FALSE(r.file.get() != nullptr);
  CHECK(r.refused.empty());
  CHECK(r.err == ENOENT);
  auto g = open_in_proc_root(4194304, "/tmp/x", {});
  CHECK_FALSE(g.file.get() != nullptr);
  CHECK(g.refused.empty());
}

TEST_CASE("untrusted: open_in_proc_root stays inside the process's root") {
  TempDir d;
  write_file(d / "f", "z\n");
  uint32_t self = static_cast<uint32_t>(getpid());
  CHECK(open_in_proc_root(self, d / "f", {}).file.get() != nullptr);
  CHECK_FALSE(open_in_proc_root(self, "relative/path", {}).file.get() != nullptr);
}

TEST_CASE("untrusted: capped line reader") {
  TempDir d;
  std::string long_line(5000, 'x');
  write_file(d / "lines", "a 1 one\n" + long_line + "\nb 2 two\nlast");
  auto r = open_untrusted(d / "lines", {});
  REQUIRE(r.file.get() != nullptr);
  std::vector<std::string> got;
  size_t skipped = read_capped_lines(*r.file, 1 << 20, 4096, [&](std::string_view l) { got.emplace_back(l); });
  CHECK(skipped == 1);
  REQUIRE(got.size() == 3);
  CHECK(got[0] == "a 1 one");
  CHECK(got[1] == "b 2 two");
  CHECK(got[2] == "last");
  // the byte cap: only the first 10 bytes ("a 1 one\n" and "xx") are read
  got.clear();
  read_capped_lines(*r.file, 10, 4096, [&](std::string_view l) { got.emplace_back(l); });
  REQUIRE(got.size() == 2);
  CHECK(got[1] == "xx");
}

TEST_CASE("untrusted: one warning line per refused path") {
  std::string err = capture_stderr([] {
    CHECK(warn_refused("/tmp/perf-424242.map", "not a regular file (a FIFO)"));
    CHECK_FALSE(warn_refused("/tmp/perf-424242.map", "not a regular file (a FIFO)"));
  });
  std::string want = std::string(program_invocation_short_name) +
                     ": warning: ignoring /tmp/perf-424242.map: not a regular file (a FIFO)\n";
  CHECK(err == want);
}

TEST_CASE("elf_file: reads this test binary, not a FIFO or a text file") {
  auto r = open_untrusted("/proc/self/exe", UntrustedPolicy{kMaxElfSize, true, std::nullopt});
  REQUIRE(r.file.get() != nullptr);
  auto e = ElfFile::open(r.file);
  REQUIRE(e.get() != nullptr);
  CHECK_FALSE(e->load_segments().empty());
  bool found = false;
  e->for_each_symbol([&](const ElfSymbolEntry& s) { found = found || s.name == "main"; });
  CHECK(found);
  std::vector<uint8_t> magic;
  REQUIRE(e->read(0, 4, magic));
  CHECK(magic[1] == 'E');
  CHECK_FALSE(e->read(r.file->size() - 2, 4, magic));  // past the end
  TempDir d;
  write_file(d / "text", "not elf\n");
  CHECK(ElfFile::open(open_untrusted(d / "text", {}).file).get() == nullptr);
  CHECK(ElfFile::open(nullptr).get() == nullptr);
}
