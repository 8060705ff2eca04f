#include "common/runbook_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "common/parse.h"

namespace bpfdiag {

namespace {

constexpr size_t kMaxRunbookSize = 65536;

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A directory anyone may write to but where the sticky bit keeps each entry to its
// owner (/tmp, /var/tmp, /dev/shm): no one but an entry's owner can rename, replace or
// remove it, so what lies below is as safe as the entry's own owner and mode, which
// the next step of the walk checks.
bool shared_sticky_dir(const struct stat& st) {
  return S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) && st.st_uid == 0;
}

// Why a file or directory of a runbook's path may not be trusted ("" : it may).
// `in_shared`: it is an entry of a shared sticky directory.
std::string untrusted_reason(const struct stat& st, const std::string& path, bool in_shared) {
  const uid_t me = getuid();
  if (st.st_uid != 0 && st.st_uid != me)
    return path + " is owned by uid " + std::to_string(st.st_uid) + (me == 0 ? ", not root" : ", not root or you");
  if (shared_sticky_dir(st)) return "";
  if (st.st_mode & S_IWOTH) return path + " is world-writable";
  if (st.st_mode & S_IWGRP) return path + " is group-writable";
  // a hard link someone else made to a file of ours, under a name of their choosing
  if (in_shared && !S_ISDIR(st.st_mode) && st.st_nlink > 1)
    return path + " has " + std::to_string(st.st_nlink) + " hard links in a shared directory";
  return "";
}

const char kRule[] =
    " (a runbook is code run as root: it and every directory above it must belong to root or you, writable by no one "
    "else but a root-owned sticky directory such as /tmp)";

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

Result<std::string> read_fd(int fd, const std::string& path) {
  std::string text;
  char buf[8192];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{"cannot read " + path + ": " + std::strerror(errno)};
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxRunbookSize) return Error{path + ": larger than 64 KiB"};
  }
  return text;
}

Result<RunbookFile> load_runbook_file(const std::string& path) {
  auto fd = open_trusted(path);
  if (!fd) return Error{fd.error()};
  Fd f{*fd};
  auto text = read_fd(f.fd, path);
  if (!text) return Error{text.error()};
  std::string base = path.substr(path.rfind('/') + 1);
  if (base.size() > 8 && base.compare(base.size() - 8, 8, ".runbook") == 0) base.resize(base.size() - 8);
  auto rb = parse_runbook(base, *text);
  if (!rb) return Error{path + ": " + rb.error()};
  RunbookFile out = *rb;
  out.path = path;
  return out;
}

}  // namespace

Result<RunbookFile> parse_runbook(const std::string& name, const std::string& text) {
  RunbookFile rb;
  rb.name = name;
  std::istringstream is(text);
  std::string line;
  int n = 0;
  while (std::getline(is, line)) {
    ++n;
    std::string l = trim(line);
    if (l.empty() || l[0] == '#') continue;
    auto colon = l.find(':');
    if (colon == std::string::npos) return Error{"line " + std::to_string(n) + ": expected 'key: value'"};
    std::string key = trim(l.substr(0, colon)), value = trim(l.substr(colon + 1));
    auto at = "line " + std::to_string(n) + ": ";
    if (value.empty()) return Error{at + "empty value for '" + key + "'"};
    if (key == "title") {
      rb.title = value;
    } else if (key == "summary") {
      rb.summary = value;
    } else if (key == "wait") {
      if (value != "window" && value != "exit") return Error{at + "wait is 'window' or 'exit', not '" + value + "'"};
      rb.wait_exit = value == "exit";
    } else if (key == "duration") {
      auto d = parse_duration_ns(value, "duration", 1'000'000'000ULL, 100'000'000ULL, 86400'000'000'000ULL);
      if (!d) return Error{at + d.error()};
      rb.duration_ns = *d;
    } else if (key == "tool") {
      RunbookTool t;
      t.line = n;
      std::istringstream ws(value);
      ws >> t.name;
      if (!valid_name(t.name)) return Error{at + "tool name '" + t.name + "' (a-z, 0-9, '-', '_')"};
      for (std::string a; ws >> a;) t.args.push_back(a);
      rb.tools.push_back(std::move(t));
    } else {
      return Error{at + "unknown key '" + key + "' (title, summary, tool, wait, duration)"};
    }
  }
  if (rb.tools.empty()) return Error{"no 'tool:' line"};
  if (rb.title.empty()) rb.title = name;
  return rb;
}

