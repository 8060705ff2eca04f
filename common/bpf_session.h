// Loading and attaching BPF programs with libbcc on a machine without kernel headers:
// preflight checks, tracefs, the header shim, BTF field offsets, libbcc noise
// filtering, attach helpers with one-line errors, and detach on destruction.
#pragma once
#include <bcc/BPFTable.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/btf.h"
#include "common/result.h"

namespace bpfdiag {

// Must run first in main(), before any thread exists (tool_main does): as root, moves
// the process into a private mount namespace and mounts tracefs there if the host has
// not (nothing is left behind on the host). The namespace also lets BpfSession::load
// hide the 120k-line /proc/kallsyms from libbcc's compiler, which cuts startup ~40%.
Status ensure_tracefs();
// True when ensure_tracefs() found tracefs unmounted on the host and mounted it in
// this process's private mount namespace (doctor reports the host's state).
bool tracefs_mounted_privately();
// True when this process runs in the private mount namespace ensure_tracefs() made.
bool private_mount_namespace();
// Root tracing directory in use ("/sys/kernel/tracing" or the debugfs one), or "".
std::string tracefs_dir();
// True if tracepoint "category:name" exists.
bool tracepoint_exists(const std::string& tp);

// Root, BTF and the listed tracepoints. The error is one line with a hint.
Status preflight(const std::vector<std::string>& tracepoints);

// Final BPF text as compiled (for --ebpf): defines from `cflags` as a comment header.
std::string ebpf_listing(const std::string& text, const std::vector<std::string>& cflags);

class BpfSession {
 public:
  // Compiles `text` with libbcc against the header shim plus `cflags`, or takes the
  // compiled object from the cache (common/bpf_object.h) when the same text and cflags
  // were compiled before on this kernel; creates its maps either way.
  static Result<std::unique_ptr<BpfSession>> load(const std::string& text,
                                                  const std::vector<std::string>& cflags);
  ~BpfSession();  // detaches everything, then closes programs and maps
  BpfSession(const BpfSession&) = delete;
  BpfSession& operator=(const BpfSession&) = delete;

  Status attach_tracepoint(const std::string& tp, const std::string& fn);
  Status attach_raw_tracepoint(const std::string& tp, const std::string& fn);
  void detach_raw_tracepoint(const std::string& tp);
  // Software/hardware perf event on every online CPU, sampling at `freq_hz`.
  Status attach_perf_event(uint32_t type, uint32_t config, const std::string& fn,
                           uint64_t freq_hz);
  // Stops the perf events attach_perf_event opened (a final report's snapshot); they
  // are closed on destruction.
  void disable_perf_events();
  // Uprobe (or uretprobe) on `symbol` in `binary`, for `pid` (-1: every process).
  Status attach_uprobe(const std::string& binary, const std::string& symbol,
                       const std::string& fn, bool ret, int pid);
  // The same at virtual address `addr` of `binary` (symbol lookups done by the caller);
  // the error is libbcc's reason, for the caller's own message.
  Status attach_uprobe_at(const std::string& binary, uint64_t addr, const std::string& fn, bool ret, int pid);
  void detach_uprobe_at(const std::string& binary, uint64_t addr, bool ret, int pid);

  using EventFn = void (*)(void* cookie, void* data, int size);
  using LostFn = void (*)(void* cookie, uint64_t lost);
  Status open_perf_buffer(const std::string& table, EventFn cb, LostFn lost, void* cookie,
                          int pages = 64);
  // Waits up to timeout_ms for events and dispatches them; returns events seen or -1.
  int poll_perf_buffer(const std::string& table, int timeout_ms);

  // Loads (verifies) program `fn` as `type` (enum bpf_prog_type); its fd, kept for the
  // session (a second call returns the same fd). Refusals are one line: "the kernel
  // verifier rejected FN: REASON (processed N insns)".
  Result<int> load_program(const std::string& fn, int type);
  // Instructions the verifier processed to accept a loaded program (0: unknown).
  static uint64_t verified_insns(int fd);

