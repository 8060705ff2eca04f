// threadpool: request timing on accepted sockets (perf events + the conns map), and
// the data-quality counters.
#include <bcc/libbpf.h>
#include <linux/bpf.h>

#include <algorithm>

#include "common/proc.h"

#include "tools/threadpool/tracer.h"

static_assert(sizeof(tp_conn_key) == 8, "tp_conn_key layout shared with BPF");
static_assert(sizeof(tp_conn) == 24, "tp_conn layout shared with BPF");
static_assert(sizeof(tp_req_event) == 40, "tp_req_event layout shared with BPF");

namespace threadpool {
using namespace bpfdiag;

Requests::Requests(bpfdiag::BpfSession& bpf) : conns_(bpf.get_hash_table<tp_conn_key, tp_conn>("conns")) {}

std::map<std::string, RequestStats> Requests::collect(
    uint64_t t0, uint64_t t1, const std::function<std::string(uint32_t)>& group_of) {
  std::map<std::string, RequestStats> out;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::set<std::pair<uint32_t, uint64_t>> seen;
  std::map<std::string, uint64_t> reads;
  std::vector<tp_req_event> later;  // answered after t1: the next report's
  for (auto& e : events_) {
    if (e.resp_ts <= t0) continue;  // before the window (tracing began before its start)
    if (e.resp_ts > t1) {
      later.push_back(e);
      continue;
    }
    std::string g = group_of(e.reader);
    auto& r = out[g];
    r.requests++;
    reads[g]++;
    r.service.record(e.resp_ts - e.read_ts);
    if (e.accept_ts) {
      r.queue_wait.record(e.read_ts - e.accept_ts);
      r.response.record(e.resp_ts - e.accept_ts);
      spans.push_back({e.accept_ts, e.read_ts});
      seen.insert({e.fd, e.accept_ts});
      any_accept_ = true;
    }
  }
  events_ = std::move(later);
  for (auto& [k, v] : conns_.get_table_offline()) {
    if (!v.accept_ts) continue;
    any_accept_ = true;
    if (seen.count({k.fd, v.accept_ts})) continue;
    if (v.phase == TP_CONN_ACCEPTED)
      spans.push_back({v.accept_ts, 0});
    else if (v.phase == TP_CONN_READING || v.phase == TP_CONN_RESPONDED)
      spans.push_back({v.accept_ts, v.read_ts});
    if (v.phase == TP_CONN_READING) reads[group_of(v.reader)]++;
  }
  if (!any_accept_) return out;
  // the process-wide queue belongs to the group that takes the requests
  uint64_t best = 0;
  for (auto& [g, n] : reads)
    if (n > best) best = n, taker_ = g;
  if (taker_.empty()) taker_ = group_of(0);
  auto& r = out[taker_];
  r.have_depth = true;
  r.depth = queue_depth(spans, t0, t1);
  return out;
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
