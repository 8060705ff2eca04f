#include "common/bpf_session.h"

#include "common/bpf_counters.h"
#include "common/runloop.h"

#include <bcc/bcc_syms.h>
#include <bcc/libbpf.h>
#include <sched.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "common/bpf_object.h"
#include "common/filters.h"
#include "common/kheaders.h"
#include "common/timing.h"

namespace bpfdiag {
namespace fs = std::filesystem;

namespace {

bool dir_exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

// libbcc's StatusTuple message, reduced to its most useful line.
std::string bcc_msg(const ebpf::StatusTuple& st) {
  std::string m = st.msg();
  return m.empty() ? "error " + std::to_string(st.code()) : first_line(m);
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

namespace {
// libbcc's compiler (BFrontendAction::DoMiscWorkAround) looks up one kernel symbol,
// bpf_probe_read_kernel, to decide whether the kernel has that helper, and to do so
// it parses all of /proc/kallsyms: ~40% of a compile here. In our private mount
// namespace a one-line stand-in answers the same question (the helper exists from
// 5.5 on) during the compile only; the real file is back before anything else runs.
class KallsymsStandIn {
 public:
  KallsymsStandIn(const std::string& dir, unsigned version_code) {
    if (!g_private_mounts) return;
    path_ = dir + "/kallsyms";
    FILE* f = std::fopen(path_.c_str(), "w");
    if (!f) return;
    if (version_code >= ((5u << 16) + (5u << 8))) std::fputs("ffffffff81000000 T bpf_probe_read_kernel\n", f);
    std::fclose(f);
    active_ = mount(path_.c_str(), "/proc/kallsyms", nullptr, MS_BIND, nullptr) == 0;
  }
  ~KallsymsStandIn() {
    if (active_) umount2("/proc/kallsyms", MNT_DETACH);
  }

 private:
  std::string path_;
  bool active_ = false;
};
}  // namespace

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

std::string ebpf_listing(const std::string& text, const std::vector<std::string>& cflags0) {
  std::ostringstream os;
  std::vector<std::string> cflags = cflags0;
  auto maps = take_id_maps(cflags);
  for (const auto& m : maps)
    os << "/* " << m.macro << ": " << m.ids.size() << " IDs, loaded into map " << m.map << " */\n";
  for (const auto& f : cflags) {
    if (f.rfind("-D", 0) != 0) continue;
    std::string def = f.substr(2);
    auto eq = def.find('=');
    os << "#define " << (eq == std::string::npos ? def : def.substr(0, eq) + " " + def.substr(eq + 1))
       << "\n";
  }
  os << id_map_prelude(maps) << text;
  return os.str();
}

// --- StderrNoiseFilter -------------------------------------------------------------

bool is_libbcc_noise(const std::string& line) {
  static const char* kNoise[] = {"sha1 socket not available", "cannot get prog tag",
                                 "Kernel lockdown", "could not open bpf map"};
  for (const char* n : kNoise)
    if (line.find(n) != std::string::npos) return true;
  return false;
}

StderrNoiseFilter::StderrNoiseFilter() {
  std::fflush(stderr);
  tmp_fd_ = memfd_create("bpfdiag-stderr", MFD_CLOEXEC);  // no file anywhere
  if (tmp_fd_ < 0) return;
  saved_fd_ = dup(STDERR_FILENO);
  dup2(tmp_fd_, STDERR_FILENO);
}

std::string StderrNoiseFilter::captured() const {
  std::string all;
  if (tmp_fd_ < 0) return all;
  std::fflush(stderr);
  char buf[4096];
  ssize_t n;
  for (off_t off = 0; (n = pread(tmp_fd_, buf, sizeof buf, off)) > 0; off += n) all.append(buf, static_cast<size_t>(n));
  return all;
}

StderrNoiseFilter::~StderrNoiseFilter() {
  if (tmp_fd_ < 0) return;
  std::fflush(stderr);
  dup2(saved_fd_, STDERR_FILENO);
  close(saved_fd_);
  lseek(tmp_fd_, 0, SEEK_SET);
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = read(tmp_fd_, buf, sizeof buf)) > 0) all.append(buf, static_cast<size_t>(n));
  close(tmp_fd_);
  if (discard_ && !std::getenv("BPFDIAG_DEBUG")) return;
  std::istringstream in(all);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && !is_libbcc_noise(line)) std::fprintf(stderr, "%s\n", line.c_str());
}