  // The maps, by the name the BPF text gives them (libbcc's table classes).
  template <class K, class V>
  ebpf::BPFHashTable<K, V> get_hash_table(const std::string& name) const {
    return ebpf::BPFHashTable<K, V>(table(name));
  }
  template <class V>
  ebpf::BPFArrayTable<V> get_array_table(const std::string& name) const {
    return ebpf::BPFArrayTable<V>(table(name));
  }
  template <class V>
  ebpf::BPFPercpuArrayTable<V> get_percpu_array_table(const std::string& name) const {
    return ebpf::BPFPercpuArrayTable<V>(table(name));
  }
  ebpf::BPFTable get_table(const std::string& name) const { return ebpf::BPFTable(table(name)); }
  ebpf::BPFStackTable get_stack_table(const std::string& name) const {
    return ebpf::BPFStackTable(table(name), true, true);
  }
  ebpf::BPFProgTable get_prog_table(const std::string& name) const { return ebpf::BPFProgTable(table(name)); }
  // The map's description (fd -1 and type 0 when the text has no such map).
  const ebpf::TableDesc& table(const std::string& name) const;

  // Notes attached program `fn` so its recursion misses count as lost events
  // (common/bpf_counters.h); the attach_* calls do it, callers that attach a loaded
  // program themselves too.
  void note_program(const std::string& fn);
  // Sum of bpf_prog_info.recursion_misses over the noted programs.
  uint64_t recursion_misses() const;
  // True when the program came from the compiled-object cache (no compile this run).
  bool from_cache() const { return from_cache_; }

 private:
  BpfSession() = default;
  struct Probe {
    int fd = -1;               // perf event, or raw tracepoint link (raw)
    bool raw = false;
    std::string uprobe_event;  // tracefs event libbcc made, when it had to ("": none)
  };
  Status attach_uprobe_offset(const std::string& module, uint64_t offset, const std::string& fn, bool ret,
                              int pid, const std::string& what);
  void close_probe(Probe& p);

  std::string license_;
  uint32_t kern_version_ = 0;
  std::map<std::string, ebpf::TableDesc> tables_;
  std::map<std::string, std::vector<uint8_t>> progs_;  // instructions, maps relocated
  std::map<std::string, int> prog_fds_;               // loaded programs
  std::set<int> noted_;                               // attached program fds
  std::map<std::string, Probe> probes_;               // "tp:NAME", "raw:NAME", "uprobe:EVENT"
  std::map<std::string, std::unique_ptr<ebpf::BPFPerfBuffer>> perf_buffers_;
  std::vector<int> perf_fds_;
  bool from_cache_ = false;
  std::string cache_key_;  // the cache entry this session's object came from
};

// Redirects stderr into a temp file while alive; on destruction replays every line
// except libbcc's harmless noise ("sha1 socket not available", "cannot get prog tag").
class StderrNoiseFilter {
 public:
  StderrNoiseFilter();
  ~StderrNoiseFilter();
  // Drop everything captured (e.g. clang's diagnostics when the error is reported
  // as one line instead); BPFDIAG_DEBUG=1 in the environment keeps it all.
  void discard() { discard_ = true; }
  // What was written to stderr so far.
  std::string captured() const;
  StderrNoiseFilter(const StderrNoiseFilter&) = delete;
  StderrNoiseFilter& operator=(const StderrNoiseFilter&) = delete;

 private:
  int saved_fd_ = -1;
  int tmp_fd_ = -1;
  bool discard_ = false;
};

bool is_libbcc_noise(const std::string& line);

// One line for program `fn` refused at load, from what libbcc printed meanwhile
// (`printed`: the verifier log, or libbcc's E2BIG note) and libbcc's status message:
// "the kernel verifier rejected FN: REASON (processed N insns)" when it was the
// verifier, "cannot load FN: ..." otherwise.
std::string load_failure_line(const std::string& fn, const std::string& printed, const std::string& bcc_msg);
// The first compiler error line of clang/LLVM diagnostics ("" if none).
std::string first_compile_error(const std::string& diagnostics);

// While alive (around a libbcc compile, created before its StderrNoiseFilter): if the
// compiler exits the process (LLVM's fatal-error path), what the filter captured is
// printed as one line, "TOOL: cannot compile BPF program: FIRST ERROR", on the real
// stderr before the exit completes.
class CompileExitRescue {
 public:
  CompileExitRescue();
  ~CompileExitRescue();
  void watch(StderrNoiseFilter* quiet);
  CompileExitRescue(const CompileExitRescue&) = delete;
  CompileExitRescue& operator=(const CompileExitRescue&) = delete;
};

}  // namespace bpfdiag
