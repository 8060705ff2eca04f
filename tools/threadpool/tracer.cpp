// threadpool's tracer: snapshots -> thread groups -> reports.
#include "tools/threadpool/tracer.h"

#include <algorithm>
#include <iostream>

#include "common/proc.h"
#include "common/runloop.h"

namespace threadpool {
using namespace bpfdiag;
static_assert(kNumWakes == TP_NWAKE && kByPeer == TP_W_PEER && kByProcess == TP_W_PROC &&
                  kByOther == TP_W_OTHER && kTimedOut == TP_W_TIMEOUT &&
                  kUnseen == TP_W_UNSEEN && kByMain == TP_W_MAIN,
              "wake classes shared with BPF");

namespace {
std::string pid_list(const std::vector<uint32_t>& pids) {
  std::string s;
  for (size_t i = 0; i < pids.size() && i < 8; ++i) s += (i ? "," : "") + std::to_string(pids[i]);
  return pids.size() > 8 ? s + ",... (" + std::to_string(pids.size()) + " in all)" : s;
}
}  // namespace

Tracer::Tracer(const Config& c, BpfSession& s, Pool& pool, MapSizes sizes, bool sites)
    : c_(c), s_(s), sizes_(sizes), pool_(pool), members_(c, pool, s), snapshots_(s), requests_(s), sites_(s, sites) {
  sites_.set_tgid_of([this](uint32_t tid) { return pid_of(tid); });
}

uint32_t Tracer::pid_of(uint32_t tid) const {
  const Member* m = members_.find(tid);
  return m ? m->pid : 0;
}

uint32_t Tracer::main_of(const std::string& group, bool by_base) const {
  const Member* m = members_.find(pool_.leader());
  return m && (by_base ? m->base : m->group) == group ? pool_.leader() : 0;
}

Status Tracer::init() {
  pool_.rescan();  // children forked before the probes were attached
  const uint32_t first = pool_.pids().empty() ? c_.pids.front() : pool_.pids().front();
  comm_ = proc_comm(first);
  members_.rescan(monotonic_ns());
  if (members_.all().empty()) {
    const std::string who = pool_.pids().size() > 1 ? "PIDs " + pid_list(pool_.pids()) : "PID " + std::to_string(first);
    if (pool_.pids().empty()) return Error{"process " + std::to_string(first) + " exited"};
    if (!c_.pattern) return Error{"cannot track the threads of " + who + "; rerun with a larger --map-entries"};
    std::set<std::string> names;
    for (uint32_t pid : pool_.pids())
      for (auto tid : proc_threads(pid)) names.insert(proc_comm(tid));
    std::string list;
    for (auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return Error{"no thread of " + who + " (" + comm_ + ") matches --threads '" + *c_.pattern +
                 "'; their thread names: " + list};
  }
  seeded_ = requests_.seed(pool_.pids());  // connections accepted before tracing
  start_ = last_ = monotonic_ns();
  requests_.start(start_);
  refresh_inference();
  if (metrics_.enabled()) metrics_.publish_start(empty_quality());
  return std::nullopt;
}

nlohmann::json Tracer::start_fields() const {
  nlohmann::json f = start_fields_base();
  if (c_.cgroup) f["cgroup"] = cgroup_json(c_.cgroup);
  return f;
}

nlohmann::json Tracer::start_fields_base() const {
  nlohmann::json threads = nlohmann::json::array();
  for (auto& [tid, m] : members_.all())
    threads.push_back({{"tid", tid}, {"pid", m.pid}, {"comm", m.comm}, {"group", m.group}});
  nlohmann::json options = {{"pattern", c_.pattern ? *c_.pattern : ""},
                            {"children", c_.children},
                            {"per_thread", c_.per_thread},
                            {"hist", c_.hist},
                            {"all_groups", c_.all_groups},
                            {"map_entries", sizes_.threads}};
  if (c_.schedule.interval_ns) options["interval_ns"] = *c_.schedule.interval_ns;
  if (c_.schedule.count) options["count"] = *c_.schedule.count;
  if (c_.schedule.duration_ns) options["duration_ns"] = *c_.schedule.duration_ns;
  return {{"pid", c_.pids},         {"pool_pids", pool_.pids()}, {"leader_pid", pool_.leader()},
          {"comm", comm_},         {"probes", 6},                {"options", options},
          {"threads", threads},    {"connections_seeded", seeded_}};
}

// How many of each group's workers are busy right now (neither waiting for work nor
// for the GIL).
void Tracer::sample() {
  std::map<std::string, std::pair<uint64_t, uint64_t>> cnt;  // group -> {members, not busy}
  for (auto& [tid, m] : members_.all()) {
    auto& work = work_[m.group];
    if (m.gone || work.excluded.count(tid)) continue;
    tp_thread t;
    if (!snapshots_.state(tid, t) || t.state == TP_ST_UNKNOWN || t.state == TP_ST_DEAD) continue;
    auto& c = cnt[m.group];
    c.first++;
    const bool waiting = t.state == TP_ST_BLOCKED || (t.state == TP_ST_RUNNABLE && t.w_pending);
    if (!waiting) continue;
    int cat = work.category(tid, WaitKey{t.w_nr, t.w_op, t.w_obj},
                            t.state == TP_ST_BLOCKED ? kUnseen : static_cast<int>(t.w_wake));
    if (cat == kIdle || cat == kGil) c.second++;
  }
  for (auto& [g, c] : cnt) {
    auto& acc = acc_[g];
    acc.interval_busy_max = std::max(acc.interval_busy_max, c.first - c.second);
  }
  last_sample_ = monotonic_ns();
}

void Tracer::tick() {
  follow_boundary();
  uint64_t now = monotonic_ns();
  if (now - last_rescan_ >= 500000000ULL) {
    pool_.rescan();
    members_.rescan(now);
    refresh_inference();
    // no interval reports: nothing more to report of a gone thread but in the summary
    std::set<uint32_t> reused;
    if (!c_.schedule.interval_ns) {
      std::map<uint32_t, Member> gone;
      for (uint32_t tid : members_.gone()) gone[tid] = *members_.find(tid);
      if (!gone.empty()) reused = retire(snapshots_.take(gone, now));
    }
    // threads that came and went since the last rescan (entries added at their fork)
    bpf_entries_ = snapshots_.sweep(pool_.pids(), members_.all(), reused, &alive_);
  }
  // every 10 ms; slower for big pools (one map lookup per thread per sample)
  uint64_t period = std::clamp<uint64_t>(members_.all().size() * 200000ULL, 10000000ULL, 100000000ULL);
  if (now - last_sample_ >= period) sample();
}

bool Tracer::target_gone() {
  if (!exited_ && watch_.check(100000000ULL)) exited_ = true;  // common/target.h policy
  return exited_;
}

// Where each group waits for work, from the times so far.
void Tracer::refresh_inference(const std::map<uint32_t, ThreadTimes>* snap) {
  std::map<uint32_t, ThreadTimes> local;
  if (!snap) {
    local = snapshots_.take(members_.all(), monotonic_ns(), /*with_hist=*/false);
    snap = &local;
  }
  const auto& locks = runtime_locks_.update(*snap, [&](uint32_t tid) { return pid_of(tid); });
  sites_.update();  // the wait keys unwound since (each once)
  const SiteMap* sites = &sites_.sites();
  // several pools under one name: split by where they wait for work (not with
  // --threads: the user said which threads are the pool)
  auto group_times = [&](bool by_base, std::map<std::string, size_t>& sizes) {
    std::map<std::string, std::map<uint32_t, ThreadTimes>> by_group;
    for (auto& [tid, m] : members_.all()) {
      const std::string& g = by_base ? m.base : m.group;
      sizes[g]++;
      auto it = snap->find(tid);
      if (it != snap->end()) by_group[g][tid] = it->second;
    }
    return by_group;
  };
  if (!c_.pattern) {
    std::map<std::string, size_t> sizes;
    std::map<uint32_t, std::string> to;
    for (auto& [g, times] : group_times(true, sizes)) {
      auto pools = pools_by_work_word(times, infer_work_waits(times, sizes[g], main_of(g, true), locks, sites));
      for (size_t i = 1; i < pools.size(); ++i)  // the largest keeps the name
        for (uint32_t tid : pools[i]) to[tid] = g + "[" + std::to_string(*pools[i].begin()) + "]";
    }
    members_.split(to);
  }
  members_.update_roles(*snap);
  std::map<std::string, size_t> sizes;
  auto by_group = group_times(false, sizes);
  for (auto& [g, n] : sizes) work_[g] = infer_work_waits(by_group[g], n, main_of(g, false), locks, sites);
  last_rescan_ = monotonic_ns();
}

// After a report boundary (SIGUSR1: runbook's window starts) the summary covers the time
// since, as every tool's final report does. The run loop counts the boundary once its
// report is out: the next tick sees it, before any thread is retired.
void Tracer::follow_boundary() {
  if (report_boundaries() == boundaries_) return;
  boundaries_ = report_boundaries();
  base_ = prev_;
  start_ = last_;
  for (auto& [g, acc] : acc_) acc = GroupAcc{};
}

Status Tracer::report(bool final) {
  follow_boundary();
  s_.poll_perf_buffer("reqs", 0);
  const uint64_t now = monotonic_ns();
  auto cur = snapshots_.take(members_.all(), now);
  refresh_inference(&cur);
  auto dq = quality(final);
  if (!dq) return Error{dq.error()};
  ReportMeta m;
  m.pid = c_.pids.front();
  m.pids = pool_.pids();
  m.comm = comm_;
  m.target_exited = exited_;
  auto groups = build(cur, prev_, last_, now, /*summary=*/false, dq->interval);
  if (c_.schedule.interval_ns) {
    // the last interval report is not the final one: the whole-run report follows it
    m.window = window_ending_now(now - last_, false);
    render(std::cout, c_, m, groups, dq->interval);
  }
  if (metrics_.enabled()) {  // every report's groups: the interval's, also without -i
    add_report_metrics(metrics_.set(), groups);
    metrics_.add_data_quality(dq->interval);
    metrics_.publish(final);
  }
  for (auto& g : groups) {
    auto& acc = acc_[g.name];
    acc.busy_max = std::max(acc.busy_max, g.busy_max);
    acc.interval_busy_max = 0;
  }
  if (final) {
    auto sum = build(cur, base_, start_, now, /*summary=*/true, dq->total);
    m.summary = true;
    m.window = window_ending_now(now - start_, true);
    render(std::cout, c_, m, sum, dq->total);
  }
  if (!final) {  // the gone threads' last interval is reported: forget them
    pool_.rescan();  // a process forked since the last rescan keeps its threads' entries
    bpf_entries_ = snapshots_.sweep(pool_.pids(), members_.all(), retire(cur), &alive_);
    for (auto it = cur.begin(); it != cur.end();) it = members_.find(it->first) ? std::next(it) : cur.erase(it);
  }
  prev_ = std::move(cur);
  last_ = now;
  if (c_.verbose)
    std::cerr << "threadpool: tracking " << members_.all().size() << " threads"
              << (pool_.pids().size() > 1 ? " of " + std::to_string(pool_.pids().size()) + " processes" : "") << " ("
              << bpf_entries_ << " BPF thread entries, " << (pool_.pids().size() > 1 ? "the pool" : "process")
              << " has " << alive_ << " threads), " << retired_ << " retired" << std::endl;
  return std::nullopt;
}

std::set<uint32_t> Tracer::retire(const std::map<uint32_t, ThreadTimes>& times) {
  std::set<uint32_t> reused;
  for (uint32_t tid : members_.gone()) {
    const Member& m = *members_.find(tid);
    const ThreadTimes* t = nullptr;
    if (auto it = times.find(tid); it != times.end()) {
      t = &it->second;
    } else {  // a new thread took the TID before this report: the times last reported
      reused.insert(tid);
      if (auto p = prev_.find(tid); p != prev_.end()) t = &p->second;
    }
    const bool excluded = work_.count(m.group) && work_[m.group].excluded.count(tid);
    const auto b = base_.find(tid);
    const ThreadTimes since = t ? delta(*t, b == base_.end() ? nullptr : &b->second) : ThreadTimes{};
    if (t && !excluded && since.on_ns + since.rq_ns + since.blk_ns > 0) {
      GroupReport one;
      one.work = work_[m.group];
      aggregate(one, {{tid, since}}, {{tid, m.comm}});
      fold(acc_[m.group].retired, one);
    }
    members_.retire(tid);
    prev_.erase(tid);
    base_.erase(tid);
    ++retired_;
  }
  return reused;
}

// The --map-entries that would have held every thread seen, with room to grow: one
// number for the warning and every withheld or qualified verdict.
uint64_t Tracer::suggested_map_entries() {
  return std::max<uint64_t>(4ULL * sizes_.threads, 4ULL * (members_.all().size() + members_.untracked()));
}

void Tracer::warn_loss(std::ostream& err) {
  DataQuality total = empty_quality();
  if (add_bpf_counters(s_, counter_table(), total)) return;
  const uint64_t full = total.map_full, untracked = members_.untracked(), lost = requests_.lost();
  if (!full && !untracked && !lost) return;
  err << "threadpool: WARNING: " << full << " updates dropped (BPF maps full), " << untracked
      << " threads untracked, " << lost << " request events lost; rerun with --map-entries "
      << suggested_map_entries() << " (now "
      << sizes_.threads << ")" << std::endl;
}

// Adds an interval's request statistics to the run's.
void Tracer::accumulate(const std::map<std::string, RequestStats>& req, uint64_t t0, uint64_t t1) {
  for (auto& [g, r] : req) {
    auto& acc = acc_[g].req;
    acc.requests += r.requests;
    acc.queue_wait.merge(r.queue_wait);
    acc.taken_known += r.taken_known;
    acc.taken_ready += r.taken_ready;
    acc.service.merge(r.service);
    acc.response.merge(r.response);
    if (r.have_depth) {
      acc.have_depth = true;
      acc_[g].depth_integral += static_cast<long double>(r.depth.avg) * (t1 - t0);
      acc_[g].depth_ns += t1 - t0;
      acc.depth.max = std::max(acc.depth.max, r.depth.max);
    }
  }
}

std::vector<GroupReport> Tracer::build(const std::map<uint32_t, ThreadTimes>& cur,
                                       const std::map<uint32_t, ThreadTimes>& prev, uint64_t t0,
                                       uint64_t t1, bool summary, const DataQuality& dq) {
  std::map<std::string, std::map<uint32_t, ThreadTimes>> deltas;
  std::map<std::string, size_t> sizes;
  std::map<uint32_t, std::string> names;
  if (summary)  // groups with only retired threads still have a summary
    for (auto& [g, acc] : acc_)
      if (acc.retired.threads) sizes[g];
  for (auto& [tid, m] : members_.all()) {
    names[tid] = m.comm;
    auto it = cur.find(tid);
    if (it == cur.end()) continue;
    auto p = prev.find(tid);
    ThreadTimes d = delta(it->second, p == prev.end() ? nullptr : &p->second);
    bool active = d.on_ns + d.rq_ns + d.blk_ns > 0;
    if (!active && m.gone) continue;
    if (work_.count(m.group) && work_[m.group].excluded.count(tid)) continue;
    sizes[m.group]++;
    deltas[m.group][tid] = std::move(d);
  }
  std::vector<std::string> order;
  for (auto& [g, n] : sizes) order.push_back(g);
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string& a, const std::string& b) { return sizes[a] > sizes[b]; });
  if (!summary) {
    interval_req_ = requests_.collect(t0, t1, [&](uint32_t tid) -> std::string {
      if (const Member* m = members_.find(tid)) return m->group;
      return order.empty() ? "" : order.front();
    });
    accumulate(interval_req_, t0, t1);
  }
  const uint64_t untracked = summary ? members_.untracked() : members_.untracked() - untracked_reported_;
  if (!summary) untracked_reported_ = members_.untracked();
  std::vector<GroupReport> out;
  for (auto& name : order) {
    GroupReport g;
    g.name = name;
    g.threads = sizes[name];
    g.interval_ns = t1 - t0;
    g.work = work_[name];
    aggregate(g, deltas[name], names);
    for (auto& r : g.rows) r.pid = pid_of(r.tid);
    g.processes = process_rows(g.rows);
    auto& acc = acc_[name];
    if (summary) {
      add_retired(g, acc.retired);
      g.req = acc.req;
      if (acc.depth_ns) g.req.depth.avg = static_cast<double>(acc.depth_integral / acc.depth_ns);
      g.busy_max = std::max(acc.busy_max, acc.interval_busy_max);
    } else {
      auto it = interval_req_.find(name);
      if (it != interval_req_.end()) g.req = it->second;
      g.busy_max = acc.interval_busy_max;
    }
    // a sample cannot see less than the average; keep max >= ceil(avg)
    g.busy_max = std::max<uint64_t>(g.busy_max, static_cast<uint64_t>(g.busy_avg + 0.5));
    g.busy_max = std::min<uint64_t>(g.busy_max, g.threads);
    g.dropped = dq.map_full;
    g.untracked = untracked;
    g.lost_events = dq.lost_events;
    g.suggest_map_entries = suggested_map_entries();
    decide_verdict(g);
    out.push_back(std::move(g));
  }
  // the pools that matter first: groups of several threads before single threads
  // (a JVM has a dozen single service threads, mostly asleep), then by CPU activity
  std::stable_sort(out.begin(), out.end(), [](const GroupReport& a, const GroupReport& b) {
    const bool pa = a.threads >= 2, pb = b.threads >= 2;
    if (pa != pb) return pa;
    const uint64_t ca = a.on_ns + a.rq_ns, cb = b.on_ns + b.rq_ns;
    return ca != cb ? ca > cb : a.threads > b.threads;
  });
  return out;
}

}  // namespace threadpool
