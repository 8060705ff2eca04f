// HotSpot's attach protocol (version 1, JDK 9+): the client connects to the JVM's
// UNIX socket /tmp/.java_pidNSPID and sends "1\0jcmd\0<command>\0\0\0"; the JVM answers
// with its result code on the first line, then the command's output. When the socket
// is not there yet, the client creates /tmp/.attach_pidNSPID and sends SIGQUIT: the
// JVM's signal thread sees the file and starts its attach listener instead of
// printing a thread dump.
#include "common/jvm_attach.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>

#include "common/proc.h"
#include "common/runloop.h"
#include "common/untrusted_file.h"

namespace bpfdiag {

namespace {

constexpr size_t kMaxAnswer = 64 * 1024;  // the answer read at most (Compiler.perfmap's is empty)

}  // namespace

std::optional<JvmIds> jvm_ids(uint32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  if (!f) return std::nullopt;
  JvmIds ids;
  bool uid = false, gid = false;
  for (std::string l; std::getline(f, l);) {
    unsigned r, e;
    if (std::sscanf(l.c_str(), "Uid: %u %u", &r, &e) == 2) ids.uid = e, uid = true;
    if (std::sscanf(l.c_str(), "Gid: %u %u", &r, &e) == 2) ids.gid = e, gid = true;
    if (l.compare(0, 7, "SigCgt:") == 0)
      ids.catches_sigquit = (std::strtoull(l.c_str() + 7, nullptr, 16) >> (SIGQUIT - 1)) & 1;
    if (l.compare(0, 6, "NSpid:") == 0) {
      auto last = l.find_last_of(" \t");
      if (last != std::string::npos) ids.nspid = static_cast<uint32_t>(std::strtoul(l.c_str() + last + 1, nullptr, 10));
    }
  }
  if (!uid || !gid) return std::nullopt;
  if (!ids.nspid) ids.nspid = pid;  // kernels without NSpid: no PID namespaces
  return ids;
}

namespace {

uint64_t now_ms() { return monotonic_ns() / 1000000ULL; }

// The JVM's attach socket in its /tmp (`tmp`): an O_PATH descriptor, or -1 (absent:
// errno ENOENT), or -2 with `why` set when the name is there but not the JVM's socket.
int attach_socket(int tmp, const std::string& name, uid_t uid, std::string& why) {
  int fd = openat(tmp, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != uid) {
    why = "/tmp/" + name + " is not a socket owned by the JVM's user (uid " + std::to_string(uid) + ")";
    close(fd);
    return -2;
  }
  return fd;
}

// Sends the request on the socket behind O_PATH descriptor `sfd` and reads the answer.
Status ask(int sfd, const std::string& command, uint64_t deadline_ms, std::string& answer) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return Error{std::string("socket: ") + std::strerror(errno)};
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d", sfd);  // that very inode
  auto fail = [&](const std::string& what) -> Status {
    int e = errno;
    close(s);
    return Error{what + ": " + std::strerror(e)};
  };
  if (connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)  // immediate for a UNIX socket
    return fail("connect to the JVM's attach socket");
  std::string req = std::string("1") + '\0' + "jcmd" + '\0' + command + '\0' + '\0' + '\0';
  size_t sent = 0;
  std::string got;
  while (true) {
    const uint64_t now = now_ms();
    if (now >= deadline_ms) {
      close(s);
      return Error{"the JVM did not answer in time"};
    }
    pollfd p{s, static_cast<short>(sent < req.size() ? POLLOUT : POLLIN), 0};
    int r = poll(&p, 1, static_cast<int>(deadline_ms - now));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail("poll");
    if (r == 0) continue;
    if (sent < req.size()) {
      ssize_t n = send(s, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n < 0) return fail("send to the JVM");
      sent += static_cast<size_t>(n);
      continue;
    }
    char buf[4096];
    ssize_t n = read(s, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) return fail("read from the JVM");
    if (n == 0) break;
    got.append(buf, static_cast<size_t>(std::min<ssize_t>(n, static_cast<ssize_t>(kMaxAnswer - got.size()))));
    if (got.size() >= kMaxAnswer) break;
  }
  close(s);
  answer = got;
  return std::nullopt;
}

}  // namespace

