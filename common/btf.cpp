#include "common/btf.h"

#include <bpf/btf.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "common/timing.h"

namespace bpfdiag {
namespace {

// Depth-first search through a composite type's members, descending into anonymous
// structs/unions. Returns bit offset or -1.
long find_member(const struct btf* b, const struct btf_type* t, const std::string& name,
                 uint32_t* size_out) {
  if (!btf_is_composite(t)) return -1;
  const struct btf_member* m = btf_members(t);
  for (unsigned i = 0; i < btf_vlen(t); ++i, ++m) {
    const char* mname = btf__name_by_offset(b, m->name_off);
    uint32_t bit_off = btf_member_bit_offset(t, i);
    if (mname && name == mname) {
      if (size_out) {
        long sz = btf__resolve_size(b, m->type);
        *size_out = sz > 0 ? static_cast<uint32_t>(sz) : 0;
      }
      return bit_off;
    }
    if (!mname || !*mname) {
      const struct btf_type* inner = btf__type_by_id(b, m->type);
      while (inner && (btf_is_mod(inner) || btf_is_typedef(inner))) inner = btf__type_by_id(b, inner->type);
      if (inner) {
        long off = find_member(b, inner, name, size_out);
        if (off >= 0) return bit_off + off;
      }
    }
  }
  return -1;
}

const struct btf_type* find_struct(const struct btf* b, const std::string& type) {
  int id = btf__find_by_name_kind(b, type.c_str(), BTF_KIND_STRUCT);
  if (id < 0) id = btf__find_by_name_kind(b, type.c_str(), BTF_KIND_UNION);
  return id < 0 ? nullptr : btf__type_by_id(b, id);
}

}  // namespace

Result<std::shared_ptr<KernelBtf>> KernelBtf::load(const std::string& path) {
  struct btf* b = btf__parse(path.c_str(), nullptr);
  if (!b)
    return Error{"cannot read kernel BTF from " + path + ": " + std::strerror(errno) +
                 " (a kernel built with CONFIG_DEBUG_INFO_BTF=y is required)"};
  return std::shared_ptr<KernelBtf>(new KernelBtf(b));
}

KernelBtf::~KernelBtf() { btf__free(btf_); }

Result<uint32_t> KernelBtf::field_offset(const std::string& type,
                                         const std::vector<std::string>& names) const {
  const struct btf_type* t = find_struct(btf_, type);
  if (!t) return Error{"kernel BTF has no struct " + type};
  for (const auto& n : names) {
    long bits = find_member(btf_, t, n, nullptr);
    if (bits >= 0) return static_cast<uint32_t>(bits / 8);
  }
  std::string tried;
  for (const auto& n : names) tried += (tried.empty() ? "" : "/") + n;
  return Error{"kernel struct " + type + " has no field " + tried};
}

uint32_t KernelBtf::field_size(const std::string& type, const std::string& name) const {
  const struct btf_type* t = find_struct(btf_, type);
  uint32_t size = 0;
  if (t) find_member(btf_, t, name, &size);
  return size;
}

bool KernelBtf::has_field(const std::string& type, const std::string& name) const {
  const struct btf_type* t = find_struct(btf_, type);
  return t && find_member(btf_, t, name, nullptr) >= 0;
}

Status add_offsets(BpfPlan& plan, const KernelBtf& btf, const std::vector<OffsetSpec>& specs) {
  BpfPlan found;
  for (const auto& s : specs) {
    auto off = btf.field_offset(s.type, s.names);
    if (!off) return Error{off.error()};
    found.integer(s.macro, *off);
  }
  plan.merge(found);
  return std::nullopt;
}

namespace {
std::optional<Result<std::shared_ptr<KernelBtf>>> g_kernel_btf;
}

Result<std::shared_ptr<KernelBtf>> kernel_btf() {
  if (!g_kernel_btf) {
    timing_mark("(before BTF parse)");
    g_kernel_btf = KernelBtf::load();
    timing_mark("BTF parse");
  }
  return *g_kernel_btf;
}

void release_kernel_btf() { g_kernel_btf.reset(); }

bool add_arrival_offsets(BpfPlan& plan) {
  return !add_kernel_offsets(plan, {{"OFF_TASK_SCHED_INFO", "task_struct", {"sched_info"}},
                                 {"OFF_SI_LAST_ARRIVAL", "sched_info", {"last_arrival"}},
                                 {"OFF_SI_PCOUNT", "sched_info", {"pcount"}},
                                 {"OFF_SI_RUN_DELAY", "sched_info", {"run_delay"}},
                                 {"OFF_SI_LAST_QUEUED", "sched_info", {"last_queued"}},
                                 {"OFF_SE_SUM_EXEC", "sched_entity", {"sum_exec_runtime"}},
                                 {"OFF_TASK_SE", "task_struct", {"se"}},
                                 {"OFF_SE_CFS_RQ", "sched_entity", {"cfs_rq"}},
                                 {"OFF_CFS_RQ_RQ", "cfs_rq", {"rq"}},
                                 {"OFF_RQ_CLOCK", "rq", {"clock"}}});
}

Status add_kernel_offsets(BpfPlan& plan, const std::vector<OffsetSpec>& specs) {
  auto btf = kernel_btf();
  if (!btf) return Error{btf.error()};
  return add_offsets(plan, **btf, specs);
}

}  // namespace bpfdiag
