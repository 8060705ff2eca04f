#include <doctest/doctest.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/elf_file.h"
#include "common/untrusted_file.h"
#include "tests/unit/test_env.h"
#include "tests/unit/stopwatch.h"
#include "tests/unit/temp_dir.h"

using bpfdiag_test::require_env;

using namespace bpfdiag;

namespace {

using bpfdiag_test::TempDir;

void write_file(const std::string& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
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
  TempDir d("untrusted-test");
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
  TempDir d("untrusted-test");
  REQUIRE(mkfifo((d / "fifo").c_str(), 0644) == 0);
  bpfdiag_test::Stopwatch sw;
  auto r = open_untrusted(d / "fifo", {});
  CHECK(sw.seconds() < 1.0);
  CHECK_FALSE(r.file.get() != nullptr);
  CHECK(r.refused == "not a regular file (a FIFO)");
  auto r2 = open_in_proc_root(static_cast<uint32_t>(getpid()), d / "fifo", {});
  CHECK_FALSE(r2.file.get() != nullptr);
  CHECK(r2.refused == "not a regular file (a FIFO)");
}

TEST_CASE("untrusted: symlinks are refused (last component or in the path)") {
  TempDir d("untrusted-test");
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
  TempDir d("untrusted-test");
  auto dir = open_untrusted(d.path, {});
  CHECK_FALSE(dir.file.get() != nullptr);
  CHECK(dir.refused == "not a regular file (a directory)");
  auto dev = open_untrusted("/dev/zero", {});
  CHECK_FALSE(dev.file.get() != nullptr);
  CHECK(dev.refused == "not a regular file (a device)");
}

TEST_CASE("untrusted: files over the size cap are refused") {
  TempDir d("untrusted-test");
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
  TempDir d("untrusted-test");
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
  TempDir d("untrusted-test");
  write_file(d / "f", "z\n");
  uint32_t self = static_cast<uint32_t>(getpid());
  CHECK(open_in_proc_root(self, d / "f", {}).file.get() != nullptr);
  CHECK_FALSE(open_in_proc_root(self, "relative/path", {}).file.get() != nullptr);
}

TEST_CASE("untrusted: capped line reader") {
  TempDir d("untrusted-test");
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
  TempDir d("untrusted-test");
  write_file(d / "text", "not elf\n");
  CHECK(ElfFile::open(open_untrusted(d / "text", {}).file).get() == nullptr);
  CHECK(ElfFile::open(nullptr).get() == nullptr);
}

// --- ELF header caps (issue 19 item 4) --------------------------------------------------
namespace {

// An ELF header (64- or 32-bit, little-endian) with the given header-table fields,
// then `extra` bytes of data; the file is truncated (holes) to `size` when larger.
struct ElfSpec {
  bool is64 = true;
  uint64_t phoff = 0, shoff = 0;
  uint16_t phnum = 0, shnum = 0, shstrndx = 0;
  uint16_t phentsize = 0, shentsize = 0;  // 0: the class's size
  uint64_t size = 0;
  // section 0 (at shoff) for extended numbering
  uint64_t s0_size = 0;
  uint32_t s0_link = 0, s0_info = 0;
  bool write_s0 = false;
};

void write_elf(const std::string& path, const ElfSpec& s) {
  std::string img;
  if (s.is64) {
    Elf64_Ehdr e{};
    std::memcpy(e.e_ident, ELFMAG, SELFMAG);
    e.e_ident[EI_CLASS] = ELFCLASS64, e.e_ident[EI_DATA] = ELFDATA2LSB, e.e_ident[EI_VERSION] = EV_CURRENT;
    e.e_type = ET_DYN, e.e_machine = EM_X86_64, e.e_version = EV_CURRENT, e.e_ehsize = sizeof e;
    e.e_phoff = s.phoff, e.e_shoff = s.shoff, e.e_phnum = s.phnum, e.e_shnum = s.shnum, e.e_shstrndx = s.shstrndx;
    e.e_phentsize = s.phentsize ? s.phentsize : sizeof(Elf64_Phdr);
    e.e_shentsize = s.shentsize ? s.shentsize : sizeof(Elf64_Shdr);
    img.assign(reinterpret_cast<const char*>(&e), sizeof e);
  } else {
    Elf32_Ehdr e{};
    std::memcpy(e.e_ident, ELFMAG, SELFMAG);
    e.e_ident[EI_CLASS] = ELFCLASS32, e.e_ident[EI_DATA] = ELFDATA2LSB, e.e_ident[EI_VERSION] = EV_CURRENT;
    e.e_type = ET_DYN, e.e_machine = EM_386, e.e_version = EV_CURRENT, e.e_ehsize = sizeof e;
    e.e_phoff = uint32_t(s.phoff), e.e_shoff = uint32_t(s.shoff), e.e_phnum = s.phnum, e.e_shnum = s.shnum;
    e.e_shstrndx = s.shstrndx;
    e.e_phentsize = s.phentsize ? s.phentsize : sizeof(Elf32_Phdr);
    e.e_shentsize = s.shentsize ? s.shentsize : sizeof(Elf32_Shdr);
    img.assign(reinterpret_cast<const char*>(&e), sizeof e);
  }
  if (s.write_s0) {
    img.resize(std::max<size_t>(img.size(), s.shoff), '\0');
    if (s.is64) {
      Elf64_Shdr s0{};
      s0.sh_size = s.s0_size, s0.sh_link = s.s0_link, s0.sh_info = s.s0_info;
      img.append(reinterpret_cast<const char*>(&s0), sizeof s0);
    } else {
      Elf32_Shdr s0{};
      s0.sh_size = uint32_t(s.s0_size), s0.sh_link = s.s0_link, s0.sh_info = s.s0_info;
      img.append(reinterpret_cast<const char*>(&s0), sizeof s0);
    }
  }
  write_file(path, img);
  if (s.size > img.size()) REQUIRE(truncate(path.c_str(), off_t(s.size)) == 0);
}

ElfHeaderCheck check_path(const std::string& p) {
  auto r = open_untrusted(p, {});
  REQUIRE(r.file.get() != nullptr);
  return check_elf_headers(*r.file);
}

}  // namespace

TEST_CASE("elf_file: extended numbering claiming 16M section headers is refused before libelf") {
  TempDir d("untrusted-test");
  // the file: e_shnum 0, section 0 says 16.7M headers, 1 GiB - 4 KiB apparent
  ElfSpec s;
  s.shoff = 4096, s.write_s0 = true, s.s0_size = ((1ULL << 30) - 8192) / 64, s.shstrndx = SHN_XINDEX;
  s.size = 4096 + s.s0_size * 64;
  write_elf(d / "sparse", s);
  struct stat st {};
  REQUIRE(stat((d / "sparse").c_str(), &st) == 0);
  CHECK(uint64_t(st.st_blocks) * 512 <= 64 * 1024);  // really sparse here
  auto c = check_path(d / "sparse");
  CHECK_FALSE(c.info.has_value());
  CHECK(c.refused == std::to_string(s.s0_size) + " section headers (more than 65536)");

  uint64_t before = elf_files_refused();
  bpfdiag_test::Stopwatch sw;
  std::string err = capture_stderr([&] {
    auto r = open_untrusted(d / "sparse", {});
    CHECK(ElfFile::open(r.file).get() == nullptr);
    CHECK(ElfFile::open(open_untrusted(d / "sparse", {}).file).get() == nullptr);  // same file: no 2nd line
  });
  CHECK(sw.seconds() < 2.0);  // libelf allocated per header: 23 s, 4.3 GB
  CHECK(elf_files_refused() == before + 1);
  CHECK(err == std::string(program_invocation_short_name) + ": warning: ignoring " + (d / "sparse") + ": " +
                   c.refused + "\n");

  // 32-bit: the same through Elf32 headers
  s.is64 = false, s.s0_size = 1000000, s.size = 4096 + 40 * 1000000ULL;
  write_elf(d / "sparse32", s);
  c = check_path(d / "sparse32");
  CHECK(c.refused == "1000000 section headers (more than 65536)");
}

TEST_CASE("elf_file: extended numbering resolved from section 0 (shstrndx, phnum)") {
  TempDir d("untrusted-test");
  ElfSpec s;
  s.shoff = 64, s.write_s0 = true, s.s0_size = 3, s.s0_link = 2, s.shstrndx = SHN_XINDEX;
  s.size = 64 + 3 * 64;
  write_elf(d / "ok", s);
  auto c = check_path(d / "ok");
  REQUIRE(c.info.has_value());
  CHECK(c.info->shnum == 3);
  CHECK(c.info->shstrndx == 2);

  s.shnum = 3, s.shstrndx = 1, s.phnum = PN_XNUM, s.s0_info = 100000, s.phoff = 64;
  s.size = 64 + 100000ULL * 56;
  write_elf(d / "phx", s);
  c = check_path(d / "phx");
  CHECK(c.refused == "100000 program headers (more than 4096)");
  // PN_XNUM without section headers to say the count
  ElfSpec n;
  n.phnum = PN_XNUM, n.phoff = 64, n.size = 4096;
  write_elf(d / "phnosh", n);
  CHECK(check_path(d / "phnosh").refused == "extended numbering without section headers");
}

TEST_CASE("elf_file: header tables outside the file, of the wrong entry size, or in holes are refused") {
  TempDir d("untrusted-test");
  ElfSpec s;
  s.shoff = 4096, s.shnum = 100, s.size = 8192;  // 6400 bytes of headers from 4096
  write_elf(d / "outside", s);
  CHECK(check_path(d / "outside").refused == "section headers outside the file");
  s = ElfSpec{};
  s.shoff = 64, s.shnum = 2, s.shentsize = 32, s.size = 4096;
  write_elf(d / "entsize", s);
  CHECK(check_path(d / "entsize").refused == "section header entries of 32 bytes, not 64");
  s = ElfSpec{};
  s.phoff = 64, s.phnum = 2, s.phentsize = 40, s.size = 4096;
  write_elf(d / "phentsize", s);
  CHECK(check_path(d / "phentsize").refused == "program header entries of 40 bytes, not 56");
  s = ElfSpec{};
  s.phoff = 1ULL << 40, s.phnum = 1, s.size = 4096;
  write_elf(d / "phfar", s);
  CHECK(check_path(d / "phfar").refused == "program headers outside the file");
  // 64 section headers at 256 KiB of a 512 KiB file that holds 64 bytes: a hole
  s = ElfSpec{};
  s.shoff = 256 * 1024, s.shnum = 64, s.size = 512 * 1024;
  write_elf(d / "hole", s);
  CHECK(check_path(d / "hole").refused == "header table in a hole of a sparse file");
  // within the caps, but 64 MiB of which 4 KiB are allocated
  s = ElfSpec{};
  s.size = 64ULL << 20;
  write_elf(d / "sparse", s);
  CHECK(check_path(d / "sparse").refused.rfind("sparse file (", 0) == 0);
  // not ELF at all: silent
  write_file(d / "text", std::string(100, 'x'));
  auto c = check_path(d / "text");
  CHECK_FALSE(c.info.has_value());
  CHECK(c.refused.empty());
}

TEST_CASE("elf_file: real files pass the header check; .eh_frame_hdr's FDE count") {
  auto r = open_untrusted("/proc/self/exe", UntrustedPolicy{kMaxElfSize, true, std::nullopt});
  REQUIRE(r.file.get() != nullptr);
  auto c = check_elf_headers(*r.file);
  REQUIRE(c.info.has_value());
  CHECK(c.info->shnum > 10);
  CHECK(c.info->phnum > 3);
  auto fdes = elf_eh_frame_hdr_fdes(*r.file);
  REQUIRE(fdes.has_value());
  CHECK(*fdes > 100);  // this test binary: thousands of functions
  for (const char* lib : {"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}) {
    auto l = open_untrusted(lib, UntrustedPolicy{kMaxElfSize, true, std::nullopt});
    REQUIRE(l.file.get() != nullptr);
    CHECK(check_elf_headers(*l.file).info.has_value());
    CHECK(elf_eh_frame_hdr_fdes(*l.file).value_or(0) > 0);
  }
}
