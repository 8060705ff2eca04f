// threadpool: which threads of the process are tracked and in which group.
#include "common/proc.h"
#include "tools/threadpool/tracer.h"

namespace threadpool {
using namespace bpfdiag;

Members::Members(const Config& c, BpfSession& bpf)
    : c_(c),
      threads_(bpf.get_hash_table<uint32_t, tp_thread>("threads")),
      gids_(bpf.get_hash_table<uint32_t, uint32_t>("gids")) {
  if (c.pattern) re_ = compile_pattern(*c.pattern, nullptr);  // validated by parse_args
}

const Member* Members::find(uint32_t tid) const {
  auto it = members_.find(tid);
  return it == members_.end() ? nullptr : &it->second;
}

void Members::rescan(uint64_t now) {
  std::set<uint32_t> alive;
  for (uint32_t tid : proc_threads(c_.pid)) {
    alive.insert(tid);
    std::string comm = proc_comm(tid);
    bool in_pool = !c_.pattern || (re_ && pattern_search(*re_, comm));
    auto it = members_.find(tid);
    if (!in_pool) {
      if (it == members_.end()) threads_.remove_value(tid);  // added at fork, not ours
      continue;
    }
    const std::string base = c_.pattern ? *c_.pattern : group_of_name(comm);
    auto sp = split_.find(tid);
    const std::string group = sp != split_.end() ? sp->second : base;
    if (it != members_.end()) {
      it->second.comm = comm;
      it->second.base = base;
      it->second.group = group;
      continue;
    }
    tp_thread t;
    if (!threads_.get_value(tid, t).ok()) {
      t = initial_state(c_.pid, tid, now);
      if (!threads_.update_value(tid, t).ok()) {  // map full: counted, warned
        if (untracked_tids_.insert(tid).second) ++untracked_;
        continue;
      }
      ++assumed_start_;
    }
    Member m{comm, group, base, false, group_ids_.id_of(c_.pid, tid, group, nullptr, t.w_nr)};
    gids_.update_value(tid, m.gid);
    members_[tid] = m;
  }
  for (auto& [tid, m] : members_)
    if (!alive.count(tid)) m.gone = true;
}

void Members::update_roles(const std::map<uint32_t, ThreadTimes>& snap) {
  for (auto& [tid, m] : members_) {
    auto it = snap.find(tid);
    if (it == snap.end() || m.gone) continue;
    uint32_t gid = group_ids_.id_of(c_.pid, tid, m.group, &it->second, TP_NO_SYSCALL);
    if (gid != m.gid) {
      m.gid = gid;
      gids_.update_value(tid, gid);
    }
  }
}

void Members::split(const std::map<uint32_t, std::string>& to) {
  split_ = to;
  for (auto& [tid, m] : members_) {
    auto it = split_.find(tid);
    m.group = it != split_.end() ? it->second : m.base;
  }
}

}  // namespace threadpool
