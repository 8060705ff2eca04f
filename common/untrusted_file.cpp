#include "common/untrusted_file.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>

namespace bpfdiag {

UntrustedFile::~UntrustedFile() {
  if (fd_ >= 0) close(fd_);
}

std::string UntrustedFile::fd_path() const { return "/proc/self/fd/" + std::to_string(fd_); }

std::string UntrustedFile::identity() const {
  return std::to_string(dev_) + ":" + std::to_string(ino_) + ":" + std::to_string(mtime_ns_) + ":" +
         std::to_string(size_);
}

namespace {

// openat2() with `resolve` flags; falls back to openat() (O_NOFOLLOW still refuses a
// symlink as the last component) on kernels without openat2.
int open_path_fd(int dirfd, const char* path, uint64_t flags, uint64_t resolve) {
  open_how how{};
  how.flags = flags;
  how.resolve = resolve;
  long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
  if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
  return openat(dirfd, path, static_cast<int>(flags));
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// Checks the O_PATH descriptor `pfd` against `pol`, then opens the same inode for
// reading. Takes ownership of pfd.
UntrustedOpen validate_and_reopen(int pfd, const UntrustedPolicy& pol) {
  UntrustedOpen out;
  struct stat st {};
  if (fstat(pfd, &st) != 0) {
    out.err = errno;
    close(pfd);
    return out;
  }
  if (S_ISLNK(st.st_mode)) out.refused = "is a symbolic link";
  else if (S_ISFIFO(st.st_mode)) out.refused = "not a regular file (a FIFO)";
  else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) out.refused = "not a regular file (a device)";
  else if (S_ISDIR(st.st_mode)) out.refused = "not a regular file (a directory)";
  else if (!S_ISREG(st.st_mode)) out.refused = "not a regular file";
  else if (static_cast<uint64_t>(st.st_size) > pol.max_size)
    out.refused = "larger than " + mib(pol.max_size);
  else if (pol.owner && st.st_uid != 0 && st.st_uid != *pol.owner)
    out.refused = "owned by uid " + std::to_string(st.st_uid) + ", not by root or the process owner (uid " +
                  std::to_string(*pol.owner) + ")";
  if (!out.refused.empty()) {
    close(pfd);
    return out;
  }
  char self[64];
  std::snprintf(self, sizeof self, "/proc/self/fd/%d", pfd);
  int fd = open(self, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  int saved = errno;
  close(pfd);
  if (fd < 0) {
    out.err = saved;
    return out;
  }
  struct stat st2 {};
  if (fstat(fd, &st2) != 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino || !S_ISREG(st2.st_mode)) {
    close(fd);
    out.err = ESTALE;
    return out;
  }
  int64_t mt = static_cast<int64_t>(st2.st_mtim.tv_sec) * 1000000000LL + st2.st_mtim.tv_nsec;
  out.file = std::make_shared<UntrustedFile>(fd, static_cast<uint64_t>(st2.st_size), st2.st_dev, st2.st_ino,
                                             mt, st2.st_uid);
  return out;
}

UntrustedOpen from_errno(int err) {
  UntrustedOpen out;
  out.err = err;
  // ELOOP: a symlink where none is allowed (RESOLVE_NO_SYMLINKS or O_NOFOLLOW)
  if (err == ELOOP) out.refused = "symbolic link in path";
  return out;
}

// The name messages give a file opened by `path`: a /proc/PID/map_files/<range> link
// says little, the path the kernel gives for it says which file it is.
std::string shown_name(const std::string& path) {
  if (path.compare(0, 6, "/proc/") != 0 || path.find("/map_files/") == std::string::npos) return path;
  char buf[4096];
  ssize_t n = readlink(path.c_str(), buf, sizeof buf);
  if (n <= 0 || size_t(n) >= sizeof buf) return path;
  std::string target(buf, size_t(n));
  const std::string del = " (deleted)";
  if (target.size() > del.size() && target.compare(target.size() - del.size(), del.size(), del) == 0)
    target.resize(target.size() - del.size());
  return target;
}

}  // namespace

UntrustedOpen open_untrusted(const std::string& path, const UntrustedPolicy& pol) {
  int pfd = pol.follow_links
                ? open(path.c_str(), O_PATH | O_CLOEXEC)
                : open_path_fd(AT_FDCWD, path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC, RESOLVE_NO_SYMLINKS);
  if (pfd < 0) {
    int err = errno;
    UntrustedOpen out = from_errno(err);
    struct stat st {};
    if (err == ELOOP && fstatat(AT_FDCWD, path.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
      out.refused = "is a symbolic link";
    return out;
  }
  UntrustedOpen out = validate_and_reopen(pfd, pol);
  if (out.file) out.file->set_name(shown_name(path));
  return out;
}

UntrustedOpen open_in_proc_root(uint32_t pid, const std::string& path, const UntrustedPolicy& pol) {
  if (path.empty() || path[0] != '/') return from_errno(EINVAL);
  std::string root = "/proc/" + std::to_string(pid) + "/root";
  int rfd = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) return from_errno(errno);
  uint64_t resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  if (!pol.follow_links) resolve |= RESOLVE_NO_SYMLINKS;
  uint64_t flags = O_PATH | O_CLOEXEC | (pol.follow_links ? 0 : O_NOFOLLOW);
  int pfd = open_path_fd(rfd, path.c_str() + 1, flags, resolve);
  int saved = errno;
  close(rfd);
  if (pfd < 0) return from_errno(saved);
  UntrustedOpen out = validate_and_reopen(pfd, pol);
  if (out.file) out.file->set_name(path);
  return out;
}

int open_dir_in_proc_root(uint32_t pid, const std::string& dir) {
  if (dir.empty() || dir[0] != '/') {
    errno = EINVAL;
    return -1;
  }
  std::string root = "/proc/" + std::to_string(pid) + "/root";
  int rfd = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) return -1;
  int fd = open_path_fd(rfd, dir.size() > 1 ? dir.c_str() + 1 : ".", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                        RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  int saved = errno;
  close(rfd);
  errno = saved;
  return fd;
}

std::string without_deleted_suffix(const std::string& path) {
  const std::string del = " (deleted)";
  if (path.size() > del.size() && path.compare(path.size() - del.size(), del.size(), del) == 0)
    return path.substr(0, path.size() - del.size());
  return path;
}

std::string map_range(uint64_t start, uint64_t end) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%" PRIx64 "-%" PRIx64, start, end);
  return buf;
}

UntrustedOpen open_mapping(uint32_t pid, const std::string& range, const std::string& path) {
  std::string proc = pid ? "/proc/" + std::to_string(pid) : std::string("/proc/self");
  std::string name = without_deleted_suffix(path);
  UntrustedOpen r;
  if (!range.empty()) {
    UntrustedPolicy magic;
    magic.follow_links = true;  // a kernel magic link, not a name the process chose
    r = open_untrusted(proc + "/map_files/" + range, magic);
  }
  if (!r.file && r.refused.empty() && !name.empty())
    r = pid ? open_in_proc_root(pid, name, UntrustedPolicy{}) : open_untrusted(name, UntrustedPolicy{});
  if (r.file && !name.empty()) r.file->set_name(name);  // messages name the file, not the link
  return r;
}

bool warn_refused(const std::string& path, const std::string& reason) {
  return warn_refused_keyed(path, path, reason);
}

bool warn_refused_keyed(const std::string& key, const std::string& what, const std::string& reason) {
  static std::mutex mu;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mu);
    // bounded: an attacker creating files by the thousand cannot grow this set forever
    if (warned.size() >= 1000 || !warned.insert(key).second) return false;
  }
  // one write: lines from several threads do not interleave
  std::string line = std::string(program_invocation_short_name) + ": warning: ignoring " + what + ": " +
                     reason + "\n";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  return true;
}

