#include "common/proc.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace bpfdiag {

bool pid_exists(uint32_t pid) {
  struct stat st;
  return pid > 0 && stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0;
}

bool proc_running(uint32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  auto paren = stat.rfind(')');  // comm may contain spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  char state = stat[paren + 2];
  return state != 'Z' && state != 'X' && state != 'x';
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
