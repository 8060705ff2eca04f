#include "common/proc.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <climits>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace bpfdiag {

bool pid_exists(uint32_t pid) {
  struct stat st;
  return pid > 0 && stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0;
}

std::optional<ProcStat> read_proc_stat(const std::string& path) {
  std::ifstream f(path);
  std::string stat;
  if (!std::getline(f, stat)) return std::nullopt;
  return parse_proc_stat(stat);
}

std::optional<ProcStat> parse_proc_stat(std::string_view stat) {
  auto paren = stat.rfind(')');  // comm may contain spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= stat.size()) return std::nullopt;
  std::istringstream in(std::string(stat.substr(paren + 2)));
  ProcStat ps;
  std::string field;
  // field 3 is the state; 4 ppid; 22 starttime
  for (int i = 3; i <= 22 && (in >> field); ++i) {
    if (i == 3) ps.state = field[0];
    else if (i == 4) ps.ppid = static_cast<uint32_t>(std::strtoul(field.c_str(), nullptr, 10));
    else if (i == 22) {
      ps.start_time = std::strtoull(field.c_str(), nullptr, 10);
      return ps;
    }
  }
  return std::nullopt;
}

static bool zombie(char state) { return state == 'Z' || state == 'X' || state == 'x'; }

bool proc_running(uint32_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  auto st = read_proc_stat(dir + "/stat");
  if (!st) return false;
  if (!zombie(st->state)) return true;
  for (uint32_t tid : proc_threads(pid)) {  // a zombie leader whose threads run on
    if (tid == pid) continue;
    auto t = read_proc_stat(dir + "/task/" + std::to_string(tid) + "/stat");
    if (t && !zombie(t->state)) return true;
  }
  return false;
}

bool is_thread_of(uint32_t tid, uint32_t pid) {
  struct stat st;
  return stat(("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid)).c_str(), &st) == 0;
}

std::string proc_comm(uint32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(f, s);
  return s;
}

static std::string status_field(uint32_t pid, const std::string& key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream in(line.substr(key.size() + 1));
      std::string v;
      in >> v;
      return v;
    }
  return "";
}

uint32_t proc_ppid(uint32_t pid) {
  auto v = status_field(pid, "PPid");
  return v.empty() ? 0 : static_cast<uint32_t>(std::stoul(v));
}

uint32_t proc_tgid(uint32_t tid) {
  auto v = status_field(tid, "Tgid");
  return v.empty() ? 0 : static_cast<uint32_t>(std::stoul(v));
}

std::vector<uint32_t> proc_threads(uint32_t pid) {
  std::vector<uint32_t> out;
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (!d) return out;
  while (auto* e = readdir(d))
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(static_cast<uint32_t>(std::stoul(e->d_name)));
  closedir(d);
  return out;
}

std::vector<uint32_t> proc_all_pids(size_t max) {
  std::vector<uint32_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    unsigned long v = std::strtoul(e->d_name, &end, 10);
    if (end && !*end && v && v <= UINT32_MAX && out.size() < max) out.push_back(static_cast<uint32_t>(v));
  }
  closedir(d);
  return out;
}

std::vector<uint32_t> proc_children(uint32_t pid) {
  std::set<uint32_t> out;
  const std::string task = "/proc/" + std::to_string(pid) + "/task/";
  for (uint32_t tid : proc_threads(pid)) {
    std::ifstream f(task + std::to_string(tid) + "/children");
    unsigned long v = 0;
    while (f >> v)
      if (v && v <= UINT32_MAX) out.insert(static_cast<uint32_t>(v));
  }
  return {out.begin(), out.end()};
}

std::vector<uint32_t> proc_descendants(uint32_t pid, size_t max) {
  std::vector<uint32_t> out;
  std::set<uint32_t> seen{pid};
  std::vector<uint32_t> level{pid};
  while (!level.empty() && out.size() < max) {
    std::vector<uint32_t> next;
    for (uint32_t p : level)
      for (uint32_t c : proc_children(p))
        if (out.size() < max && seen.insert(c).second) {
          out.push_back(c);
          next.push_back(c);
        }
    level = std::move(next);
  }
  return out;
}

std::optional<MapsLine> parse_maps_line(const std::string& line) {
  MapsLine m;
  char perms[8] = {0};
  int consumed = 0;
  if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &m.start, &m.end,
                  perms, &m.offset, &m.maj, &m.min, &m.inode, &consumed) < 7)
    return std::nullopt;
  std::memcpy(m.perms, perms, sizeof m.perms - 1);
  if (consumed > 0 && static_cast<size_t>(consumed) < line.size()) m.path = line.substr(consumed);
  return m;
}

