#include "common/kheaders.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "common/embedded.h"
#include "common/runloop.h"
#include "common/target.h"

namespace bpfdiag {
namespace {

const char kKconfig[] = R"(#pragma once
#define CONFIG_BPF_SYSCALL 1
#define CONFIG_X86_64 1
#define CONFIG_64BIT 1
#define IS_ENABLED(x) 0
)";

const char kTypes[] = R"(#pragma once
typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef signed short __s16;
typedef unsigned int __u32;
typedef signed int __s32;
typedef unsigned long long __u64;
typedef signed long long __s64;
typedef __u8 u8;
typedef __s8 s8;
typedef __u16 u16;
typedef __s16 s16;
typedef __u32 u32;
typedef __s32 s32;
typedef __u64 u64;
typedef __s64 s64;
typedef __u64 __attribute__((aligned(8))) __aligned_u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u16 __le16;
typedef __u32 __le32;
typedef __u64 __le64;
typedef __u16 __sum16;
typedef __u32 __wsum;
typedef unsigned long size_t;
typedef long ssize_t;
typedef unsigned long uintptr_t;
typedef long intptr_t;
typedef _Bool bool;
#define true 1
#define false 0
#define NULL ((void *)0)
typedef int pid_t;
typedef int clockid_t;
typedef int timer_t;
typedef unsigned int uid_t;
typedef unsigned int gid_t;
typedef unsigned short umode_t;
typedef long long loff_t;
typedef long off_t;
typedef unsigned int fmode_t;
typedef unsigned long sector_t;
typedef unsigned int dev_t;
typedef unsigned int gfp_t;
typedef int key_serial_t;
typedef int mqd_t;
typedef unsigned int qid_t;
typedef long time_t;
typedef long __kernel_long_t;
typedef unsigned long __kernel_ulong_t;
typedef int __kernel_pid_t;
typedef unsigned int __kernel_uid32_t;
typedef unsigned int __kernel_gid32_t;
typedef long long __kernel_time64_t;
typedef int __kernel_clockid_t;
typedef unsigned int __poll_t;
typedef unsigned long cputime_t;
typedef struct { int counter; } atomic_t;
typedef struct { long counter; } atomic64_t;
)";

const char kLog2[] = R"(#pragma once
#define __rup2_1(n) ((n) - 1)
#define __rup2_2(n) (__rup2_1(n) | (__rup2_1(n) >> 1))
#define __rup2_4(n) (__rup2_2(n) | (__rup2_2(n) >> 2))
#define __rup2_8(n) (__rup2_4(n) | (__rup2_4(n) >> 4))
#define __rup2_16(n) (__rup2_8(n) | (__rup2_8(n) >> 8))
#define __rup2_32(n) (__rup2_16(n) | (__rup2_16(n) >> 16))
#define roundup_pow_of_two(n) ((n) <= 1 ? 1 : ((unsigned long)(__rup2_32((unsigned long)(n)) | (__rup2_32((unsigned long)(n)) >> 32)) + 1))
)";

const char kPage[] = R"(#pragma once
#define PAGE_SHIFT 12
#define PAGE_SIZE (1UL << PAGE_SHIFT)
)";

const char kPtrace[] = R"(#pragma once
#include <linux/types.h>
/* x86_64 kernel layout of struct pt_regs (arch/x86/include/asm/ptrace.h) */
struct pt_regs {
  unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
  unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
)";

const char kPerfEvent[] = R"(#pragma once
#include <uapi/linux/ptrace.h>
typedef struct pt_regs bpf_user_pt_regs_t;
struct bpf_perf_event_data {
  bpf_user_pt_regs_t regs;
  __u64 sample_period;
  __u64 addr;
};
)";

const char kTimespec[] = R"(#pragma once
#include <linux/types.h>
struct __kernel_timespec {
  long long tv_sec;
  long long tv_nsec;
};
)";

struct ShimFile {
  const char* path;
  const char* text;
};

const ShimFile kShim[] = {
    {"include/linux/kconfig.h", kKconfig},
    {"include/linux/types.h", kTypes},
    {"include/linux/log2.h", kLog2},
    {"include/asm/page.h", kPage},
    {"include/uapi/linux/ptrace.h", kPtrace},
    {"include/linux/ptrace.h", "#pragma once\n#include <uapi/linux/ptrace.h>\n"},
    {"include/uapi/linux/bpf_perf_event.h", kPerfEvent},
    {"include/linux/time_types.h", kTimespec},
    {"include/linux/bpf_common.h", "#pragma once\n"},
    {"include/uapi/linux/bpf.h", "#pragma once\n"},
    {"include/uapi/linux/if_packet.h", "#pragma once\n"},
    {"include/linux/sched.h", "#pragma once\n#include <linux/types.h>\n#define TASK_COMM_LEN 16\n"},
};

