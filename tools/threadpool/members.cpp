// threadpool: which threads of the process are tracked and in which group.
#include "common/proc.h"
#include "tools/threadpool/tracer.h"

namespace threadpool {
using namespace bpfdiag;

Members::Members(const Config& c, const Pool& pool, BpfSession& bpf)
    : c_(c),
      pool_(pool),
      threads_(bpf.get_hash_table<uint32_t, tp_thread>("threads")),
      gids_(bpf.get_hash_table<uint32_t, uint32_t>("gids")) {
  if (c.pattern) re_ = compile_pattern(*c.pattern, nullptr);  // validated by parse_args
}

const Member* Members::find(uint32_t tid) const {
  auto it = members_.find(tid);
  return it == members_.end() ? nullptr : &it->second;
}

std::vector<uint32_t> Members::gone() const {
  std::vector<uint32_t> out;
  for (auto& [tid, m] : members_)
    if (m.gone) out.push_back(tid);
  return out;
}

void Members::retire(uint32_t tid) {
  auto it = members_.find(tid);
  if (it == members_.end()) return;
  tp_thread t;
  // a new thread that took the TID has its own entry (written at its fork): keep it
  if (threads_.get_value(tid, t).ok() && t.born == it->second.born) threads_.remove_value(tid);
  gids_.remove_value(tid);
  untracked_tids_.erase(tid);
  members_.erase(it);
}

void Members::rescan(uint64_t now) {
  // which thread holds each TID on the BPF side (a TID reused since it was added to
  // members_ has a new `born`, written at the new thread's fork)
  std::map<uint32_t, uint32_t> born;
  for (auto& [tid, t] : threads_.get_table_offline()) born[tid] = t.born;
  std::set<uint32_t> alive;
  for (uint32_t pid : pool_.pids())
    for (uint32_t tid : proc_threads(pid)) {
      alive.insert(tid);
      std::string comm = proc_comm(tid);
      bool in_pool = !c_.pattern || (re_ && pattern_search(*re_, comm));
      auto it = members_.find(tid);
      if (it != members_.end()) {
        auto b = born.find(tid);
        if (it->second.gone || (b != born.end() && b->second != it->second.born)) {
          // a new thread with a member's TID: the old one is gone and is retired after
          // the next report; the new one joins at the rescan after that, with every
          // time since its fork (its own entry)
          it->second.gone = true;
          if (!in_pool && b != born.end() && b->second != it->second.born) threads_.remove_value(tid);
          continue;
        }
      }
      if (!in_pool) {
        if (it == members_.end()) threads_.remove_value(tid);  // added at fork, not ours
        continue;
      }
      const std::string base = c_.pattern ? *c_.pattern : group_of_name(comm);
      if (it == members_.end()) {
        add(pid, tid, comm, base, now);
        continue;
      }
      auto sp = split_.find(tid);
      it->second.comm = comm;
      it->second.base = base;
      it->second.group = sp != split_.end() ? sp->second : base;
    }
  for (auto& [tid, m] : members_)
    if (!alive.count(tid)) m.gone = true;
  for (auto it = untracked_tids_.begin(); it != untracked_tids_.end();)
    it = alive.count(*it) ? std::next(it) : untracked_tids_.erase(it);
}

// A thread seen in /proc for the first time: its BPF entry (from its fork, else its
// state now) and its group id.
void Members::add(uint32_t pid, uint32_t tid, const std::string& comm, const std::string& base, uint64_t now) {
  tp_thread t;
  if (!threads_.get_value(tid, t).ok()) {
    t = initial_state(pid, tid, now);
    if (!threads_.update_value(tid, t).ok()) {  // map full: counted, warned
      if (untracked_tids_.insert(tid).second) ++untracked_;
      return;
    }
    ++assumed_start_;
  }
  auto sp = split_.find(tid);
  const std::string group = sp != split_.end() ? sp->second : base;
  const bool main = tid == pool_.leader();
  Member m{pid, comm, group, base, false, group_ids_.id_of(main, group, nullptr, t.w_nr), t.born};
  gids_.update_value(tid, m.gid);
  members_[tid] = m;
}

void Members::update_roles(const std::map<uint32_t, ThreadTimes>& snap) {
  for (auto& [tid, m] : members_) {
    auto it = snap.find(tid);
    if (it == snap.end() || m.gone) continue;
    uint32_t gid = group_ids_.id_of(tid == pool_.leader(), m.group, &it->second, TP_NO_SYSCALL);
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
