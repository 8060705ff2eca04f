// threadpool: which processes form the pool (one process; a PID list; a parent and its
// children), kept in step with the BPF side's `pool` map.
#include <algorithm>

#include "common/proc.h"
#include "tools/threadpool/tracer.h"

namespace threadpool {
using namespace bpfdiag;

namespace {

// The PIDs given and, with --children, their descendants running now.
std::vector<uint32_t> initial_pids(const Config& c) {
  std::vector<uint32_t> out;
  std::set<uint32_t> seen;
  for (uint32_t p : c.pids)
    if (proc_running(p) && seen.insert(p).second) out.push_back(p);
  const size_t given = out.size();
  for (size_t i = 0; c.children && i < given; ++i)
    for (uint32_t k : proc_descendants(out[i], kMaxPoolProcesses))
      if (seen.insert(k).second) out.push_back(k);
  if (out.size() > kMaxPoolProcesses) out.resize(kMaxPoolProcesses);
  return out;
}

// The pool's main process: the only one; with --children the first PID given; else a
// PID given that is the parent of another pool process (a master); 0 if none.
uint32_t find_leader(const Config& c, const std::vector<uint32_t>& pids) {
  if (pids.size() == 1) return pids.front();
  if (pids.empty()) return 0;
  if (c.children) return proc_running(c.pids.front()) ? c.pids.front() : 0;
  for (uint32_t p : c.pids)
    for (uint32_t q : pids)
      if (q != p && proc_ppid(q) == p) return p;
  return 0;
}

}  // namespace

Pool::Pool(const Config& c, BpfSession& bpf)
    : c_(c),
      map_(bpf.get_hash_table<uint32_t, uint32_t>("pool")),
      pids_(initial_pids(c)),
      leader_(find_leader(c, pids_)) {}

uint32_t Pool::flags(uint32_t pid) const {
  // a pool of processes grows with the processes it forks; one process stays itself
  uint32_t f = c_.children || c_.pids.size() > 1 ? TP_POOL_CHILDREN : 0;
  return pid == leader_ ? f | TP_POOL_LEADER : f;
}

Status Pool::fill() {
  for (uint32_t p : pids_)
    if (!map_.update_value(p, flags(p)).ok())
      return Error{"cannot add PID " + std::to_string(p) + " to the BPF pool map"};
  return std::nullopt;
}

void Pool::rescan() {
  std::set<uint32_t> now(pids_.begin(), pids_.end());
  // forked since: added by the BPF side
  for (auto& [pid, f] : map_.get_table_offline()) now.insert(pid);
  // children forked before the probes were attached
  if (c_.children)
    for (uint32_t p : initial_pids(c_)) {
      if (now.size() >= kMaxPoolProcesses || now.count(p)) continue;
      if (map_.update_value(p, flags(p)).ok()) now.insert(p);
    }
  std::vector<uint32_t> kept;
  for (uint32_t p : pids_)  // the given ones first, in their order
    if (now.erase(p)) kept.push_back(p);
  kept.insert(kept.end(), now.begin(), now.end());
  pids_.clear();
  for (uint32_t p : kept) {
    if (proc_running(p)) {
      pids_.push_back(p);
    } else {
      map_.remove_value(p);  // exited: a prefork server's churn keeps the map bounded
      if (p == leader_) leader_ = 0;
    }
  }
}

}  // namespace threadpool
