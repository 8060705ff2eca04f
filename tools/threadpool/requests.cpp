// threadpool: request timing on accepted sockets (perf events + the conns map), and
// the data-quality counters.
#include <bcc/libbpf.h>
#include <linux/bpf.h>

#include <algorithm>

#include "common/proc.h"

#include "tools/threadpool/tracer.h"

static_assert(sizeof(tp_conn_key) == 8, "tp_conn_key layout shared with BPF");
static_assert(sizeof(tp_conn) == 40, "tp_conn layout shared with BPF");
static_assert(sizeof(tp_req_event) == 48, "tp_req_event layout shared with BPF");

namespace threadpool {
using namespace bpfdiag;

Requests::Requests(bpfdiag::BpfSession& bpf) : conns_(bpf.get_hash_table<tp_conn_key, tp_conn>("conns")) {}

void RequestFold::start(uint64_t t0) {
  t0_ = t0;
  readers_.clear();
  seen_.clear();
  steps_.clear();
  integral_ = 0;
}

// one queue span [a, r) (r 0: still queued at the window's end, added at take())
void RequestFold::span(uint64_t a, uint64_t r) {
  const uint64_t lo = std::max(a, t0_);
  if (r <= lo) return;
  integral_ += r - lo;
  steps_[lo] += 1;
  steps_[r] -= 1;
}

void RequestFold::add(const tp_req_event& e) {
  if (e.resp_ts <= t0_) return;  // before the window (tracing began before its start)
  auto& r = readers_[e.reader].stats;
  r.requests++;
  r.service.record(e.resp_ts - e.read_ts);
  if (e.gap_known) {  // the reader had answered before: did it wait for this one?
    r.taken_known++;
    if (e.gap_blk == 0) r.taken_ready++;
  }
  if (e.accept_ts) {
    r.queue_wait.record(e.read_ts - e.accept_ts);
    r.response.record(e.resp_ts - e.accept_ts);
    span(e.accept_ts, e.read_ts);  // read_ts <= resp_ts <= t1: no clipping at the end
    seen_.insert({e.fd, e.accept_ts});
    any_accept_ = true;
  }
}

std::map<std::string, RequestStats> RequestFold::take(
    uint64_t t1, const std::function<std::string(uint32_t)>& group_of,
    const std::vector<std::pair<tp_conn_key, tp_conn>>& conns) {
  std::map<std::string, RequestStats> out;
  std::map<std::string, uint64_t> reads;
  const uint64_t t0 = t0_;
  for (auto& [tid, rd] : readers_) {
    std::string g = group_of(tid);
    auto& r = out[g];
    r.requests += rd.stats.requests;
    reads[g] += rd.stats.requests;
    r.service.merge(rd.stats.service);
    r.queue_wait.merge(rd.stats.queue_wait);
    r.taken_known += rd.stats.taken_known;
    r.taken_ready += rd.stats.taken_ready;
    r.response.merge(rd.stats.response);
  }
  // the spans still open at t1, clipped to it
  long double integral = integral_;
  std::map<uint64_t, int64_t> steps = steps_;
  auto open = [&](uint64_t a, uint64_t r) {
    if (r == 0) r = t1;
    uint64_t lo = std::max(a, t0), hi = std::min(r, t1);
    if (hi <= lo) return;
    integral += hi - lo;
    steps[lo] += 1;
    steps[hi] -= 1;
  };
  for (auto& [k, v] : conns) {
    if (!v.accept_ts) continue;
    any_accept_ = true;
    if (seen_.count({k.fd, v.accept_ts})) continue;
    if (v.phase == TP_CONN_ACCEPTED)
      open(v.accept_ts, 0);
    else if (v.phase == TP_CONN_READING || v.phase == TP_CONN_RESPONDED)
      open(v.accept_ts, v.read_ts);
    if (v.phase == TP_CONN_READING) reads[group_of(v.reader)]++;
  }
  start(t1);
  if (!any_accept_) return out;
  // the process-wide queue belongs to the group that takes the requests
  uint64_t best = 0;
  for (auto& [g, n] : reads)
    if (n > best) best = n, taker_ = g;
  if (taker_.empty()) taker_ = group_of(0);
  auto& r = out[taker_];
  r.have_depth = true;
  if (t1 > t0) {
    int64_t cur = 0;  // a time's net change: ends before starts, as queue_depth() sorts them
    uint64_t mx = 0;
    for (auto& [t, d] : steps) {
      cur += d;
      mx = std::max<uint64_t>(mx, static_cast<uint64_t>(std::max<int64_t>(cur, 0)));
    }
    r.depth.max = mx;
    r.depth.avg = static_cast<double>(integral / (t1 - t0));
  }
  return out;
}

std::map<std::string, RequestStats> Requests::collect(
    uint64_t t0, uint64_t t1, const std::function<std::string(uint32_t)>& group_of) {
  (void)t0;  // the fold's window starts at the previous collect's t1 (or start())
  auto conns = conns_.get_table_offline();
  return fold_.take(t1, group_of, conns);
}

size_t Requests::seed(const std::vector<uint32_t>& pids) {
  size_t n = 0;
  for (uint32_t pid : pids)
    for (uint32_t fd : accepted_socket_fds(pid, TP_MAX_CONNS)) {
      tp_conn_key k{};
      k.tgid = pid;
      k.fd = fd;
      tp_conn v{};
      v.phase = TP_CONN_RESPONDED;  // waiting for its next request
      if (bpf_update_elem(conns_.get_fd(), &k, &v, BPF_NOEXIST) == 0) ++n;
    }
  return n;
}

uint64_t Requests::in_flight() {
  uint64_t n = 0;
  for (auto& [k, v] : conns_.get_table_offline())
    if (v.phase == TP_CONN_ACCEPTED || v.phase == TP_CONN_READING) ++n;
  return n;
}

const std::vector<CounterSlot>& counter_table() {
  static const std::vector<CounterSlot> table = {
      {TP_C_THREADS_FULL, "map_full"},          {TP_C_WAITS_FULL, "map_full"},
      {TP_C_HIST_FULL, "map_full"},             {TP_C_CONNS_FULL, "map_full"},
      {TP_C_CLOSED_UNREAD, "closed_unread"},    {TP_C_CLOSED_UNANSWERED, "closed_unanswered"},
      {TP_C_FD_REUSED, "fd_reused"},            {TP_C_PROCS_FULL, "map_full"},
      {TP_C_DROPPED, "dropped_periods"},        {TP_C_RECOVERED, "recovered_periods"},
  };
  return table;
}

DataQuality empty_quality() {
  auto keys = counter_keys(counter_table());
  keys.push_back("state_assumed_at_start");  // threads whose state was read from /proc
  keys.push_back("threads_untracked");       // threads map full
  return DataQuality::with_keys(keys);
}

// Per-interval deltas of the cumulative counters and, for the final report, the totals.
Result<Quality> Tracer::quality(bool final) {
  Quality q{empty_quality(), empty_quality()};
  if (auto st = add_bpf_counters(s_, counter_table(), q.total)) return Error{st->message};
  if (auto st = add_bpf_counters(s_, counter_table(), q.interval, &deltas_)) return Error{st->message};
  // user-space counters, in slots after the BPF ones
  const std::pair<const char*, uint64_t> user[] = {{"lost_events", requests_.lost()},
                                                   {"state_assumed_at_start", members_.assumed_start()},
                                                   {"threads_untracked", members_.untracked()}};
  size_t slot = TP_NCOUNTERS;
  for (auto& [key, total] : user) {
    q.total.add(key, total);
    q.interval.add(key, deltas_.delta(slot++, total));
  }
  // requests accepted or being served but not answered when tracing ended
  if (final) {
    const uint64_t inflight = requests_.in_flight();
    q.total.unmatched_begin = q.interval.unmatched_begin = inflight;
  }
  return q;
}

}  // namespace threadpool
