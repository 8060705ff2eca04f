#include "common/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/bpf_plan.h"
#include "common/btf.h"
#include "common/options.h"
#include "common/proc.h"

namespace bpfdiag {

namespace {
constexpr unsigned long kCgroup2Magic = 0x63677270;  // CGROUP2_SUPER_MAGIC
constexpr size_t kMaxProcCgroup = 64 * 1024;         // /proc/PID/cgroup read at most

// A small /proc or cgroupfs file (kernel-made text), at most `cap` bytes; "" if unreadable.
std::string read_small(const std::string& path, size_t cap) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "";
  std::string out;
  char buf[4096];
  while (out.size() < cap) {
    ssize_t n = read(fd, buf, std::min(sizeof buf, cap - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// mountinfo escapes spaces etc. as \ooo
std::string unescape_octal(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The absolute path and id of a directory on cgroup2 at `path`, `rel` under `mount`.
Result<CgroupTarget> target_at(const std::string& path, const std::string& rel, const std::string& shown) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) return Error{"no cgroup " + shown + " (no such directory)"};
    if (e == ENOTDIR) return Error{shown + " is not a cgroup v2 directory (not a directory)"};
    return Error{"cannot open cgroup " + shown + ": " + std::strerror(e)};
  }
  struct statfs sfs;
  struct stat st;
  bool ok = fstatfs(fd, &sfs) == 0 && static_cast<unsigned long>(sfs.f_type) == kCgroup2Magic && fstat(fd, &st) == 0;
  close(fd);
  if (!ok) return Error{shown + " is not a cgroup v2 directory (not on a cgroup2 file system)"};
  CgroupTarget t;
  t.path = path;
  t.rel = rel.empty() ? "/" : rel;
  t.id = st.st_ino;
  return t;
}

// "/a//b/./c/" -> "/a/b/c"; none when it has "..".
std::optional<std::string> clean_path(const std::string& p) {
  std::string out;
  std::istringstream in(p);
  std::string part;
  while (std::getline(in, part, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") return std::nullopt;
    out += "/" + part;
  }
  return out;
}
}  // namespace

std::string cgroup2_mount_from_mountinfo(std::string_view mountinfo) {
  size_t pos = 0;
  while (pos < mountinfo.size()) {
    size_t nl = mountinfo.find('\n', pos);
    std::string_view line = mountinfo.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? mountinfo.size() : nl + 1;
    // "36 25 0:31 / /sys/fs/cgroup rw,... shared:9 - cgroup2 cgroup2 rw,..."
    size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    std::string_view tail = line.substr(dash + 3);
    if (tail.substr(0, 8) != "cgroup2 ") continue;
    std::istringstream f{std::string(line.substr(0, dash))};
    std::string id, parent, devno, root, mnt;
    if (!(f >> id >> parent >> devno >> root >> mnt)) continue;
    if (root != "/") continue;  // a bind mount of a sub-cgroup: not the hierarchy's root
    return unescape_octal(mnt);
  }
  return "";
}

std::string cgroup2_mount() { return cgroup2_mount_from_mountinfo(read_small("/proc/self/mountinfo", 4 << 20)); }

std::optional<std::string> cgroup_v2_path(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    if (line.substr(0, 3) == "0::") return std::string(line.substr(3));
  }
  return std::nullopt;
}

std::optional<ContainerMatch> match_container(std::string_view path, std::string_view prefix) {
  size_t start = 0;
  while (start < path.size()) {
    size_t slash = path.find('/', start + 1);
    size_t end = slash == std::string_view::npos ? path.size() : slash;
    std::string_view comp = path.substr(start, end - start);
    for (size_t i = 0; i < comp.size();) {
      if (!is_hex(comp[i])) {
        i++;
        continue;
      }
      size_t j = i;
      while (j < comp.size() && is_hex(comp[j])) j++;
      if (j - i == 64 && comp.substr(i, prefix.size()) == prefix)
        return ContainerMatch{std::string(comp.substr(i, 64)), std::string(path.substr(0, end))};
      i = j;
    }
    start = end;
  }
  return std::nullopt;
}

Result<std::string> parse_container_id(const std::string& arg) {
  std::string id;
  for (char c : arg) id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  bool hex = !id.empty() && std::all_of(id.begin(), id.end(), is_hex);
  if (!hex || id.size() < 12 || id.size() > 64)
    return Error{"--container needs a container ID: 12 to 64 hex digits (as docker ps shows it), got '" +
                 (arg.size() > 80 ? arg.substr(0, 80) + "..." : arg) + "'"};
  return id;
}

Result<CgroupTarget> resolve_cgroup_path(const std::string& arg, std::string mount) {
  if (arg.empty()) return Error{"--cgroup needs a cgroup v2 directory"};
  if (mount.empty()) mount = cgroup2_mount();
  if (mount.empty()) return Error{"--cgroup: no cgroup2 file system is mounted (cgroup v2 only)"};
  std::string abs = arg[0] == '/' ? arg : mount + "/" + arg;
  auto clean = clean_path(abs);
  if (!clean) return Error{"--cgroup: give the path without '..': " + arg};
  std::string m = *clean_path(mount);
  std::string rel;
  if (*clean == m) {
    rel = "/";
  } else if (clean->compare(0, m.size() + 1, m + "/") == 0) {
    rel = clean->substr(m.size());
  } else {
    // not under the mount: say so precisely (a file, a v1 cgroup, a typo)
    auto t = target_at(*clean, "", arg);
    if (!t) return Error{t.error()};
    return Error{arg + " is not under the cgroup2 mount " + mount};
  }
  return target_at(*clean, rel, arg);
}

Result<CgroupTarget> resolve_container(const std::string& id, const std::string& proc, std::string mount) {
  if (mount.empty()) mount = cgroup2_mount();
  if (mount.empty()) return Error{"--container: no cgroup2 file system is mounted (cgroup v2 only)"};
  std::map<std::string, std::string> found;  // full ID -> its shortest cgroup path
  DIR* d = opendir(proc.c_str());
  if (!d) return Error{"--container: cannot read " + proc + ": " + std::strerror(errno)};
  size_t seen = 0;
  while (dirent* e = readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0])) || ++seen > (1u << 22)) continue;
    auto p = cgroup_v2_path(read_small(proc + "/" + e->d_name + "/cgroup", kMaxProcCgroup));
    if (!p) continue;
    auto m = match_container(*p, id);
    if (!m) continue;
    auto it = found.find(m->id);
    if (it == found.end() || m->path.size() < it->second.size()) found[m->id] = m->path;
  }
  closedir(d);
  if (found.empty())
    return Error{"no container with ID " + id + " (no process's cgroup names it in " + proc + "/*/cgroup)"};
  if (found.size() > 1) {
    std::string list;
    size_t n = 0;
    for (const auto& [full, path] : found) {
      if (n++ == 3) {
        list += ", ...";
        break;
      }
      list += (list.empty() ? "" : ", ") + full.substr(0, 16);
    }
    return Error{"container ID " + id + " is ambiguous: " + std::to_string(found.size()) + " containers match (" +
                 list + "); give more digits"};
  }
  const auto& [full, rel] = *found.begin();
  auto t = target_at(mount + rel, rel, mount + rel);
  if (!t) return Error{"container " + id + ": " + t.error()};
  CgroupTarget out = *t;
  out.container = full;
  return out;
}