// --- compile errors ----------------------------------------------------------------

// clang's diagnostics run to many lines; the first "error:" line says what broke.
std::string first_compile_error(const std::string& diagnostics) {
  std::istringstream in(diagnostics);
  for (std::string line; std::getline(in, line);)
    if (line.find("error:") != std::string::npos || line.find("LLVM ERROR") != std::string::npos) {
      const std::string unknown = "error: <unknown>:0:0: ";  // LLVM backend errors: no location
      if (line.rfind(unknown, 0) == 0) line = "error: " + line.substr(unknown.size());
      return first_line(line);
    }
  return "";
}

namespace {

// LLVM's BPF backend reports some errors (e.g. "Looks like the BPF stack limit of
// 512 bytes is exceeded") through its fatal-error path, which prints them and calls
// exit(1) inside libbcc's compile, while stderr is captured: the user would see
// nothing. While a compile runs, an atexit handler turns what was captured into the
// same one line as a returned compile error, on the real stderr (exit status stays 1).
struct RescueState {
  int real_stderr = -1;
  StderrNoiseFilter* quiet = nullptr;
};
RescueState g_rescue;

void compile_exit_rescue() {
  if (!g_rescue.quiet || g_rescue.real_stderr < 0) return;
  std::string all = g_rescue.quiet->captured();
  std::string first = first_compile_error(all);
  if (first.empty()) first = "the compiler exited without a message";
  std::string line = std::string(program_invocation_short_name) + ": cannot compile BPF program: " + first +
                     " (BPFDIAG_DEBUG=1 shows all diagnostics)\n";
  if (std::getenv("BPFDIAG_DEBUG")) line = all + line;
  if (write(g_rescue.real_stderr, line.data(), line.size()) < 0) {
  }
}

}  // namespace

CompileExitRescue::CompileExitRescue() {
  static bool registered = (std::atexit(compile_exit_rescue), true);
  (void)registered;
  std::fflush(stderr);
  g_rescue.real_stderr = dup(STDERR_FILENO);
}

void CompileExitRescue::watch(StderrNoiseFilter* quiet) { g_rescue.quiet = quiet; }

CompileExitRescue::~CompileExitRescue() {
  g_rescue.quiet = nullptr;
  if (g_rescue.real_stderr >= 0) close(g_rescue.real_stderr);
  g_rescue.real_stderr = -1;
}

// --- BpfSession --------------------------------------------------------------------

// One line for a program the kernel refused to load, from what libbcc printed while
// loading it (the verifier log, or its E2BIG note): a verifier rejection is named as
// such, with the instructions the verifier processed when the log says.
std::string load_failure_line(const std::string& fn, const std::string& printed, const std::string& bcc) {
  if (printed.find("Argument list too long") != std::string::npos)  // E2BIG: the complexity limit
    return "the kernel verifier rejected " + fn +
           ": over 1000000 instructions processed (its complexity limit; the program is too complex to verify)";
  std::istringstream in(printed);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && !is_libbcc_noise(l)) lines.push_back(first_line(l));
  std::string processed, reason;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("processed ", 0) != 0) continue;
    auto n = lines[i].find(" insns");
    processed = lines[i].substr(10, n == std::string::npos ? std::string::npos : n - 10);
    for (size_t j = i; j-- > 0;) {  // the verifier's message: the last line that is no instruction dump
      const std::string& l = lines[j];
      size_t d = 0;
      while (d < l.size() && std::isdigit(static_cast<unsigned char>(l[d]))) ++d;
      if ((d && d < l.size() && l[d] == ':') || l.rfind("bpf: ", 0) == 0 || l[0] == ';' || l[0] == '\t' ||
          l.rfind("func#", 0) == 0 || l.find("safe") == 0)
        continue;
      reason = l;
      break;
    }
    break;
  }
  if (processed.empty())  // no verifier log: not a verifier rejection we can name
    return "cannot load " + fn + ": " + bcc;
  return "the kernel verifier rejected " + fn + ": " + (reason.empty() ? bcc : reason) + " (processed " + processed +
         " insns)";
}

