#include "common/stack_reader.h"

#include <bcc/BPF.h>
#include <bcc/libbpf.h>
#include <linux/types.h>

#include "common/bpf_session.h"

extern "C" {
#include "stacks_shared.h"
}
static_assert(sizeof(bpfdiag_stack) == 8 * BPFDIAG_OVERFLOW_DEPTH, "bpfdiag_stack layout shared with BPF");

namespace bpfdiag {

StackIdKind stack_id_kind(int64_t id) {
  if (id == -14) return StackIdKind::None;
  if (id < 0) return StackIdKind::Lost;
  return (id & BPFDIAG_OVERFLOW_BIT) ? StackIdKind::Overflow : StackIdKind::Table;
}

uint32_t overflow_index(int64_t id) {
  return static_cast<uint32_t>(id) & ~static_cast<uint32_t>(BPFDIAG_OVERFLOW_BIT);
}

StackReader StackReader::from_session(const BpfSession& bpf) {
  auto table = std::make_shared<ebpf::BPFStackTable>(bpf.get_stack_table("stack_traces"));
  TableLookup lookup = [table](int32_t id) {
    std::vector<uint64_t> out;
    if (table->get_fd() < 0) return out;
    for (uintptr_t a : table->get_stack_addr(id)) out.push_back(a);
    return out;
  };
  Overflow overflow;
  if (bpf.get_table("overflow_ids").get_fd() >= 0)
    for (auto& [stack, idx] : bpf.get_hash_table<bpfdiag_stack, uint32_t>("overflow_ids").get_table_offline()) {
      auto& v = overflow[idx];
      for (auto ip : stack.ip) {
        if (!ip) break;
        v.push_back(ip);
      }
    }
  return StackReader(std::move(lookup), std::move(overflow));
}

std::vector<uint64_t> StackReader::addrs(int64_t id) const {
  switch (stack_id_kind(id)) {
    case StackIdKind::Table:
      return table_ ? table_(static_cast<int32_t>(id)) : std::vector<uint64_t>{};
    case StackIdKind::Overflow: {
      auto it = overflow_.find(overflow_index(id));
      return it == overflow_.end() ? std::vector<uint64_t>{} : it->second;
    }
    default:
      return {};
  }
}

StackPart StackReader::part(int64_t id, bool lost_is_missing) const {
  StackPart p;
  StackIdKind kind = stack_id_kind(id);
  if (kind == StackIdKind::Lost) {
    p.missing = lost_is_missing;
    return p;
  }
  p.addrs = addrs(id);
  p.vanished = kind != StackIdKind::None && p.addrs.empty();  // cleared or evicted
  p.missing = p.vanished;
  return p;
}

Stack StackReader::resolve(Symbolizer& sym, uint32_t tgid, int64_t user_id, int64_t kernel_id,
                           StackParts parts, DataQuality* dq) const {
  Stack st;
  st.want_kernel = parts.kernel;
  st.want_user = parts.user;
  if (parts.kernel) {
    StackPart k = part(kernel_id);
    st.kernel_missing = k.missing;
    for (auto a : k.addrs) {
      std::string name = sym.kernel(a);
      if (st.kernel.empty() && is_tracing_frame(name)) continue;  // the tracing path itself
      st.kernel.push_back(std::move(name));
    }
    if (k.vanished && dq) dq->lost_stacks++;
  }
  if (parts.user) {
    StackPart u = part(user_id, tgid != 0);
    st.user_missing = u.missing;
    for (auto a : u.addrs) st.user.push_back(sym.user(tgid, a));
    if (u.vanished && dq) dq->lost_stacks++;
  }
  return st;
}

size_t clear_stacks(const BpfSession& bpf, const std::set<int32_t>& keep) {
  size_t n = 0;
  int fd = bpf.get_table("stack_traces").get_fd();
  if (fd >= 0) n += clear_stack_ids(fd, keep);
  int ofd = bpf.get_table("overflow_ids").get_fd();
  if (ofd < 0) return n;
  std::vector<bpfdiag_stack> gone;
  bpfdiag_stack cur{}, next{};
  bool first = true;
  while (bpf_get_next_key(ofd, first ? nullptr : &cur, &next) == 0) {
    uint32_t idx = 0;
    if (bpf_lookup_elem(ofd, &next, &idx) == 0 &&
        !keep.count(static_cast<int32_t>(idx | BPFDIAG_OVERFLOW_BIT)))
      gone.push_back(next);
    cur = next;
    first = false;
  }
  for (auto& k : gone)
    if (bpf_delete_elem(ofd, &k) == 0) ++n;
  return n;
}

}  // namespace bpfdiag
