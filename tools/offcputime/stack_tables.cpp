// offcputime's stack tables: sizing them from the threads traced, and reading
// stacks back from the primary stack map and the overflow map.
#include <bcc/BPF.h>
#include <dirent.h>
#include <linux/types.h>

#include <algorithm>

#include "common/bpf_session.h"
#include "common/stacks.h"
#include "tools/offcputime/offcputime.h"

extern "C" {
#include "offcputime_shared.h"
}
static_assert(sizeof(offcpu_stack) == 8 * OFFCPU_OVERFLOW_DEPTH, "offcpu_stack layout shared with BPF");

namespace offcputime {
using namespace bpfdiag;

namespace {
uint64_t count_dir_entries(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (!d) return 0;
  uint64_t n = 0;
  while (auto* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}
}  // namespace

uint64_t auto_stack_storage(uint64_t threads) {
  uint64_t want = std::clamp<uint64_t>(threads * kStacksPerThread, kDefaultStackStorage, kMaxAutoStackStorage);
  uint64_t n = 1;
  while (n < want) n <<= 1;
  return n;
}

uint64_t overflow_storage_size(uint64_t stack_storage_size) {
  return std::clamp<uint64_t>(stack_storage_size / 2, 16384, 65536);  // ~580 bytes each
}

uint64_t count_traced_threads(const Config& c) {
  if (!c.tids.empty()) return c.tids.size();
  if (!c.pids.empty()) {
    uint64_t n = 0;
    for (auto p : c.pids) n += std::max<uint64_t>(1, count_dir_entries("/proc/" + std::to_string(p) + "/task"));
    return n;
  }
  uint64_t n = 0;  // every task on the system
  DIR* d = opendir("/proc");
  if (!d) return 0;
  while (auto* e = readdir(d))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
      n += count_dir_entries(std::string("/proc/") + e->d_name + "/task");
  closedir(d);
  return n;
}

OverflowStacks read_overflow(BpfSession& bpf) {
  OverflowStacks out;
  for (auto& [stack, id] : bpf.get_hash_table<offcpu_stack, uint32_t>("overflow_ids").get_table_offline()) {
    auto& v = out[id];
    for (auto ip : stack.ip) {
      if (!ip) break;
      v.push_back(ip);
    }
  }
  return out;
}

// Stack ids carrying OFFCPU_OVERFLOW_BIT are in the overflow map, the others in the
// primary stack table; the user and kernel parts may live in different places.
Stack resolve_both(ebpf::BPFStackTable& primary, const OverflowStacks& overflow, Symbolizer& sym,
                   uint32_t tgid, int32_t user_id, int32_t kernel_id, StackParts parts) {
  auto in_overflow = [](int32_t id) { return id >= 0 && (id & OFFCPU_OVERFLOW_BIT); };
  auto frames = [&](int32_t id) -> const std::vector<uint64_t>* {
    auto it = overflow.find(static_cast<uint32_t>(id) & ~static_cast<uint32_t>(OFFCPU_OVERFLOW_BIT));
    return it == overflow.end() || it->second.empty() ? nullptr : &it->second;
  };
  Stack st = resolve_stack(primary, sym, tgid, in_overflow(user_id) ? -1 : user_id,
                           in_overflow(kernel_id) ? -1 : kernel_id, parts, nullptr);
  if (parts.user && in_overflow(user_id)) {
    auto* addrs = frames(user_id);
    st.user.clear();
    st.user_missing = !addrs;
    if (addrs)
      for (auto a : *addrs) st.user.push_back(sym.user(tgid, a));
  }
  if (parts.kernel && in_overflow(kernel_id)) {
    auto* addrs = frames(kernel_id);
    st.kernel.clear();
    st.kernel_missing = !addrs;
    if (addrs)
      for (auto a : *addrs) {
        std::string name = sym.kernel(a);
        if (st.kernel.empty() && is_tracing_frame(name)) continue;  // the tracing path itself
        st.kernel.push_back(std::move(name));
      }
  }
  return st;
}

}  // namespace offcputime
