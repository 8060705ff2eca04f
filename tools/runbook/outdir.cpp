// The report directory and its files. runbook runs as root and may be pointed at a
// directory another user prepared: the directory is created fresh (or is an empty one
// of our own), and every file in it is created relative to its descriptor with
// O_EXCL|O_NOFOLLOW, so no existing file, and no symbolic link to one, is written.
#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "tools/runbook/runbook.h"

namespace runbook {
using namespace bpfdiag;

namespace {

std::string random_suffix() {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char b[8];
  if (getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) {  // never on Linux >= 3.17
    uint64_t v = static_cast<uint64_t>(time(nullptr)) ^ (static_cast<uint64_t>(getpid()) << 32);
    std::memcpy(b, &v, sizeof b);
  }
  std::string s;
  for (unsigned char c : b) s += kChars[c % 36];
  return s;
}

std::string default_dir(const std::string& name) {
  time_t now = time(nullptr);
  tm t;
  localtime_r(&now, &t);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &t);
  return "runbook-" + name + "-" + buf + "-" + random_suffix();
}

Status make_parents(const std::string& dir) {
  std::string cur = dir[0] == '/' ? "/" : "";
  size_t pos = cur.size();
  for (;;) {
    size_t slash = dir.find('/', pos);
    if (slash == std::string::npos) return std::nullopt;  // the last part is created by the caller
    std::string part = dir.substr(pos, slash - pos);
    pos = slash + 1;
    if (part.empty()) continue;
    cur += part + "/";
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      return Error{"cannot create " + cur + ": " + std::strerror(errno)};
  }
}

bool dir_is_empty(int fd) {
  int d = dup(fd);
  if (d < 0) return false;
  DIR* dir = fdopendir(d);
  if (!dir) {
    close(d);
    return false;
  }
  bool empty = true;
  while (dirent* e = readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    empty = false;
    break;
  }
  closedir(dir);
  return empty;
}

}  // namespace

Status open_report_dir(Run& run) {
  std::string dir = run.cfg.out_dir;
  if (dir.empty()) {
    for (int attempt = 0;; ++attempt) {
      dir = default_dir(run.book.name);
      if (mkdir(dir.c_str(), 0700) == 0) break;
      if (errno != EEXIST || attempt == 10) return Error{"cannot create " + dir + ": " + std::strerror(errno)};
    }
  } else {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // "DIR/" would follow a link
    if (auto st = make_parents(dir)) return st;
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return Error{"cannot create " + dir + ": " + std::strerror(errno)};
  }
  run.dir = dir;
  // Created now or there before: the same checks on what was opened
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    struct stat st;
    if ((e == ELOOP || e == ENOTDIR) && lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      return Error{"refused -o " + dir + ": it is a symbolic link (give a new directory)"};
    if (e == ENOTDIR) return Error{"refused -o " + dir + ": not a directory"};
    return Error{"cannot open " + dir + ": " + std::strerror(e)};
  }
  struct stat st;
  std::string why;
  if (fstat(fd, &st) != 0)
    why = std::strerror(errno);
  else if (st.st_uid != geteuid())
    why = "it is owned by uid " + std::to_string(st.st_uid) + " (give a new directory)";
  else if (st.st_mode & (S_IWGRP | S_IWOTH))
    why = "it is writable by others (give a new directory)";
  else if (!dir_is_empty(fd))
    why = "it exists and is not empty (give a new or empty directory)";
  if (!why.empty()) {
    close(fd);
    return Error{"refused -o " + dir + ": " + why};
  }
  run.dir_fd = fd;
  return std::nullopt;
}

int create_report_file(const Run& run, const std::string& name) {
  return openat(run.dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
}

Status write_report_file(const Run& run, const std::string& name, const std::string& text) {
  int fd = create_report_file(run, name);
  if (fd < 0) return Error{"cannot create " + run.dir + "/" + name + ": " + std::strerror(errno)};
  bool ok = write_all(fd, text);
  int e = errno;
  if (close(fd) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (!ok) return Error{"cannot write " + run.dir + "/" + name + ": " + std::strerror(e)};
  return std::nullopt;
}

std::string read_report_file(int dir_fd, const std::string& name) {
  int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  struct stat st;
  std::string out;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    char buf[65536];
    for (;;) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

}  // namespace runbook