// Loads (verifies) `fn` ahead of its attach: a refusal is then reported as the
// verifier's, not as an attach failure. The fd is kept for the session.
Result<int> BpfSession::load_program(const std::string& fn, int type) {
  auto done = prog_fds_.find(fn);
  if (done != prog_fds_.end()) return done->second;
  auto it = progs_.find(fn);
  if (it == progs_.end()) return Error{"cannot load " + fn + ": no such function in the BPF program"};
  const auto& insns = it->second;
  int fd = -1, err = 0;
  std::string printed;
  {
    StderrNoiseFilter quiet;
    // log_buf null: libbcc retries a refused load with the verifier log and prints it
    errno = 0;
    fd = bcc_prog_load(static_cast<enum bpf_prog_type>(type), fn.c_str(),
                       reinterpret_cast<const struct bpf_insn*>(insns.data()), static_cast<int>(insns.size()),
                       license_.c_str(), kern_version_, 0, nullptr, 0);
    if (fd < 0) {
      err = fd < -1 ? -fd : errno;  // libbpf returns -errno; older paths -1 and errno
      printed = quiet.captured();
      quiet.discard();  // the verifier log runs to thousands of lines: one line below
    }
  }
  if (fd < 0) {
    std::string line = load_failure_line(fn, printed, "Failed to load " + fn + ": " + std::strerror(err));
    if (from_cache_) {  // never the same refusal twice from a cached object: recompile next time
      if (auto cache = BpfObjectCache::open()) cache->remove(cache_key_);
      line += " (from the compiled-object cache, now removed: run again to recompile)";
    }
    return Error{line};
  }
  prog_fds_[fn] = fd;
  if (timing_on()) timing_mark("verify " + fn + " (" + std::to_string(verified_insns(fd)) + " insns)");
  return fd;
}

uint64_t BpfSession::verified_insns(int fd) {
  struct bpf_prog_info info = {};
  __u32 len = sizeof info;
  if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) return 0;
  return info.verified_insns;
}

void BpfSession::note_program(const std::string& fn) {
  auto it = prog_fds_.find(fn);
  if (it != prog_fds_.end()) noted_.insert(it->second);
}

uint64_t BpfSession::recursion_misses() const {
  uint64_t sum = 0;
  for (int fd : noted_) {
    struct bpf_prog_info info = {};
    __u32 len = sizeof info;
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) sum += info.recursion_misses;
  }
  return sum;
}

const ebpf::TableDesc& BpfSession::table(const std::string& name) const {
  static const ebpf::TableDesc none;
  auto it = tables_.find(name);
  return it == tables_.end() ? none : it->second;
}

void BpfSession::close_probe(Probe& p) {
  if (p.fd >= 0) {
    if (p.raw)
      close(p.fd);
    else
      bpf_close_perf_event_fd(p.fd);  // disables the perf event, then closes it
  }
  p.fd = -1;
  if (!p.uprobe_event.empty()) bpf_detach_uprobe(p.uprobe_event.c_str());
  p.uprobe_event.clear();
}

BpfSession::~BpfSession() {
  StderrNoiseFilter quiet;
  for (int fd : perf_fds_) {
    ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
    close(fd);
  }
  for (auto& [name, p] : probes_) close_probe(p);
  perf_buffers_.clear();
  for (auto& [name, fd] : prog_fds_) close(fd);
  // the maps' fds close with tables_
}

void BpfSession::disable_perf_events() {
  for (int fd : perf_fds_) ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
}

