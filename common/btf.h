// Kernel struct field offsets read from /sys/kernel/btf/vmlinux at startup, so BPF
// programs never depend on kernel header layouts.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/bpf_plan.h"
#include "common/result.h"

struct btf;

namespace bpfdiag {

class KernelBtf {
 public:
  // The BTF at `path`. With the compiled-object cache usable (BpfObjectCache), the
  // answers found on this boot are kept there (one file, keyed by the boot id, the kernel
  // build and the file's size and time): a start whose lookups it all answers does not
  // parse the file (5.5 MB, ~60 ms on 6.18); a lookup it lacks parses it then.
  static Result<std::shared_ptr<KernelBtf>> load(const std::string& path = "/sys/kernel/btf/vmlinux");
  ~KernelBtf();
  KernelBtf(const KernelBtf&) = delete;
  KernelBtf& operator=(const KernelBtf&) = delete;
  // Byte offset of the first of `names` that struct `type` has (anonymous struct and
  // union members are searched too). Error names the struct and every name tried.
  Result<uint32_t> field_offset(const std::string& type, const std::vector<std::string>& names) const;
  // Byte size of field; 0 when not found.
  uint32_t field_size(const std::string& type, const std::string& name) const;
  bool has_field(const std::string& type, const std::string& name) const;
  // Whether the file itself was parsed (not every answer came from the cache).
  bool parsed() const { return btf_ != nullptr; }

 private:
  struct Member {
    bool struct_found = false;
    long bits = -1;  // bit offset, -1: no such member
    uint32_t size = 0;
  };
  KernelBtf() = default;
  Member member(const std::string& type, const std::string& name) const;
  bool parse() const;
  void save() const;

  std::string path_;
  std::string key_;  // empty: no cache
  mutable struct btf* btf_ = nullptr;
  mutable std::string parse_error_;
  mutable std::map<std::pair<std::string, std::string>, Member> facts_;
  mutable bool dirty_ = false;
};

// One `#define NAME offset` for a field looked up with alternative names.
struct OffsetSpec {
  std::string macro;  // e.g. "OFF_TASK_SE"
  std::string type;   // e.g. "task_struct"
  std::vector<std::string> names;
};
// Adds every spec's offset to `plan` (integer defines); an error names the first
// field not found, and then nothing is added.
Status add_offsets(BpfPlan& plan, const KernelBtf& btf, const std::vector<OffsetSpec>& specs);

// Parses the BTF file itself, whatever the cache holds (doctor: can it be read now?).
Status check_btf_file(const std::string& path = "/sys/kernel/btf/vmlinux");

// The running kernel's BTF (/sys/kernel/btf/vmlinux), parsed once and kept until
// release_kernel_btf().
Result<std::shared_ptr<KernelBtf>> kernel_btf();
// Drops the parsed BTF (tens of MB) once the offsets are known: BpfSession::load calls
// it before compiling, so the BTF and clang are never in memory together (peak RSS).
// A later kernel_btf() parses the file again.
void release_kernel_btf();
// add_offsets against the running kernel's BTF: what every tool's bpf_plan needs.
Status add_kernel_offsets(BpfPlan& plan, const std::vector<OffsetSpec>& specs);
// The offsets bpf_sources/arrival.h reads (a task's last arrival on a CPU, from
// task_struct.sched_info and the run queue's clock; its CPU time and run-queue wait as
// schedstat counts them); none when the running kernel
// lacks one of them (CONFIG_SCHED_INFO, CONFIG_FAIR_GROUP_SCHED), and then arrival.h
// defines nothing. True when they were added.
bool add_arrival_offsets(BpfPlan& plan);

}  // namespace bpfdiag
