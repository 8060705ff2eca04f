// RequestFold (events folded as they arrive) against the former collect(), which kept
// every event until the report: same figures on the same event sequences.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>

#include "tools/threadpool/tracer.h"

using namespace threadpool;

namespace {

using Conns = std::vector<std::pair<tp_conn_key, tp_conn>>;

// the former Requests::collect, over a kept event list
std::map<std::string, RequestStats> reference(std::vector<tp_req_event> events, const Conns& conns,
                                              uint64_t t0, uint64_t t1,
                                              const std::function<std::string(uint32_t)>& group_of) {
  std::map<std::string, RequestStats> out;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::set<std::pair<uint32_t, uint64_t>> seen;
  std::map<std::string, uint64_t> reads;
  bool any_accept = false;
  for (auto& e : events) {
    if (e.resp_ts <= t0 || e.resp_ts > t1) continue;
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
      any_accept = true;
    }
  }
  for (auto& [k, v] : conns) {
    if (!v.accept_ts) continue;
    any_accept = true;
    if (seen.count({k.fd, v.accept_ts})) continue;
    if (v.phase == TP_CONN_ACCEPTED)
      spans.push_back({v.accept_ts, 0});
    else if (v.phase == TP_CONN_READING || v.phase == TP_CONN_RESPONDED)
      spans.push_back({v.accept_ts, v.read_ts});
    if (v.phase == TP_CONN_READING) reads[group_of(v.reader)]++;
  }
  if (!any_accept) return out;
  std::string taker;
  uint64_t best = 0;
  for (auto& [g, n] : reads)
    if (n > best) best = n, taker = g;
  if (taker.empty()) taker = group_of(0);
  auto& r = out[taker];
  r.have_depth = true;
  r.depth = queue_depth(spans, t0, t1);
  return out;
}

void same(const std::map<std::string, RequestStats>& a, const std::map<std::string, RequestStats>& b) {
  REQUIRE(a.size() == b.size());
  for (auto& [g, x] : a) {
    REQUIRE(b.count(g));
    const auto& y = b.at(g);
    CHECK(x.requests == y.requests);
    CHECK(x.have_depth == y.have_depth);
    CHECK(x.depth.max == y.depth.max);
    CHECK(x.depth.avg == doctest::Approx(y.depth.avg).epsilon(1e-12));
    for (auto [h, k] : {std::pair{&x.service, &y.service}, {&x.queue_wait, &y.queue_wait},
                        {&x.response, &y.response}}) {
      CHECK(h->count() == k->count());
      CHECK(h->sum() == k->sum());
      CHECK(h->max() == k->max());
      CHECK(h->log2_slots() == k->log2_slots());
      CHECK(h->percentile(99) == k->percentile(99));
    }
  }
}

tp_req_event ev(uint64_t acc, uint64_t rd, uint64_t resp, uint32_t fd, uint32_t reader) {
  tp_req_event e{};
  e.accept_ts = acc;
  e.read_ts = rd;
  e.resp_ts = resp;
  e.fd = fd;
  e.reader = reader;
  e.writer = reader;
  return e;
}

}  // namespace

TEST_CASE("RequestFold: a hand-made window equals the kept-events result") {
  auto group_of = [](uint32_t tid) { return tid < 10 ? std::string("io") : std::string("workers"); };
  std::vector<tp_req_event> evs = {
      ev(0, 5, 12, 3, 11), ev(2, 6, 20, 4, 12), ev(0, 15, 25, 3, 1), ev(8, 9, 30, 5, 11),
      ev(10, 30, 40, 6, 12),  // answered in the window, queued from 10 to 30
      ev(12, 28, 45, 8, 11),  // queued from 12 to 28: depth 2
      ev(1, 2, 3, 7, 11),     // answered before the window: not counted
  };
  Conns conns;
  tp_conn_key k{};
  k.tgid = 1;
  k.fd = 9;
  tp_conn c{};
  c.accept_ts = 35;
  c.phase = TP_CONN_ACCEPTED;  // still queued at t1
  conns.push_back({k, c});
  k.fd = 6;
  c.accept_ts = 10;
  c.read_ts = 30;
  c.phase = TP_CONN_RESPONDED;  // its event was seen: not counted twice
  conns.push_back({k, c});
  RequestFold f;
  f.start(10);
  for (auto& e : evs) f.add(e);
  auto got = f.take(50, group_of, conns);
  auto want = reference(evs, conns, 10, 50, group_of);
  same(got, want);
  CHECK(got.at("workers").requests == 5);
  CHECK(got.at("workers").depth.max == 2);  // 10..30 with 12..28, then 35..50
  CHECK(got.at("workers").depth.avg == doctest::Approx((20.0 + 16 + 15) / 40));
}

TEST_CASE("RequestFold: random event sequences over several windows equal the kept-events results") {
  std::mt19937_64 rng(42);
  auto group_of = [](uint32_t tid) { return "g" + std::to_string(tid % 3); };
  for (int round = 0; round < 20; ++round) {
    std::vector<tp_req_event> all;
    uint64_t t = 1000;
    for (int i = 0; i < 3000; ++i) {
      t += rng() % 50;
      uint64_t acc = rng() % 3 ? 0 : t;
      uint64_t rd = t + rng() % 200;
      uint64_t resp = rd + rng() % 500;
      all.push_back(ev(acc, rd, resp, static_cast<uint32_t>(rng() % 64), static_cast<uint32_t>(rng() % 8)));
    }
    // arrival order: by response time, as the perf buffer delivers them (per CPU, near enough)
    std::stable_sort(all.begin(), all.end(),
                     [](const tp_req_event& a, const tp_req_event& b) { return a.resp_ts < b.resp_ts; });
    Conns conns;
    for (int i = 0; i < 5; ++i) {
      tp_conn_key k{};
      k.tgid = 1;
      k.fd = 100 + i;
      tp_conn c{};
      c.accept_ts = t - rng() % 4000;
      c.read_ts = c.accept_ts + rng() % 100;
      c.phase = static_cast<uint32_t>(i % 3 == 0 ? TP_CONN_ACCEPTED : i % 3 == 1 ? TP_CONN_READING : TP_CONN_RESPONDED);
      c.reader = static_cast<uint32_t>(i);
      conns.push_back({k, c});
    }
    const uint64_t end = all.back().resp_ts;
    std::vector<uint64_t> bounds = {900, 1000 + (end - 1000) / 3, 1000 + 2 * (end - 1000) / 3, end};
    if (round % 2) bounds = {900, end};  // no -i: one window
    RequestFold f;
    f.start(bounds[0]);
    size_t next = 0, most = 0;
    for (size_t w = 1; w < bounds.size(); ++w) {
      while (next < all.size() && all[next].resp_ts <= bounds[w]) {
        f.add(all[next++]);
        most = std::max(most, f.state_size());
      }
      auto got = f.take(bounds[w], group_of, conns);
      auto want = reference(all, conns, bounds[w - 1], bounds[w], group_of);
      same(got, want);
    }
    // bounded by readers and accepted connections, not by the 3000 requests
    CHECK(most <= 8 + 2 * 1100 + 1100);
  }
}