Result<std::unique_ptr<BpfSession>> BpfSession::load(const std::string& text,
                                                     const std::vector<std::string>& cflags) {
  // libbcc splits cflags on white space: a flag with a space would silently become
  // a different (broken) macro, so refuse it loudly.
  for (const auto& f : cflags)
    if (f.find_first_of(" \t") != std::string::npos)
      return Error{"internal error: BPF cflag contains white space: " + f};
  std::vector<std::string> flags = cflags;
  auto id_maps = take_id_maps(flags);
  const std::string full_text = id_map_prelude(id_maps) + text;
  timing_mark("(load start)");
  // libbcc always compiles with -g to emit BTF for the maps' key/value types, which
  // only its pretty-printers and spin-lock/kptr maps need; we use neither. -g0 (last
  // -g flag wins) saves clang's debug-info generation and libbcc's BTF processing and
  // loading. BPFDIAG_BPF_BTF=1 keeps it (e.g. for bpftool map dump with types), and
  // skips the cache (a cached object has no BTF).
  const bool keep_btf = std::getenv("BPFDIAG_BPF_BTF") != nullptr;
  if (!keep_btf) flags.push_back("-g0");
  // libbcc's clang runs its -O2 pipeline and libbcc then runs LLVM's -O3 pipeline on
  // the result again: let only the second one run (-15% compile time, same code).
  flags.push_back("-Xclang");
  flags.push_back("-disable-llvm-passes");
  release_kernel_btf();  // offsets are in the cflags by now: keep the peak RSS down

  std::optional<BpfObjectCache> cache;
  if (!keep_btf) cache = BpfObjectCache::open();
  const std::string key = cache ? BpfObjectCache::key(full_text, flags) : "";
  std::optional<BpfObject> obj;
  std::vector<int> fds;
  std::unique_ptr<BpfSession> s(new BpfSession());
  if (cache && (obj = cache->get(key))) {
    timing_mark("compiled object from cache");
    auto made = create_maps(*obj);
    if (!made) return Error{made.error()};
    fds = std::move(made.value());
    s->from_cache_ = true;
    s->cache_key_ = key;
  } else {
    struct utsname u;
    uname(&u);
    auto dir = HeaderDir::create(u.release);
    if (!dir) return Error{dir.error()};
    timing_mark("header shim written");
    setenv("BCC_KERNEL_SOURCE", dir.value()->path().c_str(), 1);
    flags.push_back("-I" + dir.value()->path() + "/include/bpfdiag");
    Result<BpfObject> compiled = Error{""};
    std::string diagnostics;
    {
      CompileExitRescue rescue;  // LLVM's backend exit(1)s on some errors: one line even then
      StderrNoiseFilter quiet;
      rescue.watch(&quiet);
      KallsymsStandIn fast_compile(dir.value()->path(), kernel_version_code(u.release));
      compiled = compile_bpf_object(full_text, flags, fds);
      if (!compiled) {
        diagnostics = quiet.captured() + "\n" + compiled.error();
        quiet.discard();
      }
    }
    timing_mark("libbcc compile + maps");
    dir.value().reset();  // the headers are not needed once compiled
    timing_mark("header shim removed");
    if (!compiled) {
      // clang's diagnostics run to many lines; the first "error:" line says what broke
      std::string first = first_compile_error(diagnostics);
      if (first.empty()) first = first_line(compiled.error());
      return Error{"cannot compile BPF program: " + first + " (BPFDIAG_DEBUG=1 shows all diagnostics)"};
    }
    if (cache) {
      cache->put(key, compiled.value());
      timing_mark("compiled object cached");
    }
    obj = std::move(compiled.value());
  }
  // From here a fresh compile and a cached object are loaded the same way.
  if (auto st = relocate_maps(*obj, fds)) {
    for (int fd : fds) close(fd);
    return Error{"cannot load the compiled BPF program: " + st->message};
  }
  for (size_t i = 0; i < obj->maps.size(); ++i) {
    const auto& m = obj->maps[i];
    s->tables_.emplace(m.name, ebpf::TableDesc(m.name, ebpf::FileDesc(fds[i]), m.type, m.key_size, m.value_size,
                                               m.max_entries, static_cast<int>(m.flags)));
  }
  s->license_ = obj->license;
  s->kern_version_ = obj->kern_version;
  for (auto& p : obj->progs) s->progs_[p.name] = std::move(p.insns);
  // -p/-t lists too long for a constant expression: their maps, filled before any
  // program is attached, so no event is filtered against an empty map
  for (const auto& m : id_maps) {
    auto table = s->get_hash_table<uint32_t, uint8_t>(m.map);
    for (uint32_t id : m.ids) {
      auto ust = table.update_value(id, 1);
      if (!ust.ok()) return Error{"cannot fill the " + m.macro + " filter map: " + bcc_msg(ust)};
    }
  }
  timing_mark("id filter maps");
  return s;
}

