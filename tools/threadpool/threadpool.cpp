#include "tools/threadpool/threadpool.h"

#include <bcc/BPF.h>
#include <linux/types.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "common/bpf_session.h"
#include "common/bpf_maps.h"
#include "common/btf.h"
#include "common/cli.h"
#include "common/embedded.h"
#include "common/proc.h"

extern "C" {
#include "hist.h"
#include "threadpool_shared.h"
}
static_assert(sizeof(tp_thread) == 80, "tp_thread layout shared with BPF");
static_assert(sizeof(tp_wait_key) == 24, "tp_wait_key layout shared with BPF");
static_assert(sizeof(tp_wait_val) == 24, "tp_wait_val layout shared with BPF");
static_assert(sizeof(tp_hist_key) == 8, "tp_hist_key layout shared with BPF");
static_assert(sizeof(tp_conn_key) == 8, "tp_conn_key layout shared with BPF");
static_assert(sizeof(tp_conn) == 24, "tp_conn layout shared with BPF");
static_assert(sizeof(tp_req_event) == 40, "tp_req_event layout shared with BPF");

namespace bpfdiag {
extern const EmbeddedFile kBpf_threadpool[];
}

namespace threadpool {
using namespace bpfdiag;

const char kHelp[] = R"(threadpool - is a process's thread pool CPU-starved, blocked, or too small?

USAGE: threadpool [-h] -p PID [--threads PATTERN] [-T] [-P] [-H] [-j] [--ebpf] [interval] [duration]

Measures, per interval, how busy a process's worker threads are, how long they
wait for a CPU, what busy workers are blocked in (lock, I/O, poll, sleep,
other), and for socket servers how long accepted connections queue before a
worker reads them.
Workers waiting for work (a shared condition variable, accept, epoll) are found
automatically and reported as idle; the report says what was inferred.

OPTIONS:
  -p, --pid PID          the process to watch (required)
      --threads PATTERN  the pool: threads whose name matches this regex
                         (default: every thread, grouped by name minus digits)
  -T, --timestamp        print a timestamp on each report
  -P, --per-thread       a line per thread in text reports
  -H, --hist             dispatch latency histogram in text reports
  -j, --json             NDJSON: a record per group and interval, then summaries
      --ebpf             print the BPF program and exit
  -h, --help             show this help

  interval               report every interval (seconds, or with a unit: 500ms)
  duration               stop after this long; default: until Ctrl-C or exit

EXAMPLES:
  threadpool -p 1234                    # summary at Ctrl-C, grouped by name
  threadpool -p 1234 1                  # a report every second
  threadpool -p 1234 --threads worker 1 10   # pool: threads *worker*, 10s
  threadpool -p 1234 -P 5               # per-thread lines every 5 seconds
  threadpool -p 1234 -j 1 30            # NDJSON every second for 30 seconds
)";

Result<Config> parse_args(int argc, char** argv) {
  cxxopts::Options opts("threadpool");
  opts.add_options()("h,help", "")("p,pid", "", cxxopts::value<std::string>())(
      "threads", "", cxxopts::value<std::string>())("T,timestamp", "")("P,per-thread", "")(
      "H,hist", "")("j,json", "")("ebpf", "");
  add_positionals(opts);
  auto r = parse_cli(opts, argc, argv);
  if (!r) return Error{r.error()};
  Config c;
  c.help = r->count("help");
  c.timestamp = r->count("timestamp");
  c.per_thread = r->count("per-thread");
  c.hist = r->count("hist");
  c.json = r->count("json");
  c.ebpf = r->count("ebpf");
  if (c.help) return c;
  if (auto p = opt_str(*r, "pid")) {
    auto v = parse_uint(*p, "PID", 1, 4194304);
    if (!v) return Error{v.error()};
    c.pid = static_cast<uint32_t>(*v);
  } else {
    return Error{"-p PID is required"};
  }
  if (auto t = opt_str(*r, "threads")) {
    if (t->empty()) return Error{"--threads PATTERN must not be empty"};
    try {
      std::regex re(*t);
    } catch (const std::regex_error& e) {
      return Error{"invalid --threads pattern '" + *t + "': " + e.what()};
    }
    c.pattern = *t;
  }
  auto pos = positionals(*r);
  if (pos.size() > 2) return Error{"unexpected argument '" + pos[2] + "'"};
  constexpr uint64_t kMs = 1000000ULL, kSec = 1000000000ULL, kDay = 86400ULL * kSec;
  if (!pos.empty()) {
    auto iv = parse_duration_ns(pos[0], "interval", kSec, 100 * kMs, kDay);
    if (!iv) return Error{iv.error()};
    c.schedule.interval_ns = *iv;
  }
  if (pos.size() == 2) {
    auto d = parse_duration_ns(pos[1], "duration", kSec, 100 * kMs, 30 * kDay);
    if (!d) return Error{d.error()};
    c.schedule.duration_ns = *d;
  }
  // --ebpf only prints the program: no process is needed
  if (!c.ebpf)
    if (auto st = check_pids_exist({c.pid})) return Error{st->message};
  return c;
}

