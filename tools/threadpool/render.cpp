// threadpool output: one compact text block per group and interval, or NDJSON.
#include <algorithm>
#include <cstdio>

#include "common/table.h"
#include "tools/threadpool/threadpool.h"

namespace threadpool {
using bpfdiag::fmt_ns;  // the suite's compact duration ("812ns", "12.3us", "4.56ms")
using bpfdiag::Histogram;

namespace {

constexpr size_t kShownGroups = 3;
constexpr size_t kShownProcesses = 8;  // per group in text reports, unless -a or -P

double pct(uint64_t v, uint64_t total) { return total ? 100.0 * v / total : 0.0; }

// <metric>_count, <metric>_avg_ns, _p50_ns, _p90_ns, _p99_ns, _max_ns
void add_stats(nlohmann::json& j, const std::string& metric, const Histogram& h) {
  j[metric + "_count"] = h.count();
  j[metric + "_avg_ns"] = h.mean();
  j[metric + "_p50_ns"] = h.percentile(50);
  j[metric + "_p90_ns"] = h.percentile(90);
  j[metric + "_p99_ns"] = h.percentile(99);
  j[metric + "_max_ns"] = h.max();
}

nlohmann::json reasons(const uint64_t* v) {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < kNumReasons; ++i) j[reason_name(i)] = v[i];
  return j;
}

std::string lat_line(const char* label, const Histogram& h) {
  char b[160];
  std::snprintf(b, sizeof b, "    %-11s avg %-9s p50 %-9s p90 %-9s p99 %s\n", label,
                fmt_ns(h.mean()).c_str(), fmt_ns(h.percentile(50)).c_str(),
                fmt_ns(h.percentile(90)).c_str(), fmt_ns(h.percentile(99)).c_str());
  return b;
}

// A pool of processes: a line per process (the busiest first), % of its threads' time.
void text_processes(std::ostream& os, const Config& c, const GroupReport& g) {
  if (g.processes.size() < 2) return;
  std::vector<const ProcessRow*> order;
  for (const auto& p : g.processes) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](const ProcessRow* a, const ProcessRow* b) {
    return a->on_ns + a->rq_ns > b->on_ns + b->rq_ns;
  });
  const size_t shown = c.all_groups || c.per_thread ? order.size() : std::min(order.size(), kShownProcesses);
  char b[160];
  os << "  per process:  PID COMM          THR ONCPU  RUNQ  IDLE BLOCKED  UTIL% CPUW%\n";
  for (size_t i = 0; i < shown; ++i) {
    const ProcessRow& p = *order[i];
    const uint64_t t = p.total();
    uint64_t blocked = 0;
    for (auto v : p.blocked_ns) blocked += v;
    std::snprintf(b, sizeof b, "%19u %-12.12s %4zu %5.1f %5.1f %5.1f %7.1f %6.1f %5.1f\n", p.pid,
                  p.comm.c_str(), p.threads, pct(p.on_ns, t), pct(p.rq_ns, t), pct(p.idle_ns, t), pct(blocked, t),
                  100 * p.utilization(), pct(p.cpu_wait_ns, t));
    os << b;
  }
  if (shown < order.size()) os << "  (" << order.size() - shown << " more processes; -a shows all)\n";
}