Status BpfSession::attach_tracepoint(const std::string& tp, const std::string& fn) {
  auto fd = load_program(fn, BPF_PROG_TYPE_TRACEPOINT);
  if (!fd) return Error{fd.error()};
  auto colon = tp.find(':');
  if (colon == std::string::npos) return Error{"internal error: tracepoint " + tp + " is not CATEGORY:NAME"};
  if (probes_.count("tp:" + tp)) return Error{"tracepoint " + tp + " is attached already"};
  int link;
  {
    StderrNoiseFilter quiet;
    link = bpf_attach_tracepoint(*fd, tp.substr(0, colon).c_str(), tp.substr(colon + 1).c_str());
  }
  if (timing_on()) timing_mark("attach tp " + tp);
  if (link < 0)
    return Error{"cannot attach tracepoint " + tp + ": " + std::strerror(errno) + "; is CONFIG_TRACEPOINTS enabled?"};
  probes_["tp:" + tp].fd = link;
  note_program(fn);
  enter_reporting();  // attached: a stop signal now asks for the report
  return std::nullopt;
}

Status BpfSession::attach_raw_tracepoint(const std::string& tp, const std::string& fn) {
  auto fd = load_program(fn, BPF_PROG_TYPE_RAW_TRACEPOINT);
  if (!fd) return Error{fd.error()};
  if (probes_.count("raw:" + tp)) return Error{"raw tracepoint " + tp + " is attached already"};
  int link;
  {
    StderrNoiseFilter quiet;
    link = bpf_attach_raw_tracepoint(*fd, tp.c_str());
  }
  if (timing_on()) timing_mark("attach raw tp " + tp);
  if (link < 0)
    return Error{"cannot attach raw tracepoint " + tp + ": " + std::strerror(errno) +
                 "; is CONFIG_TRACEPOINTS enabled?"};
  Probe& p = probes_["raw:" + tp];
  p.fd = link;
  p.raw = true;
  note_program(fn);
  enter_reporting();  // attached: a stop signal now asks for the report
  return std::nullopt;
}

void BpfSession::detach_raw_tracepoint(const std::string& tp) {
  auto it = probes_.find("raw:" + tp);
  if (it == probes_.end()) return;
  close_probe(it->second);
  probes_.erase(it);
}

Status BpfSession::attach_perf_event(uint32_t type, uint32_t config, const std::string& fn,
                                     uint64_t freq_hz) {
  // Opened here rather than with libbcc's perf event attach (its 0.26 version crashes
  // on detach); we own the fds and close them on destruction.
  auto loaded = load_program(fn, BPF_PROG_TYPE_PERF_EVENT);
  if (!loaded) return Error{loaded.error()};
  int prog_fd = *loaded;
  StderrNoiseFilter quiet;
  for (int cpu = 0; cpu < libbpf_num_possible_cpus(); ++cpu) {
    struct perf_event_attr attr = {};
    attr.type = type;
    attr.size = sizeof attr;
    attr.config = config;
    attr.freq = 1;
    attr.sample_freq = freq_hz;
    int fd = static_cast<int>(syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      if (errno == ENODEV || errno == EINVAL) continue;  // CPU offline
      return Error{"cannot open perf event on CPU " + std::to_string(cpu) + ": " + std::strerror(errno)};
    }
    perf_fds_.push_back(fd);
    if (ioctl(fd, PERF_EVENT_IOC_SET_BPF, prog_fd) != 0 || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0)
      return Error{"cannot attach " + fn + " to perf event on CPU " + std::to_string(cpu) + ": " +
                   std::strerror(errno)};
  }
  if (perf_fds_.empty()) return Error{"cannot open a perf event on any CPU"};
  note_program(fn);
  if (timing_on()) timing_mark("attach perf events");
  enter_reporting();  // attached: a stop signal now asks for the report
  return std::nullopt;
}

namespace {
// libbcc's name for a uprobe's tracefs event (used only where the kernel lacks the
// uprobe PMU): "p_" or "r_", the path with every other character as '_', the offset.
std::string uprobe_event_name(const std::string& module, uint64_t offset, bool ret, int pid) {
  std::string e = ret ? "r_" : "p_";
  for (char ch : module) e += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  char off[32];
  std::snprintf(off, sizeof off, "_0x%llx", static_cast<unsigned long long>(offset));
  e += off;
  if (pid != -1) e += "_" + std::to_string(pid);
  return e;
}

// The file offset of `symbol` (or of virtual address `addr`) in `binary`.
Result<std::pair<std::string, uint64_t>> resolve_uprobe(const std::string& binary, const std::string& symbol,
                                                        uint64_t addr) {
  struct bcc_symbol sym = {};
  if (bcc_resolve_symname(binary.c_str(), symbol.empty() ? nullptr : symbol.c_str(), addr, -1, nullptr, &sym) < 0)
    return Error{symbol.empty() ? "address " + std::to_string(addr) + " is not in a loadable segment"
                                : "symbol " + symbol + " not found"};
  std::string module = sym.module ? sym.module : binary;
  ::free(const_cast<char*>(sym.module));
  return std::make_pair(module, static_cast<uint64_t>(sym.offset));
}
}  // namespace