std::string proc_find_mapping(uint32_t pid, const std::string& prefix) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(f, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    std::string base = path.substr(path.rfind('/') + 1);
    if (base.rfind(prefix, 0) == 0) return path;
  }
  return "";
}

int online_cpus() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

namespace {

constexpr size_t kMaxSocketLines = 1 << 20;  // lines read per /proc/PID/net file

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> f;
  size_t i = 0;
  while (i < line.size() && f.size() < 16) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) f.push_back(line.substr(i, j - i));
    i = j;
  }
  return f;
}

template <typename Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  size_t n = 0;
  while (!text.empty() && n++ < kMaxSocketLines) {
    size_t nl = text.find('\n');
    fn(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

uint64_t number(std::string_view s, int base) {
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
    if (d >= base || v > (UINT64_MAX >> 5)) return 0;
    v = v * base + d;
  }
  return v;
}

std::string read_capped(const std::string& path, size_t max) {
  std::ifstream f(path);
  std::string out;
  char buf[65536];
  while (f && out.size() < max) {
    f.read(buf, static_cast<std::streamsize>(std::min(sizeof buf, max - out.size())));
    out.append(buf, static_cast<size_t>(f.gcount()));
  }
  return out;
}

}  // namespace

std::vector<SocketLine> parse_tcp_sockets(std::string_view text) {
  // "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode"
  std::vector<SocketLine> out;
  for_each_line(text, [&](std::string_view line) {
    auto f = fields_of(line);
    if (f.size() < 10 || f[0] == "sl") return;
    size_t colon = f[1].rfind(':');
    if (colon == std::string_view::npos) return;
    SocketLine s;
    s.local = std::to_string(number(f[1].substr(colon + 1), 16));
    uint64_t st = number(f[3], 16);
    s.listening = st == 0x0a;  // TCP_LISTEN
    s.connected = st == 0x01;  // TCP_ESTABLISHED
    s.inode = number(f[9], 10);
    if (s.inode) out.push_back(std::move(s));
  });
  return out;
}

std::vector<SocketLine> parse_unix_sockets(std::string_view text) {
  // "Num RefCount Protocol Flags Type St Inode Path"
  std::vector<SocketLine> out;
  for_each_line(text, [&](std::string_view line) {
    auto f = fields_of(line);
    if (f.size() < 7 || f[0] == "Num") return;
    if (number(f[4], 16) != 1) return;  // SOCK_STREAM
    SocketLine s;
    uint64_t flags = number(f[3], 16), st = number(f[5], 16);
    s.listening = (flags & 0x10000) != 0;  // __SO_ACCEPTCON
    s.connected = st == 3;                 // SS_CONNECTED
    s.inode = number(f[6], 10);
    if (f.size() > 7) s.local = std::string(f[7]);
    if (s.inode) out.push_back(std::move(s));
  });
  return out;
}

std::vector<uint32_t> accepted_socket_fds(uint32_t pid, size_t max) {
  const std::string base = "/proc/" + std::to_string(pid);
  std::map<uint64_t, uint32_t> fd_of;  // socket inode -> fd
  if (DIR* d = opendir((base + "/fd").c_str())) {
    while (auto* e = readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd_of.size() >= max) continue;
      char link[64];
      ssize_t n = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);  // the magic link's text, not followed
      if (n <= 0) continue;
      std::string_view l(link, static_cast<size_t>(n));
      if (l.rfind("socket:[", 0) != 0 || l.back() != ']') continue;
      if (uint64_t ino = number(l.substr(8, l.size() - 9), 10)) fd_of[ino] = static_cast<uint32_t>(number(e->d_name, 10));
    }
    closedir(d);
  }
  std::set<uint32_t> out;
  auto pick = [&](const std::vector<SocketLine>& lines) {
    std::set<std::string> listens;  // ports or paths this process listens on
    for (const auto& s : lines)
      if (s.listening && fd_of.count(s.inode) && !s.local.empty()) listens.insert(s.local);
    for (const auto& s : lines)
      if (s.connected && !s.listening && listens.count(s.local))
        if (auto it = fd_of.find(s.inode); it != fd_of.end() && out.size() < max) out.insert(it->second);
  };
  constexpr size_t kMaxNetFile = 64 << 20;
  auto tcp = parse_tcp_sockets(read_capped(base + "/net/tcp", kMaxNetFile));
  auto tcp6 = parse_tcp_sockets(read_capped(base + "/net/tcp6", kMaxNetFile));
  tcp.insert(tcp.end(), tcp6.begin(), tcp6.end());
  pick(tcp);
  pick(parse_unix_sockets(read_capped(base + "/net/unix", kMaxNetFile)));
  return {out.begin(), out.end()};
}

}  // namespace bpfdiag