std::optional<MapsLine> libjvm_mapping(uint32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  std::optional<MapsLine> lib;
  const std::string suffix = "/libjvm.so";
  for (std::string l; std::getline(f, l);) {
    auto m = parse_maps_line(l);
    if (m && m->path.size() > suffix.size() &&
        m->path.compare(m->path.size() - suffix.size(), suffix.size(), suffix) == 0 && (!lib || m->offset < lib->offset))
      lib = m;
  }
  return lib;
}

bool is_hotspot_jvm(uint32_t pid) { return libjvm_mapping(pid).has_value(); }

Status request_jvm_perfmap(uint32_t pid, int timeout_ms) {
  const uint64_t deadline = now_ms() + static_cast<uint64_t>(timeout_ms);
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // this process, not a later one with its PID
  if (pidfd < 0) return Error{"no process with PID " + std::to_string(pid)};
  auto done = [&](Status st) {
    close(pidfd);
    return st;
  };
  if (!is_hotspot_jvm(pid)) return done(Error{"PID " + std::to_string(pid) + " is not a HotSpot JVM (no libjvm.so mapped)"});
  auto ids = jvm_ids(pid);
  if (!ids) return done(Error{"PID " + std::to_string(pid) + " exited"});
  int tmp = open_dir_in_proc_root(pid, "/tmp");
  if (tmp < 0) return done(Error{"cannot open the JVM's /tmp: " + std::string(std::strerror(errno))});
  const std::string sock = ".java_pid" + std::to_string(ids->nspid);
  const std::string trigger = ".attach_pid" + std::to_string(ids->nspid);
  std::string why;
  int sfd = attach_socket(tmp, sock, ids->uid, why);
  bool created = false;
  if (sfd == -1 && !ids->catches_sigquit) {  // -Xrs, a JNI host, a JVM still starting
    close(tmp);
    return done(Error{"PID " + std::to_string(pid) +
                      " does not handle SIGQUIT (started with -Xrs, or still starting): not signalled"});
  }
  if (sfd == -1) {  // no listener yet: ask for one
    int t = openat(tmp, trigger.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (t >= 0) {
      created = true;
      if (fchown(t, ids->uid, ids->gid) != 0) { /* root-owned: JDK 17+ accepts it too */ }
      close(t);
    }
    if (syscall(SYS_pidfd_send_signal, pidfd, SIGQUIT, nullptr, 0) != 0) {
      if (created) unlinkat(tmp, trigger.c_str(), 0);
      close(tmp);
      return done(Error{"cannot signal PID " + std::to_string(pid) + ": " + std::strerror(errno)});
    }
    while (sfd == -1 && now_ms() < deadline) {
      struct timespec ts = {0, 20000000};
      nanosleep(&ts, nullptr);
      sfd = attach_socket(tmp, sock, ids->uid, why);
    }
    if (created) unlinkat(tmp, trigger.c_str(), 0);
  }
  close(tmp);
  if (sfd == -1)
    return done(Error{"the JVM opened no attach socket within " + std::to_string(timeout_ms / 1000) +
                      " s (started with -XX:+DisableAttachMechanism?)"});
  if (sfd == -2) return done(Error{why});
  std::string answer;
  Status st = ask(sfd, "Compiler.perfmap", deadline, answer);
  close(sfd);
  if (st) return done(st);
  // the result code, then jcmd's output ("" for Compiler.perfmap); the JVM's user wrote
  // it: cut, and nothing but printable ASCII reaches the terminal
  auto printable = [](std::string t, size_t max) {
    if (t.size() > max) t = t.substr(0, max) + "...";
    for (char& ch : t)
      if (ch < 0x20 || ch > 0x7e) ch = ' ';
    return t;
  };
  auto nl = answer.find('\n');
  const std::string code = printable(answer.substr(0, nl), 16);
  std::string rest = nl == std::string::npos ? "" : answer.substr(nl + 1);
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == ' ')) rest.pop_back();
  if (code != "0" || rest.find("Unknown diagnostic command") != std::string::npos ||
      rest.find("Exception") != std::string::npos) {
    rest = printable(rest, 200);
    return done(Error{"the JVM refused Compiler.perfmap (code " + code + (rest.empty() ? "" : ": " + rest) +
                      "; it needs JDK 17 or later)"});
  }
  return done(std::nullopt);
}

void request_jvm_perfmaps(const char* tool, const std::vector<uint32_t>& pids) {
  for (uint32_t pid : pids)
    if (Status st = request_jvm_perfmap(pid)) std::fprintf(stderr, "%s: warning: --jvm-perfmap: %s\n", tool, st->message.c_str());
}

}  // namespace bpfdiag