void text_group(std::ostream& os, const Config& c, const ReportMeta& m, const GroupReport& g) {
  char b[256];
  const uint64_t t = g.accounted_ns;
  const double secs = m.window.interval_ns / 1e9;
  std::snprintf(b, sizeof b, "%s\"%s\": %zu thread%s, %.2fs  verdict: %s\n",
                m.summary ? "summary " : "", g.name.c_str(), g.threads, g.threads == 1 ? "" : "s",
                secs, g.verdict.c_str());
  os << b << "  why: " << g.why << "\n";
  std::snprintf(b, sizeof b, "  busy: avg %.2f, max %llu of %zu (utilisation %.1f%%)\n", g.busy_avg,
                static_cast<unsigned long long>(g.busy_max), g.threads, 100 * g.utilization);
  os << b;
  std::snprintf(b, sizeof b, "  time: on-cpu %.1f%% runnable %.1f%% idle %.1f%% lock %.1f%% io %.1f%%\n",
                pct(g.on_ns, t), pct(g.rq_ns, t), pct(g.idle_ns, t), pct(g.blocked_ns[kLock], t),
                pct(g.blocked_ns[kIo], t));
  os << b;
  std::snprintf(b, sizeof b, "        poll %.1f%% sleep %.1f%% gil %.1f%% other %.1f%%\n",
                pct(g.blocked_ns[kPoll], t), pct(g.blocked_ns[kSleep], t),
                pct(g.blocked_ns[kGil], t), pct(g.blocked_ns[kOther], t));
  os << b;
  std::snprintf(b, sizeof b, "  waiting for a CPU: %.1f%% (all runnable time, wake-ups for work too)\n",
                pct(g.cpu_wait_ns, t));
  os << b;
  std::snprintf(b, sizeof b, "  dispatch latency: avg %s p50 %s p90 %s p99 %s (%llu waits)\n",
                fmt_ns(g.dispatch.mean()).c_str(), fmt_ns(g.dispatch.percentile(50)).c_str(),
                fmt_ns(g.dispatch.percentile(90)).c_str(), fmt_ns(g.dispatch.percentile(99)).c_str(),
                static_cast<unsigned long long>(g.dispatch.count()));
  os << b;
  if (c.hist && !g.dispatch.empty()) bpfdiag::print_log2_hist(os, g.dispatch.log2_slots(), "nsecs");
  if (g.req.requests || g.req.have_depth) {
    std::snprintf(b, sizeof b, "  requests: %llu (%.0f/s), queue depth avg %.2f max %llu\n",
                  static_cast<unsigned long long>(g.req.requests),
                  secs > 0 ? g.req.requests / secs : 0.0, g.req.depth.avg,
                  static_cast<unsigned long long>(g.req.depth.max));
    os << b;
    if (g.req.requests) {
      if (!g.req.queue_wait.empty()) os << lat_line("queue wait", g.req.queue_wait);
      os << lat_line("service", g.req.service);
      if (!g.req.response.empty()) os << lat_line("response", g.req.response);
    }
  }
  os << "  work waits (inferred): " << g.work.description << "\n";
  text_processes(os, c, g);
  if (c.per_thread) {
    os << "     TID COMM          ONCPU  RUNQ  IDLE  LOCK    IO  POLL SLEEP   GIL  OTH%\n";
    for (const auto& r : g.rows) {
      uint64_t rt = r.on_ns + r.rq_ns + r.idle_ns;
      for (auto v : r.blocked_ns) rt += v;
      std::snprintf(b, sizeof b,
                    "%8u %-12.12s %5.1f %5.1f %5.1f %5.1f %5.1f %5.1f %5.1f %5.1f %5.1f\n", r.tid,
                    r.name.c_str(), pct(r.on_ns, rt), pct(r.rq_ns, rt), pct(r.idle_ns, rt),
                    pct(r.blocked_ns[kLock], rt), pct(r.blocked_ns[kIo], rt),
                    pct(r.blocked_ns[kPoll], rt), pct(r.blocked_ns[kSleep], rt),
                    pct(r.blocked_ns[kGil], rt), pct(r.blocked_ns[kOther], rt));
      os << b;
    }
  }
}

nlohmann::json thread_json(const ThreadRow& r) {
  return {{"tid", r.tid},
          {"pid", r.pid},
          {"comm", r.name},
          {"oncpu_total_ns", r.on_ns},
          {"runnable_total_ns", r.rq_ns},
          {"cpu_wait_total_ns", r.cpu_wait_ns},
          {"idle_total_ns", r.idle_ns},
          {"blocked_total_ns", reasons(r.blocked_ns)}};
}

nlohmann::json process_json(const ProcessRow& p) {
  return {{"pid", p.pid},
          {"comm", p.comm},
          {"thread_count", p.threads},
          {"utilization", p.utilization()},
          {"oncpu_total_ns", p.on_ns},
          {"runnable_total_ns", p.rq_ns},
          {"cpu_wait_total_ns", p.cpu_wait_ns},
          {"idle_total_ns", p.idle_ns},
          {"blocked_total_ns", reasons(p.blocked_ns)}};
}

