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

}  // namespace bpfdiag