std::string bpf_text() { return kBpf_threadpool[0].text; }

Result<std::vector<std::string>> bpf_cflags(const Config& c) {
  auto flags = kernel_offset_cflags({{"OFF_TASK_PID", "task_struct", {"pid"}},
                                     {"OFF_TASK_TGID", "task_struct", {"tgid"}},
                                     {"OFF_TASK_STATE", "task_struct", {"__state", "state"}}});
  if (!flags) return Error{flags.error()};
  flags.value().push_back("-DTARGET_TGID=" + std::to_string(c.pid));
  return flags;
}

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// State letter from /proc/PID/task/TID/stat ('\0' if unreadable).
char task_state(uint32_t pid, uint32_t tid) {
  std::string s = read_first_line("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
  auto rp = s.rfind(')');
  return rp == std::string::npos || rp + 2 >= s.size() ? '\0' : s[rp + 2];
}

// Initial state of a thread from /proc (the tracepoints only see transitions).
tp_thread initial_state(uint32_t pid, uint32_t tid, uint64_t now) {
  tp_thread t = {};
  t.ts = now;
  t.sys_nr = TP_NO_SYSCALL;
  t.w_nr = TP_NO_SYSCALL;
  char st = task_state(pid, tid);
  if (st == 'R') {
    t.state = TP_ST_RUNNING;
  } else if (st == 'S' || st == 'D' || st == 'I' || st == 't' || st == 'T') {
    t.state = TP_ST_BLOCKED;
    std::istringstream in(read_first_line("/proc/" + std::to_string(pid) + "/task/" +
                                          std::to_string(tid) + "/syscall"));
    long nr = -1;
    std::string a0, a1;
    uint64_t arg0 = 0, arg1 = 0;
    // "running" or a short line: not in a syscall, the wait stays unknown
    if (in >> nr >> a0 >> a1 && parse_syscall_arg(a0, arg0) && parse_syscall_arg(a1, arg1)) {
      t.sys_nr = t.w_nr = static_cast<int32_t>(nr);
      t.sys_arg0 = arg0;
      t.sys_arg1 = static_cast<uint32_t>(arg1);
      if (nr == TP_NR_FUTEX) {
        t.w_op = static_cast<uint32_t>(arg1) & TP_FUTEX_CMD_MASK;
        t.w_obj = arg0 & ~7ULL;
      }
    }
  }
  return t;
}

struct Member {
  std::string comm, group;
  bool gone = false;
};

struct GroupAcc {  // per group, across the whole run (for the summary)
  RequestStats req;
  long double depth_integral = 0;
  uint64_t depth_ns = 0;
  uint64_t busy_max = 0;
  uint64_t interval_busy_max = 0;
};

class Tracer {
 public:
  Tracer(const Config& c, BpfSession& s)
      : c_(c), s_(s), threads_(s.bpf().get_hash_table<uint32_t, tp_thread>("threads")),
        waits_(s.bpf().get_hash_table<tp_wait_key, tp_wait_val>("waits")),
        hist_(s.bpf().get_hash_table<tp_hist_key, uint64_t>("rqhist")),
        conns_(s.bpf().get_hash_table<tp_conn_key, tp_conn>("conns")),
        counters_(s.bpf().get_array_table<uint64_t>("counters")) {
    if (c.pattern) re_ = std::regex(*c.pattern);
  }

  // Reads /proc/PID/task and fills the threads map. Error if the pool is empty.
  Status init() {
    comm_ = proc_comm(c_.pid);
    rescan();
    if (members_.empty()) {
      std::set<std::string> names;
      for (auto tid : proc_threads(c_.pid)) names.insert(proc_comm(tid));
      std::string list;
      for (auto& n : names) list += (list.empty() ? "" : ", ") + n;
      if (!pid_exists(c_.pid)) return Error{"process " + std::to_string(c_.pid) + " exited"};
      return Error{"no thread of PID " + std::to_string(c_.pid) + " (" + comm_ +
                   ") matches --threads '" + *c_.pattern + "'; its thread names: " + list};
    }
    start_ = last_ = monotonic_ns();
    refresh_inference();
    return std::nullopt;
  }

  void rescan() {
    const uint64_t now = monotonic_ns();
    std::set<uint32_t> alive;
    for (uint32_t tid : proc_threads(c_.pid)) {
      alive.insert(tid);
      std::string comm = proc_comm(tid);
      bool in_pool = !c_.pattern || std::regex_search(comm, re_);
      auto it = members_.find(tid);
      if (!in_pool) {
        if (it == members_.end()) threads_.remove_value(tid);  // added at fork, not ours
        continue;
      }
      std::string group = c_.pattern ? *c_.pattern : group_of_name(comm);
      if (it == members_.end()) {
        tp_thread existing;
        if (!threads_.get_value(tid, existing).ok()) {
          if (!threads_.update_value(tid, initial_state(c_.pid, tid, now)).ok()) continue;
          ++assumed_start_;
        }
        members_[tid] = Member{comm, group, false};
      } else {
        it->second.comm = comm;
        it->second.group = group;
      }
    }
    for (auto& [tid, m] : members_)
      if (!alive.count(tid)) m.gone = true;
    last_rescan_ = now;
  }

  nlohmann::json start_record() const {
    nlohmann::json threads = nlohmann::json::array();
    for (auto& [tid, m] : members_) threads.push_back({{"tid", tid}, {"name", m.comm}, {"group", m.group}});
    return {{"type", "threadpool_start"}, {"time_ns", realtime_ns()}, {"pid", c_.pid},
            {"comm", comm_},   {"pattern", c_.pattern ? *c_.pattern : ""}, {"threads", threads}};
  }

  void on_request(const tp_req_event& e) { events_.push_back(e); }
  void on_lost(uint64_t n) { lost_ += n; }

  // Every ~10 ms: how many of each group's workers are busy right now.
  void sample() {
    std::map<std::string, std::pair<uint64_t, uint64_t>> cnt;  // group -> {members, idle}
    for (auto& [tid, m] : members_) {
      if (m.gone || work_[m.group].excluded == tid) continue;
      tp_thread t;
      if (!threads_.get_value(tid, t).ok() || t.state == TP_ST_UNKNOWN || t.state == TP_ST_DEAD)
        continue;
      auto& c = cnt[m.group];
      c.first++;
      WaitKey k{t.w_nr, t.w_op, t.w_obj};
      bool idle = (t.state == TP_ST_BLOCKED || (t.state == TP_ST_RUNNABLE && t.w_pending)) &&
                  work_[m.group].is_idle(tid, k);
      if (idle) c.second++;
    }
    for (auto& [g, c] : cnt) {
      auto& acc = acc_[g];
      acc.interval_busy_max = std::max(acc.interval_busy_max, c.first - c.second);
    }
    last_sample_ = monotonic_ns();
  }

  void tick() {
    uint64_t now = monotonic_ns();
    if (now - last_rescan_ >= 500000000ULL) {
      rescan();
      refresh_inference();
    }
    // every 10 ms; slower for big pools (one map lookup per thread per sample)
    uint64_t period = std::clamp<uint64_t>(members_.size() * 200000ULL, 10000000ULL, 100000000ULL);
    if (now - last_sample_ >= period) sample();
  }

  bool target_gone() {
    if (!exited_ && !proc_running(c_.pid)) exited_ = true;
    return exited_;
  }

  void report(bool final) {
    s_.poll_perf_buffer("reqs", 0);
    const uint64_t now = monotonic_ns();
    auto cur = snapshot(now);
    refresh_inference(&cur);
    const bool interval_mode = c_.schedule.interval_ns.has_value();
    auto groups = build(cur, prev_, last_, now, /*summary=*/false);
    Quality dq = quality(final);
    ReportMeta m;
    m.pid = c_.pid;
    m.comm = comm_;
    m.final = final;
    m.target_exited = exited_;
    if (interval_mode) {
      m.interval_ns = now - last_;
      render(std::cout, c_, m, groups, dq.interval);
    }
    for (auto& g : groups) {
      auto& acc = acc_[g.name];
      acc.busy_max = std::max(acc.busy_max, g.busy_max);
      acc.interval_busy_max = 0;
    }
    if (final) {
      auto sum = build(cur, {}, start_, now, /*summary=*/true);
      m.summary = true;
      m.interval_ns = now - start_;
      render(std::cout, c_, m, sum, dq.total);
    }
    prev_ = std::move(cur);
    last_ = now;
    events_.clear();
  }

 private:
  std::map<uint32_t, ThreadTimes> snapshot(uint64_t now, bool with_hist = true) {
    std::map<uint32_t, ThreadTimes> out;
    for (auto& [tid, t] : threads_.get_table_offline()) {
      auto mi = members_.find(tid);
      if (mi == members_.end()) continue;
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
        if (t.w_pending) x.waits[k].wake_rq_ns += part;
      }
      if (t.state == TP_ST_BLOCKED) {
        x.blk_ns += part;
        x.waits[k].blk_ns += part;
      }
    }
    for (auto& [k, v] : waits_.get_table_offline()) {
      auto it = out.find(k.tid);
      if (it == out.end()) continue;
      auto& w = it->second.waits[WaitKey{k.nr, k.op, k.obj}];
      w.blk_ns += v.blk_ns;
      w.wake_rq_ns += v.wake_rq_ns;
      w.count += v.count;
    }
    if (with_hist) {
      for (auto& [k, v] : hist_.get_table_offline()) {
        auto it = out.find(k.tid);
        if (it != out.end()) it->second.rq_hist[k.idx] += v;
      }
    }
    return out;
  }

  void refresh_inference(const std::map<uint32_t, ThreadTimes>* snap = nullptr) {
    std::map<uint32_t, ThreadTimes> local;
    if (!snap) {
      local = snapshot(monotonic_ns(), /*with_hist=*/false);
      snap = &local;
    }
    std::map<std::string, std::map<uint32_t, ThreadTimes>> by_group;
    std::map<std::string, size_t> sizes;
    for (auto& [tid, m] : members_) {
      sizes[m.group]++;
      auto it = snap->find(tid);
      if (it != snap->end()) by_group[m.group][tid] = it->second;
    }
    for (auto& [g, n] : sizes) work_[g] = infer_work_waits(by_group[g], n, c_.pid);
    last_rescan_ = monotonic_ns();
  }

  // Requests completed in (t0, t1] and queue depth over it, per group.
  std::map<std::string, RequestStats> requests(uint64_t t0, uint64_t t1,
                                               const std::vector<std::string>& order) {
    std::map<std::string, RequestStats> out;
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    std::set<std::pair<uint32_t, uint64_t>> seen;
    std::map<std::string, uint64_t> reads;
    auto group_of = [&](uint32_t tid) -> std::string {
      auto it = members_.find(tid);
      if (it != members_.end()) return it->second.group;
      return order.empty() ? "" : order.front();
    };
    for (auto& e : events_) {
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
    for (auto& [k, v] : conns_.get_table_offline()) {
      if (!v.accept_ts) continue;
      any_accept_ = true;
      if (seen.count({k.fd, v.accept_ts})) continue;
      if (v.phase == TP_CONN_ACCEPTED) spans.push_back({v.accept_ts, 0});
      else if (v.phase == TP_CONN_READING || v.phase == TP_CONN_RESPONDED)
        spans.push_back({v.accept_ts, v.read_ts});
      if (v.phase == TP_CONN_READING) reads[group_of(v.reader)]++;
    }
    if (!any_accept_) return out;
    DepthStats d = queue_depth(spans, t0, t1);
    // the process-wide queue belongs to the group that takes the requests
    std::string taker = req_group_;
    uint64_t best = 0;
    for (auto& [g, n] : reads)
      if (n > best) best = n, taker = g;
    if (taker.empty() && !order.empty()) taker = order.front();
    req_group_ = taker;
    auto& r = out[taker];
    r.have_depth = true;
    r.depth = d;
    return out;
  }

  std::vector<GroupReport> build(const std::map<uint32_t, ThreadTimes>& cur,
                                 const std::map<uint32_t, ThreadTimes>& prev, uint64_t t0,
                                 uint64_t t1, bool summary) {
    std::map<std::string, std::map<uint32_t, ThreadTimes>> deltas;
    std::map<std::string, size_t> sizes;
    std::map<uint32_t, std::string> names;
    for (auto& [tid, m] : members_) {
      names[tid] = m.comm;
      auto it = cur.find(tid);
      if (it == cur.end()) continue;
      auto p = prev.find(tid);
      ThreadTimes d = delta(it->second, p == prev.end() ? nullptr : &p->second);
      bool active = d.on_ns + d.rq_ns + d.blk_ns > 0;
      if (!active && m.gone) continue;
      if (work_.count(m.group) && work_[m.group].excluded == tid) continue;
      sizes[m.group]++;
      deltas[m.group][tid] = std::move(d);
    }
    std::vector<std::string> order;
    for (auto& [g, n] : sizes) order.push_back(g);
    std::stable_sort(order.begin(), order.end(),
                     [&](const std::string& a, const std::string& b) { return sizes[a] > sizes[b]; });
    std::map<std::string, RequestStats> req;
    if (!summary) {
      req = requests(t0, t1, order);
      for (auto& [g, r] : req) {
        auto& acc = acc_[g].req;
        acc.requests += r.requests;
        acc.queue_wait.merge(r.queue_wait);
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
    std::vector<GroupReport> out;
    for (auto& name : order) {
      GroupReport g;
      g.name = name;
      g.threads = sizes[name];
      g.interval_ns = t1 - t0;
      g.work = work_[name];
      aggregate(g, deltas[name], names);
      auto& acc = acc_[name];
      if (summary) {
        g.req = acc.req;
        if (acc.depth_ns) g.req.depth.avg = static_cast<double>(acc.depth_integral / acc.depth_ns);
        g.busy_max = std::max(acc.busy_max, acc.interval_busy_max);
      } else {
        auto it = req.find(name);
        if (it != req.end()) g.req = it->second;
        g.busy_max = acc.interval_busy_max;
      }
      // a sample cannot see less than the average; keep max >= ceil(avg)
      g.busy_max = std::max<uint64_t>(g.busy_max, static_cast<uint64_t>(g.busy_avg + 0.5));
      g.busy_max = std::min<uint64_t>(g.busy_max, g.threads);
      decide_verdict(g);
      out.push_back(std::move(g));
    }
    return out;
  }

  // Data quality of the interval just ended (per-interval deltas of the cumulative
  // counters) and, when final, of the whole run (totals).
  struct Quality {
    DataQuality interval, total;
  };
  Quality quality(bool final) {
    // slots: the BPF counters, then lost perf events, then threads whose state was
    // read from /proc
    constexpr size_t kLost = TP_NCOUNTERS, kAssumed = TP_NCOUNTERS + 1, kSlots = TP_NCOUNTERS + 2;
    std::vector<uint64_t> tot(kSlots, 0), iv(kSlots, 0);
    for (int i = 0; i < TP_NCOUNTERS; ++i) counters_.get_value(i, tot[i]);
    tot[kLost] = lost_;
    tot[kAssumed] = assumed_start_;
    for (size_t i = 0; i < kSlots; ++i) iv[i] = deltas_.delta(i, tot[i]);
    // requests accepted or being served but not answered when tracing ended
    uint64_t inflight = 0;
    if (final)
      for (auto& [k, v] : conns_.get_table_offline())
        if (v.phase == TP_CONN_ACCEPTED || v.phase == TP_CONN_READING) ++inflight;
    auto fill = [&](const std::vector<uint64_t>& ctr) {
      DataQuality dq;
      dq.lost_events = ctr[kLost];
      dq.map_full = ctr[TP_C_THREADS_FULL] + ctr[TP_C_WAITS_FULL] + ctr[TP_C_HIST_FULL] +
                    ctr[TP_C_CONNS_FULL];
      dq.unmatched_begin = inflight;
      dq.extra["closed_unread"] = ctr[TP_C_CLOSED_UNREAD];
      dq.extra["closed_unanswered"] = ctr[TP_C_CLOSED_UNANSWERED];
      dq.extra["fd_reused"] = ctr[TP_C_FD_REUSED];
      dq.extra["state_assumed_at_start"] = ctr[kAssumed];
      return dq;
    };
    return {fill(iv), fill(tot)};
  }

  const Config& c_;
  BpfSession& s_;
  ebpf::BPFHashTable<uint32_t, tp_thread> threads_;
  ebpf::BPFHashTable<tp_wait_key, tp_wait_val> waits_;
  ebpf::BPFHashTable<tp_hist_key, uint64_t> hist_;
  ebpf::BPFHashTable<tp_conn_key, tp_conn> conns_;
  ebpf::BPFArrayTable<uint64_t> counters_;
  std::regex re_;
  std::string comm_;
  std::map<uint32_t, Member> members_;
  std::map<std::string, WorkWaits> work_;
  std::map<std::string, GroupAcc> acc_;
  std::map<uint32_t, ThreadTimes> prev_;
  CounterDeltas deltas_;
  std::vector<tp_req_event> events_;
  std::string req_group_;
  bool any_accept_ = false;
  bool exited_ = false;
  uint64_t lost_ = 0, assumed_start_ = 0;
  uint64_t start_ = 0, last_ = 0, last_rescan_ = 0, last_sample_ = 0;
};

void on_event(void* cookie, void* data, int size) {
  if (size < static_cast<int>(sizeof(tp_req_event))) return;
  tp_req_event e;
  std::memcpy(&e, data, sizeof e);
  static_cast<Tracer*>(cookie)->on_request(e);
}

void on_lost(void* cookie, uint64_t n) { static_cast<Tracer*>(cookie)->on_lost(n); }

}  // namespace

Status run(const Config& c) {
  auto flags = bpf_cflags(c);
  if (!flags) return Error{flags.error()};
  if (c.ebpf) {
    std::cout << ebpf_listing(bpf_text(), *flags);
    return std::nullopt;
  }
  if (!pid_exists(c.pid)) return Error{"no process with PID " + std::to_string(c.pid)};
  auto tids = proc_threads(c.pid);
  if (tids.size() < 2)
    return Error{"PID " + std::to_string(c.pid) + " (" + proc_comm(c.pid) +
                 ") has a single thread; threadpool needs a multi-threaded process"};
  if (auto st = preflight({})) return st;
  auto s = BpfSession::load(bpf_text(), *flags);
  if (!s) return Error{s.error()};
  auto& session = *s.value();
  for (const char* tp : {"sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_process_fork",
                         "sys_enter", "sys_exit"})
    if (auto st = session.attach_raw_tracepoint(tp, std::string("raw_tracepoint__") + tp))
      return st;
  Tracer tracer(c, session);
  if (auto st = session.open_perf_buffer("reqs", on_event, on_lost, &tracer, 256)) return st;
  if (auto st = tracer.init()) return st;
  if (c.json)
    emit_json(std::cout, tracer.start_record());
  else
    std::cout << "Tracing thread pool of PID " << c.pid << " (" << proc_comm(c.pid)
              << ")... Hit Ctrl-C to end." << std::endl;

  RunHooks hooks;
  hooks.poll = [&](int timeout_ms) {
    const uint64_t end = monotonic_ns() + static_cast<uint64_t>(timeout_ms) * 1000000ULL;
    while (true) {
      session.poll_perf_buffer("reqs", 0);
      tracer.tick();
      uint64_t now = monotonic_ns();
      if (now >= end) break;
      uint64_t nap = std::min<uint64_t>(end - now, 10000000ULL);
      struct timespec ts = {0, static_cast<long>(nap)};
      nanosleep(&ts, nullptr);
    }
  };
  hooks.report = [&](bool final) { tracer.report(final); };
  hooks.should_stop = [&]() { return tracer.target_gone(); };
  run_loop(c.schedule, hooks);
  return std::nullopt;
}

}  // namespace threadpool