Status mkdirs(const std::string& path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    std::string sub = path.substr(0, pos);
    if (mkdir(sub.c_str(), 0700) != 0 && errno != EEXIST)
      return Error{"cannot create " + sub + ": " + std::strerror(errno)};
  }
  return std::nullopt;
}

Status write_file(const std::string& path, const std::string& text) {
  auto slash = path.rfind('/');
  if (auto st = mkdirs(path.substr(0, slash))) return st;
  std::ofstream f(path, std::ios::trunc);
  f << text;
  if (!f) return Error{"cannot write " + path};
  return std::nullopt;
}

}  // namespace

unsigned kernel_version_code(const std::string& release) {
  unsigned a = 0, b = 0, c = 0;
  std::sscanf(release.c_str(), "%u.%u.%u", &a, &b, &c);
  return (a << 16) + (b << 8) + (c > 255 ? 255 : c);
}

std::vector<std::pair<std::string, std::string>> header_shim_files(const std::string& release) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& f : kShim) files.emplace_back(f.path, f.text);
  unsigned code = kernel_version_code(release);
  std::string version = "#pragma once\n#define LINUX_VERSION_CODE " + std::to_string(code) +
                        "\n#define KERNEL_VERSION(a, b, c) (((a) << 16) + ((b) << 8) + ((c) > 255 ? 255 : (c)))\n";
  files.emplace_back("include/linux/version.h", version);
  files.emplace_back("include/generated/uapi/linux/version.h", version);
  return files;
}

Status write_header_shim(const std::string& dir, const std::string& release) {
  for (const auto& [path, text] : header_shim_files(release))
    if (auto st = write_file(dir + "/" + path, text)) return st;
  for (const EmbeddedFile* e = kEmbeddedBpfHeaders; e->name; ++e)
    if (auto st = write_file(dir + "/include/bpfdiag/" + e->name, e->text)) return st;
  return std::nullopt;
}

namespace {
const char kDirPrefix[] = "bpfdiag-kheaders-";
}

std::string temp_root() {
  const char* t = std::getenv("TMPDIR");
  struct stat st;
  if (t && t[0] == '/' && stat(t, &st) == 0 && S_ISDIR(st.st_mode)) {
    std::string r = t;
    while (r.size() > 1 && r.back() == '/') r.pop_back();
    return r;
  }
  return "/tmp";
}

size_t sweep_stale_header_dirs(const std::string& root) {
  DIR* d = opendir(root.c_str());
  if (!d) return 0;
  std::vector<std::string> stale;
  const size_t plen = sizeof kDirPrefix - 1;
  while (auto* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, plen, kDirPrefix) != 0) continue;
    std::string path = root + "/" + name;
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    unsigned long pid = 0;
    unsigned long long start = 0;
    int used = 0;
    if (std::sscanf(name.c_str() + plen, "%lu-%llu-%n", &pid, &start, &used) == 2 && used > 0) {
      auto now = proc_start_time(static_cast<uint32_t>(pid));
      if (now && *now == start) continue;  // its creator is still at work
    } else if (std::time(nullptr) - st.st_mtime < 3600) {
      continue;  // an older tool's unnamed dir: only once surely abandoned
    }
    stale.push_back(path);
  }
  closedir(d);
  size_t n = 0;
  for (const auto& p : stale) {
    std::error_code ec;
    if (std::filesystem::remove_all(p, ec) > 0 && !ec) ++n;
  }
  return n;
}

Result<std::unique_ptr<HeaderDir>> HeaderDir::create(const std::string& release) {
  const std::string root = temp_root();
  sweep_stale_header_dirs(root);
  const uint32_t self = static_cast<uint32_t>(getpid());
  std::string tmpl = root + "/" + kDirPrefix + std::to_string(self) + "-" +
                     std::to_string(proc_start_time(self).value_or(0)) + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  std::unique_ptr<HeaderDir> h(new HeaderDir());
  {
    StopSignalsBlocked hold;  // no stop signal between creating the dir and registering it
    if (!mkdtemp(buf.data()))
      return Error{"cannot create a temp dir in " + root + ": " + std::strerror(errno) +
                   " (set TMPDIR to a writable directory)"};
    h->path_ = buf.data();
    register_temp_paths({h->path_});  // a stop signal removes the dir and all under it
  }
  if (auto st = write_header_shim(h->path_, release)) return Error{st->message};
  return h;
}

HeaderDir::~HeaderDir() {
  // Removed while still registered: a stop signal in between finishes the job.
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  register_temp_paths({});
}

}  // namespace bpfdiag
