// A loaded BPF program and what it is attached to: BpfSession owns the maps, the
// programs and the probes (attach helpers with one-line errors, detach on
// destruction). Its jobs' helpers live apart: tracefs and preflight (tracefs.h),
// libbcc's stderr (bcc_stderr.h), the verifier's refusals (load_failure.h); loading
// (compile or cache) is bpf_load.cpp. Attaching sets no signal policy: the tool's
// skeleton does once its attach phase is over (common/tool.h).
#pragma once
#include <bcc/BPFTable.h>

#include <map>
#include <thread>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/bcc_stderr.h"
#include "common/bpf_plan.h"
#include "common/btf.h"
#include "common/load_failure.h"
#include "common/result.h"
#include "common/tracefs.h"

namespace bpfdiag {

class BpfSession {
 public:
  // Compiles the plan's program with libbcc against the header shim and the plan's
  // defines (render_plan), or takes the compiled object from the cache
  // (common/bpf_object.h) when the same program was compiled before on this kernel by
  // this build; creates its maps and fills the ID filter maps either way.
  static Result<std::unique_ptr<BpfSession>> load(const BpfPlan& plan);
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
  // Starts closing every probe, each from a thread of its own (joined by the
  // destructor): a final report is built meanwhile from the maps (each close waits for
  // a grace period, 50-90 ms on a loaded box, and the kernel serializes some of them).
  void begin_detach();
  // Uprobe (or uretprobe) on `symbol` in `binary`, for `pid` (-1: every process).
  Status attach_uprobe(const std::string& binary, const std::string& symbol,
                       const std::string& fn, bool ret, int pid);
  // The same at virtual address `addr` of `binary` (symbol lookups done by the caller);
  // the error is libbcc's reason, for the caller's own message.
  Status attach_uprobe_at(const std::string& binary, uint64_t addr, const std::string& fn, bool ret, int pid);
  void detach_uprobe_at(const std::string& binary, uint64_t addr, bool ret, int pid);
  // A uprobe at file `offset` of `module` (offsets the caller found in an ELF file it
  // read itself), for `pid` (-1: every process); the error names `what`. Detached by
  // detach_uprobe_file (or with the session).
  Status attach_uprobe_file(const std::string& module, uint64_t offset, const std::string& fn, int pid,
                            const std::string& what);
  void detach_uprobe_file(const std::string& module, uint64_t offset, int pid);
  // A USDT probe point: a uprobe at file `offset` of `module` for every process, with
  // the probe's semaphore at `semaphore_offset` in the file (0: none) counted up by the
  // kernel while attached (the software then prepares the probe's arguments).
  Status attach_usdt(const std::string& module, uint64_t offset, uint32_t semaphore_offset, const std::string& fn,
                     const std::string& what);

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
                              int pid, const std::string& what, uint32_t ref_ctr_offset = 0);
  void close_probe(Probe& p);
  Status fill_id_maps(const std::vector<IdMapFilter>& maps);
  Status fill_cgroup_maps(const CgroupFilter& cg);

  std::string license_;
  uint32_t kern_version_ = 0;
  std::map<std::string, ebpf::TableDesc> tables_;
  std::map<std::string, std::vector<uint8_t>> progs_;  // instructions, maps relocated
  std::map<std::string, int> prog_fds_;               // loaded programs
  std::set<int> noted_;                               // attached program fds
  std::vector<std::thread> closers_;  // begin_detach's
  std::map<std::string, Probe> probes_;               // "tp:NAME", "raw:NAME", "uprobe:EVENT"
  std::map<std::string, std::unique_ptr<ebpf::BPFPerfBuffer>> perf_buffers_;
  std::vector<int> perf_fds_;
  bool from_cache_ = false;
  std::string cache_key_;  // the cache entry this session's object came from
};

// libbcc's StatusTuple message, reduced to its most useful line.
std::string bcc_msg(const ebpf::StatusTuple& st);

}  // namespace bpfdiag
