// threadpool: the BPF maps read into cumulative per-thread times.
#include "common/proc.h"
#include "tools/threadpool/tracer.h"

static_assert(sizeof(tp_thread) == 176, "tp_thread layout shared with BPF");
static_assert(sizeof(tp_wait_key) == 24, "tp_wait_key layout shared with BPF");
static_assert(sizeof(tp_wait_val) == 112, "tp_wait_val layout shared with BPF");
static_assert(sizeof(tp_hist_key) == 8, "tp_hist_key layout shared with BPF");

namespace threadpool {

Snapshots::Snapshots(bpfdiag::BpfSession& bpf)
    : threads_(bpf.get_hash_table<uint32_t, tp_thread>("threads")),
      waits_(bpf.get_hash_table<tp_wait_key, tp_wait_val>("waits")),
      hist_(bpf.get_hash_table<tp_hist_key, uint64_t>("rqhist")) {}

std::map<uint32_t, ThreadTimes> Snapshots::take(const std::map<uint32_t, Member>& members, uint64_t now,
                                                bool with_hist) {
  std::map<uint32_t, ThreadTimes> out;
  std::map<uint32_t, uint32_t> born;
  for (auto& [tid, t] : threads_.get_table_offline()) {
    auto m = members.find(tid);
    if (m == members.end() || m->second.born != t.born) continue;  // not ours, or a new thread
    born[tid] = t.born;
    ThreadTimes& x = out[tid];
    x.on_ns = t.on_ns;
    x.rq_ns = t.rq_ns;
    x.blk_ns = t.blk_ns;
    x.rq_count = t.rq_count;
    int64_t since = now > t.ts ? static_cast<int64_t>(now - t.ts) : 0;
    if (t.state != TP_ST_RUNNING) since += t.carry;  // the last span's time the kernel counts as this gap's
    uint64_t part = since > 0 ? static_cast<uint64_t>(since) : 0;
    WaitKey k{t.w_nr, t.w_op, t.w_obj};
    if (t.state == TP_ST_RUNNING) x.on_ns += part;
    if (t.state == TP_ST_RUNNABLE) {
      x.rq_ns += part;
      if (t.w_pending) x.waits[k].wake_rq_ns[t.w_wake < TP_NWAKE ? t.w_wake : TP_W_UNSEEN] += part;
    }
    if (t.state == TP_ST_BLOCKED) {  // in progress: who ends it is not known yet
      x.blk_ns += part;
      x.waits[k].blk_ns[kUnseen] += part;
    }
  }
  for (auto& [k, v] : waits_.get_table_offline()) {
    auto it = out.find(k.tid);
    if (it == out.end() || born[k.tid] != k.born) continue;
    auto& w = it->second.waits[WaitKey{k.nr, k.op, k.obj}];
    for (int i = 0; i < kNumWakes; ++i) {
      w.blk_ns[i] += v.blk_ns[i];
      w.wake_rq_ns[i] += v.wake_rq_ns[i];
    }
    w.count += v.count;
    w.took += v.took;
  }
  if (with_hist)
    for (auto& [k, v] : hist_.get_table_offline()) {
      auto it = out.find(k.tid);
      if (it != out.end()) it->second.rq_hist[k.idx] += v;
    }
  return out;
}

size_t Snapshots::sweep(const std::vector<uint32_t>& pids, const std::map<uint32_t, Member>& members,
                        const std::set<uint32_t>& reused, size_t* alive_count) {
  // keys first, then the thread entries, then /proc: an entry read here was written at
  // its thread's fork, after the thread joined the process, so a TID missing from the
  // later listing has exited
  std::vector<tp_wait_key> waits;
  for (auto& [k, v] : waits_.get_table_offline()) waits.push_back(k);
  std::vector<tp_hist_key> hist;
  for (auto& [k, v] : hist_.get_table_offline()) hist.push_back(k);
  std::map<uint32_t, uint32_t> kept;  // tid -> born
  for (auto& [tid, t] : threads_.get_table_offline()) kept[tid] = t.born;
  std::set<uint32_t> alive;
  for (uint32_t pid : pids)
    for (uint32_t tid : bpfdiag::proc_threads(pid)) alive.insert(tid);
  if (alive_count) *alive_count = alive.size();
  for (auto it = kept.begin(); it != kept.end();) {
    if (members.count(it->first) || alive.count(it->first)) {
      ++it;
      continue;
    }
    threads_.remove_value(it->first);
    it = kept.erase(it);
  }
  for (auto& k : waits) {
    auto it = kept.find(k.tid);
    if (it == kept.end() || it->second != k.born) waits_.remove_value(k);
  }
  for (auto& k : hist)
    if (!kept.count(k.tid) || reused.count(k.tid)) hist_.remove_value(k);
  return kept.size();
}

}  // namespace threadpool
