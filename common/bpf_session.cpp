#include "common/bpf_session.h"

#include "common/bpf_counters.h"

#include <bcc/bcc_syms.h>
#include <bcc/libbpf.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>

#include "common/timing.h"

namespace bpfdiag {

std::string bcc_msg(const ebpf::StatusTuple& st) {
  std::string m = st.msg();
  return m.empty() ? "error " + std::to_string(st.code()) : first_line(m);
}

// --- BpfSession --------------------------------------------------------------------

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
  begin_detach();
  for (auto& t : closers_) t.join();
  for (auto& [name, p] : probes_) close_probe(p);
  perf_buffers_.clear();
  for (auto& [name, fd] : prog_fds_) close(fd);
  // the maps' fds close with tables_
}

// Closing a probe waits for the kernel's grace period (55-90 ms each on a loaded box:
// lockstat --uprobes's 11 probes took 0.8 s one after another). Closed from threads of
// their own the waits overlap (0.33 s).
void BpfSession::begin_detach() {
  StderrNoiseFilter quiet;
  for (auto& [name, p] : probes_) {
    if (p.fd < 0) continue;
    try {
      closers_.emplace_back([fd = p.fd, raw = p.raw] {
        if (raw)
          close(fd);
        else
          bpf_close_perf_event_fd(fd);
      });
      p.fd = -2;  // closed by its thread (joined by the destructor): close_probe only detaches
    } catch (const std::system_error&) {
      break;  // no thread: the rest close one by one
    }
  }
}

void BpfSession::disable_perf_events() {
  for (int fd : perf_fds_) ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
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
                                        bool ret, int pid, const std::string& what, uint32_t ref_ctr_offset) {
  auto fd = load_program(fn, BPF_PROG_TYPE_KPROBE);
  if (!fd) return Error{fd.error()};
  std::string event = uprobe_event_name(module, offset, ret, pid);
  if (probes_.count("uprobe:" + event)) return Error{what + " is attached already"};
  int link;
  {
    StderrNoiseFilter quiet;
    link = bpf_attach_uprobe(*fd, ret ? BPF_PROBE_RETURN : BPF_PROBE_ENTRY, event.c_str(), module.c_str(), offset,
                             pid, ref_ctr_offset);
  }
  if (link < 0) return Error{"Unable to attach " + what + ": " + std::strerror(errno)};
  Probe& p = probes_["uprobe:" + event];
  p.fd = link;
  // libbcc made a tracefs event only when the kernel has no uprobe PMU
  std::string dir = tracefs_dir();
  if (!dir.empty() && access((dir + "/events/uprobes/" + event + "_bcc_" + std::to_string(getpid())).c_str(), F_OK) == 0)
    p.uprobe_event = event;
  note_program(fn);
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

Status BpfSession::attach_usdt(const std::string& module, uint64_t offset, uint32_t semaphore_offset,
                               const std::string& fn, const std::string& what) {
  if (auto st = attach_uprobe_offset(module, offset, fn, false, -1, what, semaphore_offset))
    return Error{"cannot attach " + what + ": " + st->message};
  return std::nullopt;
}

Status BpfSession::attach_uprobe_file(const std::string& module, uint64_t offset, const std::string& fn, int pid,
                                      const std::string& what) {
  if (auto st = attach_uprobe_offset(module, offset, fn, false, pid, what))
    return Error{"cannot attach " + what + ": " + st->message};
  return std::nullopt;
}

void BpfSession::detach_uprobe_file(const std::string& module, uint64_t offset, int pid) {
  auto it = probes_.find("uprobe:" + uprobe_event_name(module, offset, false, pid));
  if (it == probes_.end()) return;
  StderrNoiseFilter quiet;
  close_probe(it->second);
  probes_.erase(it);
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
