// doctor's probes of the machine (a target's are in target.cpp): each reads the
// kernel's own answer (a file, a syscall that is tried for real) and says what it found.
#include <bcc/bcc_version.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/bpf_session.h"
#include "common/btf.h"
#include "common/kheaders.h"
#include "common/proc.h"
#include "tools/doctor/doctor.h"

namespace doctor {
using namespace bpfdiag;

namespace {

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

std::string read_text(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string errno_text(int e) { return std::string(strerrorname_np(e) ? strerrorname_np(e) : "E?") + " (" + std::strerror(e) + ")"; }

Check make(const char* category, const char* name, bool required) {
  return Check{category, name, Verdict::Ok, required, "", ""};
}

// CapEff bits of this process.
uint64_t effective_caps() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("CapEff:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  return 0;
}

Check privileges(bool& root) {
  Check k = make("system", "privileges", true);
  const uint64_t caps = effective_caps();
  const bool sys_admin = caps & (1ULL << 21), perfmon = caps & (1ULL << 38), bpf = caps & (1ULL << 39);
  root = geteuid() == 0 && (sys_admin || (bpf && perfmon));
  std::string have;
  for (auto [bit, name] : {std::pair<bool, const char*>{bpf, "CAP_BPF"}, {perfmon, "CAP_PERFMON"},
                           {sys_admin, "CAP_SYS_ADMIN"}})
    if (bit) have += std::string(have.empty() ? "" : ", ") + name;
  k.detail = "uid " + std::to_string(geteuid()) + ", effective capabilities: " + (have.empty() ? "none of CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN" : have);
  if (!root) {
    k.status = Verdict::Fail;
    k.fix = "must run as root (BPF needs CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN); try sudo";
  }
  return k;
}

Check kernel(unsigned& code) {
  Check k = make("system", "kernel", false);
  struct utsname u;
  uname(&u);
  code = kernel_version_code(u.release);
  k.detail = std::string(u.release) + " " + u.machine;
  if (code < ((5u << 16) | (8u << 8))) {
    k.status = Verdict::Warn;
    k.fix = "bpfdiag is tested on 5.8 and later (CAP_BPF, BTF, raw tracepoints); upgrade the kernel";
  } else if (std::string(u.machine) != "x86_64") {
    k.set(Verdict::Warn, "bpfdiag is built and tested for x86_64 (uprobe placement, frame-pointer checks)");
  }
  return k;
}

Check btf(bool& ok) {
  Check k = make("kernel", "btf", true);
  struct stat st;
  ok = false;
  if (stat("/sys/kernel/btf/vmlinux", &st) != 0) {
    k.status = Verdict::Fail;
    k.detail = "/sys/kernel/btf/vmlinux not found";
    k.fix = "a kernel built with CONFIG_DEBUG_INFO_BTF=y is required";
    return k;
  }
  // the file itself, parsed now (the tools may answer their lookups from the cache)
  auto parsed = check_btf_file();
  auto b = kernel_btf();
  if (parsed || !b) {
    k.status = Verdict::Fail;
    k.detail = "/sys/kernel/btf/vmlinux unreadable: " + (parsed ? parsed->message : b.error());
    k.fix = geteuid() ? "run as root" : "the kernel's BTF is damaged or too new for libbpf " + std::string(libbpf_version_string());
    return k;
  }
  auto off = (*b)->field_offset("task_struct", {"pid"});
  if (!off) {
    k.status = Verdict::Fail;
    k.detail = "BTF has no task_struct.pid: " + off.error();
    k.fix = "the kernel's BTF is incomplete; bpfdiag reads struct offsets from it";
    return k;
  }
  ok = true;
  char buf[160];
  std::snprintf(buf, sizeof buf, "/sys/kernel/btf/vmlinux, %.1f MB, task_struct.pid at offset %u",
                st.st_size / 1e6, *off);
  k.detail = buf;
  return k;
}

// Whether a sched_switch BPF never sees can be made good: some tasks run where no BPF
// program runs (on Firecracker guests, PID 1's threads), so the task each of them
// switches to is never seen switching in, nor the idle period one of them begins.
Check switch_recovery(bool btf_ok) {
  Check k = make("kernel", "switch_recovery", false);
  if (!btf_ok) {
    k.status = Verdict::Skip;
    k.detail = "needs the kernel's BTF (see the btf line)";
    return k;
  }
  BpfPlan offsets;
  const bool arrival = add_arrival_offsets(offsets);
  auto b = kernel_btf();
  const bool clock_idle = b && (*b)->has_field("rq", "clock_idle");
  if (arrival && clock_idle) {
    k.detail = "task_struct.sched_info and rq.clock_idle in BTF: a switch BPF never saw (no BPF program runs "
               "in some tasks' context, e.g. PID 1's threads on Firecracker guests) is recovered from the "
               "scheduler's own record and counted (offcputime, threadpool, runqlen: recovered_periods)";
    return k;
  }
  k.status = Verdict::Warn;
  k.detail = std::string("no ") + (arrival ? "rq.clock_idle" : "task_struct.sched_info (CONFIG_SCHED_INFO)") +
             " in BTF: a switch BPF never saw cannot be recovered";
  k.fix = "such periods are counted as dropped_periods (offcputime, threadpool, runqlen) and their time is "
          "left out; a kernel with CONFIG_SCHED_INFO=y (schedstats or delay accounting) recovers them";
  return k;
}

Check tracefs(bool root, bool& ok) {
  Check k = make("kernel", "tracefs", true);
  const std::string dir = tracefs_dir();
  ok = !dir.empty();
  if (ok && tracefs_mounted_privately()) {
    k.detail = "not mounted on the host; mounted in doctor's private mount namespace at " + dir +
               ", as every bpfdiag tool does (bpftrace and perf need: mount -t tracefs nodev " + dir + ")";
  } else if (ok) {
    k.detail = "mounted at " + dir;
  } else if (!root) {
    k.status = Verdict::Skip;
    k.detail = "not mounted; root can mount it (bpfdiag tools do, in a private mount namespace)";
  } else {
    k.status = Verdict::Fail;
    k.detail = "not mounted and could not be mounted";
    k.fix = "mount -t tracefs nodev /sys/kernel/tracing (CONFIG_TRACING is needed)";
  }
  return k;
}

// lockdown: "none [integrity] confidentiality". securityfs is mounted (in our private
// namespace only) when the host has not.
Check lockdown(bool root, std::string& mode) {
  Check k = make("kernel", "lockdown", true);
  const std::string path = "/sys/kernel/security/lockdown";
  std::string how;
  if (!exists(path) && root && private_mount_namespace() &&
      mount("securityfs", "/sys/kernel/security", "securityfs", 0, nullptr) == 0)
    how = " (securityfs mounted in doctor's private mount namespace)";
  if (!exists(path)) {
    k.status = Verdict::Skip;
    k.detail = root ? "no " + path + ": kernel without the lockdown LSM, assuming none"
                    : "no " + path + " (securityfs not mounted; root can mount it)";
    mode = root ? "none" : "";
    return k;
  }
  mode = lockdown_mode(read_text(path));
  k.detail = "mode " + (mode.empty() ? std::string("unknown") : mode) + how;
  if (mode == "integrity") {
    k.status = Verdict::Warn;
    k.detail += ": BPF may not write user memory, and may be refused other features (the fentry and "
                "tp_btf lines say which); kernel reads are allowed";
    k.fix = "bpfdiag needs none of the refused features; booting with lockdown=none (Secure Boot off) "
            "lifts it";
  } else if (mode == "confidentiality") {
    k.status = Verdict::Fail;
    k.detail += ": BPF may not read kernel memory";
    k.fix = "runqlen, offcputime and lockstat read kernel memory: boot with lockdown=integrity or none";
  }
  return k;
}

// A two-instruction BPF_PROG_TYPE_TRACING program, loaded and attached for real:
// `attach` BPF_TRACE_FENTRY at a kernel function or BPF_TRACE_RAW_TP (tp_btf).
Check tracing_prog(bool root, const char* name, enum bpf_attach_type attach) {
  Check k = make("bpf", name, false);
  const bool fentry = attach == BPF_TRACE_FENTRY;
  if (!root) {
    k.status = Verdict::Skip;
    k.detail = "needs root";
    return k;
  }
  struct btf* vmlinux = btf__load_vmlinux_btf();
  if (!vmlinux) {
    k.status = Verdict::Skip;
    k.detail = "no kernel BTF to find a target in";
    return k;
  }
  const char* target = fentry ? "do_nanosleep" : "btf_trace_sched_switch";
  int id = btf__find_by_name_kind(vmlinux, target, fentry ? BTF_KIND_FUNC : BTF_KIND_TYPEDEF);
  btf__free(vmlinux);
  if (id < 0) {
    k.status = Verdict::Skip;
    k.detail = std::string("no ") + target + " in the kernel's BTF";
    return k;
  }
  const struct bpf_insn prog[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},  // r0 = 0
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},                   // exit
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = attach, .attach_btf_id = static_cast<__u32>(id));
  const std::string what = fentry ? "fentry program on do_nanosleep" : "tp_btf program on sched_switch";
  int fd = bpf_prog_load(BPF_PROG_TYPE_TRACING, fentry ? "doctor_fentry" : "doctor_tp_btf", "GPL", prog, 2, &opts);
  if (fd < 0) {
    int e = errno;
    k.status = Verdict::Warn;
    k.detail = what + " refused at load: " + errno_text(e);
    if (e == EPERM) k.detail += ", as kernel lockdown does";
    k.fix = fentry ? "not needed: bpfdiag uses tracepoints; bpftrace fentry:/kfunc: and BCC's *_fentry tools "
                     "will fail (lift lockdown: see the lockdown line)"
                   : "not needed: bpfdiag uses raw tracepoints; bpftrace rawtracepoint with BTF args and "
                     "libbpf-tools tp_btf programs will fail";
    return k;
  }
  int link = bpf_link_create(fd, 0, attach, nullptr);
  int e = errno;
  close(fd);
  if (link < 0) {
    k.status = Verdict::Warn;
    k.detail = what + " loaded but attach refused: " + errno_text(e);
    k.fix = "not needed by bpfdiag; fentry/tp_btf tools of other suites will fail";
    return k;
  }
  close(link);
  k.detail = what + " loaded and attached";
  return k;
}

Check kprobes(const std::string& tracefs_root) {
  Check k = make("kernel", "kprobes", false);
  const bool pmu = exists("/sys/bus/event_source/devices/kprobe/type");
  const bool events = !tracefs_root.empty() && exists(tracefs_root + "/kprobe_events");
  if (pmu || events) {
    k.detail = std::string("available (") + (pmu ? "perf kprobe PMU" : "") + (pmu && events ? ", " : "") +
               (events ? "kprobe_events" : "") + ")";
    return k;
  }
  k.status = Verdict::Warn;
  k.detail = "absent: no /sys/bus/event_source/devices/kprobe and no kprobe_events in tracefs "
             "(kernel without CONFIG_KPROBES)";
  k.fix = "not needed: bpfdiag uses tracepoints only; BCC and bpftrace kprobe: tools need CONFIG_KPROBES=y";
  return k;
}

Check uprobes(bool& ok) {
  Check k = make("kernel", "uprobes", false);
  const std::string type = read_text("/sys/bus/event_source/devices/uprobe/type");
  ok = !type.empty();
  if (ok) {
    k.detail = "perf uprobe PMU, type " + type;
  } else {
    k.status = Verdict::Warn;
    k.detail = "absent: no /sys/bus/event_source/devices/uprobe";
    k.fix = "pmheld and lockstat --uprobes need a kernel with CONFIG_UPROBE_EVENTS=y";
  }
  return k;
}

Check perf_events(bool root, bool& ok) {
  Check k = make("kernel", "perf_events", false);
  ok = false;
  if (!root) {
    k.status = Verdict::Skip;
    k.detail = "needs root";
    return k;
  }
  struct perf_event_attr attr = {};
  attr.type = PERF_TYPE_SOFTWARE;
  attr.size = sizeof attr;
  attr.config = PERF_COUNT_SW_CPU_CLOCK;
  attr.freq = 1;
  attr.sample_freq = 99;
  attr.disabled = 1;
  int fd = static_cast<int>(syscall(__NR_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) {
    int e = errno;
    k.status = Verdict::Warn;
    k.detail = "cpu-clock perf event on CPU 0 refused: " + errno_text(e);
    k.fix = "runqlen and profile sample with perf events: a kernel with CONFIG_PERF_EVENTS is needed";
    return k;
  }
  close(fd);
  ok = true;
  k.detail = "cpu-clock sampling event opened on CPU 0 (" + std::to_string(online_cpus()) + " CPUs online)";
  return k;
}

Check paranoid(bool root) {
  Check k = make("system", "perf_event_paranoid", false);
  const std::string p = read_text("/proc/sys/kernel/perf_event_paranoid");
  const std::string u = read_text("/proc/sys/kernel/unprivileged_bpf_disabled");
  k.detail = "kernel.perf_event_paranoid=" + (p.empty() ? "?" : p) +
             ", kernel.unprivileged_bpf_disabled=" + (u.empty() ? "?" : u);
  if (root) {
    k.detail += " (no limit for root)";
  } else {
    k.status = Verdict::Warn;
    k.fix = "bpfdiag runs as root; these settings then do not matter";
  }
  return k;
}

// The memory cgroup limit of this process (cgroup v2), "" when none or unknown.
std::string memcg_limit() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return read_text("/sys/fs/cgroup" + line.substr(3) + "/memory.max");
  return "";
}

Check memlock(unsigned code) {
  Check k = make("system", "memlock", false);
  struct rlimit rl;
  getrlimit(RLIMIT_MEMLOCK, &rl);
  const std::string lim =
      rl.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(rl.rlim_cur / 1024) + " KiB";
  const std::string cg = memcg_limit();
  const bool memcg = code >= ((5u << 16) | (11u << 8));
  k.detail = "RLIMIT_MEMLOCK " + lim + "; " +
             (memcg ? "BPF memory is charged to the memory cgroup (kernel 5.11+), memlock is not used"
                    : "BPF memory is charged to RLIMIT_MEMLOCK (kernel before 5.11)") +
             "; memory.max " + (cg.empty() ? "unknown" : cg);
  if (!memcg && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (64ULL << 20)) {
    k.set(Verdict::Warn, "raise it: ulimit -l unlimited (maps fail to be created otherwise)");
  }
  if (!cg.empty() && cg != "max" && std::stoull(cg) < (256ULL << 20)) {
    k.status = Verdict::Warn;
    k.fix = "the memory cgroup allows under 256 MB: compiling a BPF program takes ~120 MB; raise memory.max";
  }
  return k;
}

Check kernel_headers() {
  Check k = make("bpf", "kernel_headers", false);
  struct utsname u;
  uname(&u);
  const std::string build = std::string("/lib/modules/") + u.release + "/build";
  if (exists(build + "/include")) {
    k.detail = "installed at " + build + "; bpfdiag does not use them (it compiles against its own header "
               "shim and reads struct offsets from BTF)";
  } else {
    k.detail = std::string("none for ") + u.release + " (stock BCC tools fail here, and Debian's headers of "
               "another release give wrong struct layouts); not needed: bpfdiag compiles against its own "
               "header shim (common/kheaders) and reads struct offsets from BTF";
  }
  return k;
}

Check libbcc() {
  Check k = make("bpf", "libbcc", true);
  k.detail = std::string("libbcc " LIBBCC_VERSION ", libbpf ") + libbpf_version_string();
  if (LIBBCC_VERSION_CODE < __LIBBCC_VERSION(0, 26, 0)) {
    k.status = Verdict::Warn;
    k.required = false;
    k.fix = "bpfdiag is tested with libbcc 0.26 (Debian 12's libbpfcc)";
  }
  return k;
}

}  // namespace

SystemProbe probe_system(const std::vector<const ToolEntry*>& tools) {
  SystemProbe out;
  Features& f = out.features;
  unsigned code = 0;
  std::string mode;
  out.checks.push_back(privileges(f.root));
  out.checks.push_back(kernel(code));
  out.checks.push_back(btf(f.btf));
  out.checks.push_back(switch_recovery(f.btf));
  out.checks.push_back(tracefs(f.root, f.tracefs));
  out.checks.push_back(lockdown(f.root, mode));
  out.checks.push_back(tracing_prog(f.root, "fentry", BPF_TRACE_FENTRY));
  out.checks.push_back(tracing_prog(f.root, "tp_btf", BPF_TRACE_RAW_TP));
  out.checks.push_back(kprobes(tracefs_dir()));
  out.checks.push_back(uprobes(f.uprobes));
  out.checks.push_back(perf_events(f.root, f.perf_cpu_clock));
  out.checks.push_back(paranoid(f.root));
  out.checks.push_back(memlock(code));
  out.checks.push_back(kernel_headers());
  out.checks.push_back(libbcc());
  for (const auto& tp : matrix_tracepoints(tools))
    if (tracepoint_exists(tp)) f.tracepoints.insert(tp);
  return out;
}

}  // namespace doctor