nlohmann::json group_fields(const ReportMeta& m, const GroupReport& g) {
  nlohmann::json threads = nlohmann::json::array();
  for (const auto& r : g.rows) threads.push_back(thread_json(r));
  nlohmann::json processes = nlohmann::json::array();
  for (const auto& p : g.processes) processes.push_back(process_json(p));
  nlohmann::json locks = nlohmann::json::array();
  for (const auto& [obj, name] : g.work.runtime_locks) locks.push_back(name);
  nlohmann::json j = {{"pid", m.pid},
                      {"comm", m.comm},
                      {"group", g.name},
                      {"thread_count", g.threads},
                      {"utilization", g.utilization},
                      {"busy_avg", g.busy_avg},
                      {"busy_max", g.busy_max},
                      {"oncpu_total_ns", g.on_ns},
                      {"runnable_total_ns", g.rq_ns},
                      {"cpu_wait_total_ns", g.cpu_wait_ns},
                      {"idle_total_ns", g.idle_ns},
                      {"accounted_total_ns", g.accounted_ns},
                      {"blocked_total_ns", reasons(g.blocked_ns)},
                      {"dispatch_hist", g.dispatch.to_json()},
                      {"request_count", g.req.requests},
                      {"queue_depth_avg", g.req.depth.avg},
                      {"queue_depth_max", g.req.depth.max},
                      {"queue_tracked", g.req.have_depth},
                      {"work_waits",
                       {{"description", g.work.description}, {"found", g.work.found}, {"runtime_locks", locks}}},
                      {"verdict", g.verdict},
                      {"verdict_reason", g.why},
                      {"threads", threads},
                      {"processes", processes},
                      {"pool_pids", m.pids},
                      {"target_exited", m.target_exited}};
  add_stats(j, "dispatch", g.dispatch);
  add_stats(j, "queue_wait", g.req.queue_wait);
  add_stats(j, "service", g.req.service);
  add_stats(j, "response", g.req.response);
  return j;
}

// The report's totals; also the record of a report in which no thread was seen.
nlohmann::json summary_fields(const ReportMeta& m, const std::vector<GroupReport>& groups) {
  uint64_t threads = 0, requests = 0;
  for (const auto& g : groups) {
    threads += g.threads;
    requests += g.req.requests;
  }
  return {{"pid", m.pid},
          {"comm", m.comm},
          {"pool_pids", m.pids},
          {"group_count", groups.size()},
          {"thread_count", threads},
          {"request_count", requests},
          {"target_exited", m.target_exited}};
}

// DataQuality::to_text() is one long line; wrap it at its commas to stay under 80 columns.
std::string wrap(const std::string& text, size_t width = 79) {
  std::string out, line;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = text.find(", ", pos);
    std::string piece = text.substr(pos, next == std::string::npos ? std::string::npos : next + 1 - pos);
    pos = next == std::string::npos ? text.size() : next + 2;
    if (!line.empty() && line.size() + 1 + piece.size() > width) {
      out += line + "\n";
      line = "  " + piece;
    } else {
      line += (line.empty() ? "" : " ") + piece;
    }
  }
  return out + line;
}

}  // namespace

void render(std::ostream& os, const Config& c, const ReportMeta& m,
            const std::vector<GroupReport>& groups, const bpfdiag::DataQuality& dq) {
  if (c.json) {
    for (const auto& g : groups)
      bpfdiag::write_record(os, bpfdiag::make_record("threadpool", "group", m.window, group_fields(m, g), dq));
    // always, even when every pool thread is gone: each report carries its totals and
    // data quality
    bpfdiag::write_record(os, bpfdiag::make_record("threadpool", "summary", m.window, summary_fields(m, groups), dq));
    return;
  }
  os << "\n";
  if (c.timestamp) os << bpfdiag::clock_hms() << " ";
  os << (m.summary ? "=== summary" : "--- interval") << " pid " << m.pid << " (" << m.comm << ")";
  if (m.pids.size() > 1) os << ", a pool of " << m.pids.size() << " processes";
  os << (m.target_exited ? ": process exited, report covers until it did" : "") << "\n";
  if (groups.empty()) os << "no pool activity: no thread of the pool ran or existed\n";
  // by default the pools that matter: the first 3 groups (multi-thread groups first,
  // then by CPU time)
  size_t shown = groups.size();
  if (!c.all_groups && !c.pattern && shown > kShownGroups) shown = kShownGroups;
  for (size_t i = 0; i < shown; ++i) text_group(os, c, m, groups[i]);
  if (shown < groups.size()) {
    size_t threads = 0;
    double busy = 0;
    for (size_t i = shown; i < groups.size(); ++i) {
      threads += groups[i].threads;
      busy += groups[i].busy_avg;
    }
    char b[160];
    std::snprintf(b, sizeof b, "(%zu more thread groups, %zu threads, busy %.2f; -a shows all)\n",
                  groups.size() - shown, threads, busy);
    os << b;
  }
  os << wrap(dq.to_text()) << "\n";
  os.flush();
}

}  // namespace threadpool