Result<int> open_trusted(const std::string& path, bool directory) {
  char* rp = realpath(path.c_str(), nullptr);
  if (!rp) return Error{path + ": " + std::strerror(errno)};
  const std::string canon(rp);
  std::free(rp);
  std::vector<std::string> parts;
  {
    std::stringstream ss(canon);
    for (std::string p; std::getline(ss, p, '/');)
      if (!p.empty()) parts.push_back(p);
  }
  // "/" itself, then each component below it, each checked on its own descriptor
  Fd cur{open("/", (parts.empty() ? O_RDONLY : O_PATH) | O_DIRECTORY | O_CLOEXEC)};
  if (cur.fd < 0) return Error{std::string("/: ") + std::strerror(errno)};
  std::string at = "/";
  bool in_shared = false;
  for (size_t i = 0;; ++i) {
    struct stat st;
    if (fstat(cur.fd, &st) != 0) return Error{at + ": " + std::strerror(errno)};
    const bool last = i == parts.size();
    if (!last && !S_ISDIR(st.st_mode)) return Error{at + ": not a directory"};
    auto why = untrusted_reason(st, at, in_shared);
    if (!why.empty()) return Error{"refused " + path + ": " + why + kRule};
    in_shared = shared_sticky_dir(st);
    if (last) {
      if (directory && !S_ISDIR(st.st_mode)) return Error{path + ": not a directory"};
      if (!directory && !S_ISREG(st.st_mode)) return Error{path + ": not a regular file"};
      return cur.release();
    }
    const bool final_part = i + 1 == parts.size();
    int flags = O_NOFOLLOW | O_CLOEXEC;
    if (!final_part)
      flags |= O_PATH | O_DIRECTORY;
    else
      flags |= O_RDONLY | O_NONBLOCK | (directory ? O_DIRECTORY : 0);
    int next = openat(cur.fd, parts[i].c_str(), flags);
    at = (at == "/" ? "" : at) + "/" + parts[i];
    if (next < 0) {
      if (errno == ELOOP) return Error{"refused " + path + ": " + at + " became a symbolic link"};
      return Error{at + ": " + std::strerror(errno)};
    }
    close(cur.fd);
    cur.fd = next;
    if (final_part && !directory) {  // a regular file read in blocking mode
      int fl = fcntl(cur.fd, F_GETFL);
      if (fl >= 0) fcntl(cur.fd, F_SETFL, fl & ~O_NONBLOCK);
    }
  }
}

std::string self_exe_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}

std::vector<RunbookDir> runbook_dirs() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("BPFDIAG_RUNBOOKS")) {
    std::stringstream ss(env);
    for (std::string d; std::getline(ss, d, ':');)
      if (!d.empty() && is_dir(d)) paths.push_back(d);
  }
  // next to bin/ (the build tree) or two levels up (installed in <prefix>/libexec/bpfdiag)
  std::string exe = self_exe_dir();
  for (const char* up : {"/..", "/../.."})
    if (!exe.empty() && is_dir(exe + up + "/share/bpfdiag/runbooks")) paths.push_back(exe + up + "/share/bpfdiag/runbooks");
  std::vector<RunbookDir> dirs;
  for (auto& p : paths) {
    RunbookDir d{p, ""};
    auto fd = open_trusted(p, true);
    if (fd)
      close(*fd);
    else
      d.untrusted = fd.error();
    dirs.push_back(std::move(d));
  }
  return dirs;
}

Result<RunbookFile> load_runbook(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    struct stat st;
    if (lstat(name.c_str(), &st) != 0) return Error{"no runbook file " + name};
    return load_runbook_file(name);
  }
  if (!valid_name(name)) return Error{"no runbook '" + name + "' (runbook --list names them)"};
  for (auto& d : runbook_dirs()) {
    std::string path = d.path + "/" + name + ".runbook";
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) continue;
    // the directory that provides the runbook must be trusted; others are not read
    if (!d.untrusted.empty()) return Error{"runbook '" + name + "': " + d.untrusted};
    return load_runbook_file(path);
  }
  return Error{"no runbook '" + name + "' (runbook --list names them)"};
}

std::vector<RunbookFile> list_runbooks(std::vector<std::string>* bad) {
  std::map<std::string, RunbookFile> found;
  for (auto& d : runbook_dirs()) {
    if (!d.untrusted.empty()) {
      if (bad) bad->push_back(d.untrusted);
      continue;
    }
    DIR* dir = opendir(d.path.c_str());
    if (!dir) continue;
    std::vector<std::string> names;
    while (dirent* e = readdir(dir)) {
      std::string f = e->d_name;
      if (f.size() > 8 && f.compare(f.size() - 8, 8, ".runbook") == 0) names.push_back(f.substr(0, f.size() - 8));
    }
    closedir(dir);
    std::sort(names.begin(), names.end());
    for (auto& n : names) {
      if (found.count(n) || !valid_name(n)) continue;
      auto rb = load_runbook_file(d.path + "/" + n + ".runbook");
      if (rb)
        found.emplace(n, *rb);
      else if (bad)
        bad->push_back(rb.error());
    }
  }
  std::vector<RunbookFile> out;
  for (auto& [n, rb] : found) out.push_back(rb);
  return out;
}

}  // namespace bpfdiag
