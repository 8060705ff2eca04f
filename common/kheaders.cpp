#include "common/kheaders.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/embedded.h"

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

Status write_header_shim(const std::string& dir, const std::string& release) {
  for (const auto& f : kShim)
    if (auto st = write_file(dir + "/" + f.path, f.text)) return st;
  unsigned code = kernel_version_code(release);
  std::string version = "#pragma once\n#define LINUX_VERSION_CODE " + std::to_string(code) +
                        "\n#define KERNEL_VERSION(a, b, c) (((a) << 16) + ((b) << 8) + ((c) > 255 ? 255 : (c)))\n";
  if (auto st = write_file(dir + "/include/linux/version.h", version)) return st;
  if (auto st = write_file(dir + "/include/generated/uapi/linux/version.h", version)) return st;
  for (const EmbeddedFile* e = kEmbeddedBpfHeaders; e->name; ++e)
    if (auto st = write_file(dir + "/include/bpfdiag/" + e->name, e->text)) return st;
  return std::nullopt;
}

}  // namespace bpfdiag