Status BpfSession::attach_uprobe_offset(const std::string& module, uint64_t offset, const std::string& fn,
                                        bool ret, int pid, const std::string& what) {
  auto fd = load_program(fn, BPF_PROG_TYPE_KPROBE);
  if (!fd) return Error{fd.error()};
  std::string event = uprobe_event_name(module, offset, ret, pid);
  if (probes_.count("uprobe:" + event)) return Error{what + " is attached already"};
  int link;
  {
    StderrNoiseFilter quiet;
    link = bpf_attach_uprobe(*fd, ret ? BPF_PROBE_RETURN : BPF_PROBE_ENTRY, event.c_str(), module.c_str(), offset,
                             pid, 0);
  }
  if (link < 0) return Error{"Unable to attach " + what + ": " + std::strerror(errno)};
  Probe& p = probes_["uprobe:" + event];
  p.fd = link;
  // libbcc made a tracefs event only when the kernel has no uprobe PMU
  std::string dir = tracefs_dir();
  if (!dir.empty() && access((dir + "/events/uprobes/" + event + "_bcc_" + std::to_string(getpid())).c_str(), F_OK) == 0)
    p.uprobe_event = event;
  note_program(fn);
  enter_reporting();  // attached: a stop signal now asks for the report
  return std::nullopt;
}

Status BpfSession::attach_uprobe(const std::string& binary, const std::string& symbol,
                                 const std::string& fn, bool ret, int pid) {
  const std::string kind = ret ? "uretprobe" : "uprobe";
  auto where = resolve_uprobe(binary, symbol, 0);
  Status st = where ? attach_uprobe_offset(where->first, where->second, fn, ret, pid, kind + " " + binary + ":" + symbol)
                    : Status(Error{where.error()});
  if (st) return Error{"cannot attach " + kind + " to " + binary + ":" + symbol + ": " + st->message};
  if (timing_on()) timing_mark("attach " + kind + " " + symbol);
  return std::nullopt;
}

Status BpfSession::attach_uprobe_at(const std::string& binary, uint64_t addr, const std::string& fn, bool ret,
                                    int pid) {
  auto where = resolve_uprobe(binary, "", addr);
  if (!where) return Error{where.error()};
  return attach_uprobe_offset(where->first, where->second, fn, ret, pid,
                              std::string(ret ? "uretprobe" : "uprobe") + " at " + binary);
}

void BpfSession::detach_uprobe_at(const std::string& binary, uint64_t addr, bool ret, int pid) {
  auto where = resolve_uprobe(binary, "", addr);
  if (!where) return;
  auto it = probes_.find("uprobe:" + uprobe_event_name(where->first, where->second, ret, pid));
  if (it == probes_.end()) return;
  StderrNoiseFilter quiet;
  close_probe(it->second);
  probes_.erase(it);
}

Status BpfSession::open_perf_buffer(const std::string& name, EventFn cb, LostFn lost,
                                    void* cookie, int pages) {
  if (!tables_.count(name)) return Error{"cannot open perf buffer " + name + ": no such map"};
  auto& buf = perf_buffers_[name];
  if (!buf) buf = std::make_unique<ebpf::BPFPerfBuffer>(table(name));
  auto st = buf->open_all_cpu(cb, lost, cookie, pages);
  if (!st.ok()) return Error{"cannot open perf buffer " + name + ": " + bcc_msg(st)};
  return std::nullopt;
}

int BpfSession::poll_perf_buffer(const std::string& name, int timeout_ms) {
  auto it = perf_buffers_.find(name);
  return it == perf_buffers_.end() ? -1 : it->second->poll(timeout_ms);
}

}  // namespace bpfdiag
