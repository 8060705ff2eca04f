// threadpool: the BPF maps read into cumulative per-thread times.
#include "tools/threadpool/tracer.h"

static_assert(sizeof(tp_thread) == 112, "tp_thread layout shared with BPF");
static_assert(sizeof(tp_wait_key) == 24, "tp_wait_key layout shared with BPF");
static_assert(sizeof(tp_wait_val) == 104, "tp_wait_val layout shared with BPF");
static_assert(sizeof(tp_hist_key) == 8, "tp_hist_key layout shared with BPF");

namespace threadpool {

Snapshots::Snapshots(bpfdiag::BpfSession& bpf)
    : threads_(bpf.get_hash_table<uint32_t, tp_thread>("threads")),
      waits_(bpf.get_hash_table<tp_wait_key, tp_wait_val>("waits")),
      hist_(bpf.get_hash_table<tp_hist_key, uint64_t>("rqhist")) {}

std::map<uint32_t, ThreadTimes> Snapshots::take(const std::map<uint32_t, Member>& members, uint64_t now,
                                                bool with_hist) {
  std::map<uint32_t, ThreadTimes> out;
  for (auto& [tid, t] : threads_.get_table_offline()) {
    if (!members.count(tid)) continue;
    ThreadTimes& x = out[tid];
    x.on_ns = t.on_ns;
    x.rq_ns = t.rq_ns;
    x.blk_ns = t.blk_ns;
    x.rq_count = t.rq_count;
    uint64_t part = now > t.ts ? now - t.ts : 0;
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
    if (it == out.end()) continue;
    auto& w = it->second.waits[WaitKey{k.nr, k.op, k.obj}];
    for (int i = 0; i < kNumWakes; ++i) {
      w.blk_ns[i] += v.blk_ns[i];
      w.wake_rq_ns[i] += v.wake_rq_ns[i];
    }
    w.count += v.count;
  }
  if (with_hist)
    for (auto& [k, v] : hist_.get_table_offline()) {
      auto it = out.find(k.tid);
      if (it != out.end()) it->second.rq_hist[k.idx] += v;
    }
  return out;
}

}  // namespace threadpool