Result<std::optional<CgroupTarget>> resolve_cgroup_options(const CommonOptions& o, const std::vector<uint32_t>& pids) {
  if (o.cgroup.empty() && o.container.empty()) return std::optional<CgroupTarget>();
  if (!o.cgroup.empty() && !o.container.empty()) return Error{"--cgroup and --container exclude each other"};
  Result<CgroupTarget> t = Error{""};
  if (!o.cgroup.empty()) {
    t = resolve_cgroup_path(o.cgroup);
  } else {
    auto id = parse_container_id(o.container);
    if (!id) return Error{id.error()};
    t = resolve_container(*id);
  }
  if (!t) return Error{t.error()};
  if (!pids.empty() && std::none_of(pids.begin(), pids.end(), [&](uint32_t p) { return pid_in_cgroup(p, *t); }))
    return Error{(pids.size() == 1 ? "PID " + std::to_string(pids[0]) + " is not" : std::string("no -p PID is")) +
                 " in cgroup " + t->path + " (-p and " + (o.cgroup.empty() ? "--container" : "--cgroup") +
                 " must both match)"};
  return std::optional<CgroupTarget>(*t);
}

bool pid_in_cgroup(uint32_t pid, const CgroupTarget& t) {
  auto p = cgroup_v2_path(read_small("/proc/" + std::to_string(pid) + "/cgroup", kMaxProcCgroup));
  if (!p) return false;
  if (t.rel == "/") return true;
  return *p == t.rel || p->compare(0, t.rel.size() + 1, t.rel + "/") == 0;
}

std::vector<uint32_t> cgroup_pids(const CgroupTarget& t, size_t max) {
  std::set<uint32_t> out;
  std::vector<std::string> dirs{t.path};
  size_t visited = 0;
  while (!dirs.empty() && out.size() < max && visited++ < 100000) {
    std::string dir = dirs.back();
    dirs.pop_back();
    std::istringstream procs(read_small(dir + "/cgroup.procs", 16 << 20));
    uint64_t pid;
    while (procs >> pid && out.size() < max)
      if (pid > 0 && pid <= UINT32_MAX) out.insert(static_cast<uint32_t>(pid));
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d))
      if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        dirs.push_back(dir + "/" + e->d_name);
    closedir(d);
  }
  return {out.begin(), out.end()};
}

nlohmann::json cgroup_json(const std::optional<CgroupTarget>& t) {
  if (!t) return nullptr;
  return {{"path", t->path},
          {"id", t->id},
          {"container", t->container.empty() ? nlohmann::json(nullptr) : nlohmann::json(t->container)}};
}

std::string cgroup_banner(const std::optional<CgroupTarget>& t) {
  if (!t) return "";
  if (!t->container.empty()) return " in container " + t->container.substr(0, 12) + " (" + t->path + ")";
  return " in cgroup " + t->path + " (id " + std::to_string(t->id) + ")";
}

Status add_cgroup_filter(BpfPlan& plan, const std::optional<CgroupTarget>& t, bool task_walk) {
  if (!t) return std::nullopt;
  plan.cgroup_filter(t->path, t->id);
  if (!task_walk) return std::nullopt;
  return add_kernel_offsets(plan, {
                                      {"OFF_TASK_CGROUPS", "task_struct", {"cgroups"}},
                                      {"OFF_CSS_SET_DFL_CGRP", "css_set", {"dfl_cgrp"}},
                                      {"OFF_CGROUP_KN", "cgroup", {"kn"}},
                                      {"OFF_CGROUP_SELF", "cgroup", {"self"}},
                                      {"OFF_CSS_PARENT", "cgroup_subsys_state", {"parent"}},
                                      {"OFF_KERNFS_NODE_ID", "kernfs_node", {"id"}},
                                  });
}

}  // namespace bpfdiag