void warn_if_refused(const std::string& path, const UntrustedOpen& r) {
  if (!r.refused.empty()) warn_refused(path, r.refused);
}

size_t read_capped_lines(const UntrustedFile& f, uint64_t max_bytes, size_t max_line,
                         const std::function<void(std::string_view)>& line) {
  size_t skipped = 0;
  std::string cur;
  bool overlong = false;
  char buf[65536];
  uint64_t off = 0;
  while (off < max_bytes) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof buf, max_bytes - off));
    ssize_t n = pread(f.fd(), buf, want, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<uint64_t>(n);
    const char* p = buf;
    const char* end = buf + n;
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      const char* stop = nl ? nl : end;
      if (!overlong) {
        if (cur.size() + static_cast<size_t>(stop - p) > max_line) {
          overlong = true;
          cur.clear();
        } else {
          cur.append(p, stop);
        }
      }
      if (!nl) break;
      if (overlong) skipped++;
      else line(cur);
      cur.clear();
      overlong = false;
      p = nl + 1;
    }
  }
  if (overlong) skipped++;
  else if (!cur.empty()) line(cur);
  return skipped;
}

std::optional<ProcUids> process_uids(uint32_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/status";
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return std::nullopt;
  char l[256];
  std::optional<ProcUids> out;
  while (std::fgets(l, sizeof l, f)) {
    unsigned r, e;
    if (std::sscanf(l, "Uid: %u %u", &r, &e) == 2) {
      out = ProcUids{static_cast<uid_t>(r), static_cast<uid_t>(e)};
      break;
    }
  }
  std::fclose(f);
  return out;
}

}  // namespace bpfdiag
