#include "common/tracefs.h"

#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace bpfdiag {

namespace {

bool dir_exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string tracefs_dir() {
  if (dir_exists("/sys/kernel/tracing/events")) return "/sys/kernel/tracing";
  if (dir_exists("/sys/kernel/debug/tracing/events")) return "/sys/kernel/debug/tracing";
  return "";
}

namespace {
bool g_private_mounts = false;  // this process has its own mount namespace
bool g_tracefs_private = false;  // ensure_tracefs mounted tracefs in it
}  // namespace

bool tracefs_mounted_privately() { return g_tracefs_private; }
bool private_mount_namespace() { return g_private_mounts; }

Status ensure_tracefs() {
  if (geteuid() != 0) return std::nullopt;  // preflight reports "not root"
  // A private mount namespace: mounts made here (tracefs, the compile-time kallsyms
  // stand-in below) vanish with this process and are never seen by the host.
  int ns_errno = 0;
  if (!g_private_mounts) {
    if (unshare(CLONE_NEWNS) == 0 && mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0)
      g_private_mounts = true;
    else
      ns_errno = errno;  // before tracefs_dir()'s stat() overwrites it
  }
  if (!tracefs_dir().empty()) return std::nullopt;
  if (!g_private_mounts)
    return Error{"tracefs is not mounted and a private mount namespace could not be created: " +
                 std::string(std::strerror(ns_errno)) + " (mount it with: mount -t tracefs nodev /sys/kernel/tracing)"};
  if (mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, nullptr) != 0)
    return Error{std::string("cannot mount tracefs on /sys/kernel/tracing: ") + std::strerror(errno) +
                 " (mount it with: mount -t tracefs nodev /sys/kernel/tracing)"};
  g_tracefs_private = true;
  return std::nullopt;
}


bool tracepoint_exists(const std::string& tp) {
  auto colon = tp.find(':');
  if (colon == std::string::npos) return false;
  std::string dir = tracefs_dir();
  return !dir.empty() && dir_exists(dir + "/events/" + tp.substr(0, colon) + "/" + tp.substr(colon + 1));
}

Status preflight(const std::vector<std::string>& tracepoints) {
  if (geteuid() != 0)
    return Error{"must run as root (BPF needs CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN); try sudo"};
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
    return Error{"kernel BTF not found at /sys/kernel/btf/vmlinux; a kernel built with CONFIG_DEBUG_INFO_BTF=y is required"};
  if (!tracepoints.empty() && tracefs_dir().empty())
    return Error{"tracefs is not mounted and could not be mounted; run: mount -t tracefs nodev /sys/kernel/tracing"};
  for (const auto& tp : tracepoints)
    if (!tracepoint_exists(tp))
      return Error{"kernel tracepoint " + tp + " not found (is CONFIG_FTRACE_SYSCALLS / the subsystem enabled?)"};
  return std::nullopt;
}

KallsymsStandIn::KallsymsStandIn(const std::string& dir, unsigned version_code) {
  if (!g_private_mounts) return;
  path_ = dir + "/kallsyms";
  FILE* f = std::fopen(path_.c_str(), "w");
  if (!f) return;
  if (version_code >= ((5u << 16) + (5u << 8))) std::fputs("ffffffff81000000 T bpf_probe_read_kernel\n", f);
  std::fclose(f);
  active_ = mount(path_.c_str(), "/proc/kallsyms", nullptr, MS_BIND, nullptr) == 0;
}

KallsymsStandIn::~KallsymsStandIn() {
  if (active_) umount2("/proc/kallsyms", MNT_DETACH);
}

}  // namespace bpfdiag
