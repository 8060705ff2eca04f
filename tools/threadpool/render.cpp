// threadpool output: one compact text block per group and interval, or NDJSON.
#include <cstdio>

#include "common/table.h"
#include "tools/threadpool/threadpool.h"

namespace threadpool {
using bpfdiag::fmt_ns;  // the suite's compact duration ("812ns", "12.3us", "4.56ms")
using bpfdiag::Histogram;

namespace {

double pct(uint64_t v, uint64_t total) { return total ? 100.0 * v / total : 0.0; }

nlohmann::json pcts(const Histogram& h) {
  return {{"p50", h.percentile(50)}, {"p95", h.percentile(95)}, {"p99", h.percentile(99)},
          {"avg", h.mean()},         {"max", h.max()},          {"count", h.count()}};
}

nlohmann::json reasons(const uint64_t* v) {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < kNumReasons; ++i) j[reason_name(i)] = v[i];
  return j;
}

std::string lat_line(const char* label, const Histogram& h) {
  char b[160];
  std::snprintf(b, sizeof b, "    %-11s avg %-9s p50 %-9s p95 %-9s p99 %s\n", label,
                fmt_ns(h.mean()).c_str(), fmt_ns(h.percentile(50)).c_str(),
                fmt_ns(h.percentile(95)).c_str(), fmt_ns(h.percentile(99)).c_str());
  return b;
}

void text_group(std::ostream& os, const Config& c, const ReportMeta& m, const GroupReport& g) {
  char b[256];
  const uint64_t t = g.accounted_ns;
  const double secs = m.interval_ns / 1e9;
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
  std::snprintf(b, sizeof b, "        poll %.1f%% sleep %.1f%% other %.1f%%\n",
                pct(g.blocked_ns[kPoll], t), pct(g.blocked_ns[kSleep], t),
                pct(g.blocked_ns[kOther], t));
  os << b;
  std::snprintf(b, sizeof b, "  dispatch latency: avg %s p50 %s p95 %s p99 %s (%llu waits)\n",
                fmt_ns(g.dispatch.mean()).c_str(), fmt_ns(g.dispatch.percentile(50)).c_str(),
                fmt_ns(g.dispatch.percentile(95)).c_str(), fmt_ns(g.dispatch.percentile(99)).c_str(),
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
  if (c.per_thread) {
    os << "     TID COMM            ONCPU%  RUNQ%  IDLE%  LOCK%    IO%  POLL% SLEEP%  OTH%\n";
    for (const auto& r : g.rows) {
      uint64_t rt = r.on_ns + r.rq_ns + r.idle_ns;
      for (auto v : r.blocked_ns) rt += v;
      std::snprintf(b, sizeof b, "%8u %-15.15s %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %6.1f %5.1f\n",
                    r.tid, r.name.c_str(), pct(r.on_ns, rt), pct(r.rq_ns, rt), pct(r.idle_ns, rt),
                    pct(r.blocked_ns[kLock], rt), pct(r.blocked_ns[kIo], rt),
                    pct(r.blocked_ns[kPoll], rt), pct(r.blocked_ns[kSleep], rt),
                    pct(r.blocked_ns[kOther], rt));
      os << b;
    }
  }
}

nlohmann::json json_group(const ReportMeta& m, const GroupReport& g,
                          const bpfdiag::DataQuality& dq) {
  nlohmann::json threads = nlohmann::json::array();
  for (const auto& r : g.rows)
    threads.push_back({{"tid", r.tid},
                       {"name", r.name},
                       {"on_cpu_ns", r.on_ns},
                       {"runnable_ns", r.rq_ns},
                       {"idle_ns", r.idle_ns},
                       {"blocked_ns", reasons(r.blocked_ns)}});
  nlohmann::json futexes = nlohmann::json::array();
  for (const auto& k : g.work.futexes) futexes.push_back(describe_wait(k));
  nlohmann::json j = {
      {"type", m.summary ? "threadpool_summary" : "threadpool_interval"},
      {"time_ns", bpfdiag::realtime_ns()},
      {"interval_ns", m.interval_ns},
      {"final", m.final},
      {"pid", m.pid},
      {"comm", m.comm},
      {"group", g.name},
      {"threads", g.threads},
      {"utilization", g.utilization},
      {"busy_avg", g.busy_avg},
      {"busy_max", g.busy_max},
      {"on_cpu_ns", g.on_ns},
      {"runnable_total_ns", g.rq_ns},
      {"idle_ns", g.idle_ns},
      {"accounted_ns", g.accounted_ns},
      {"blocked_ns", reasons(g.blocked_ns)},
      {"runnable_ns", pcts(g.dispatch)},
      {"runnable_hist", g.dispatch.to_json()},
      {"requests", g.req.requests},
      {"queue_wait_ns", pcts(g.req.queue_wait)},
      {"service_ns", pcts(g.req.service)},
      {"response_ns", pcts(g.req.response)},
      {"queue_depth_avg", g.req.depth.avg},
      {"queue_depth_max", g.req.depth.max},
      {"queue_tracked", g.req.have_depth},
      {"work_waits",
       {{"description", g.work.description}, {"futexes", futexes}, {"guessed", g.work.guessed}}},
      {"verdict", g.verdict},
      {"verdict_reason", g.why},
      {"per_thread", threads},
      {"target_exited", m.target_exited},
      {"data_quality", dq.to_json()}};
  return j;
}

// The record of an interval in which no thread of the pool was seen.
nlohmann::json json_empty(const ReportMeta& m, const bpfdiag::DataQuality& dq) {
  return {{"type", m.summary ? "threadpool_summary" : "threadpool_interval"},
          {"time_ns", bpfdiag::realtime_ns()},
          {"interval_ns", m.interval_ns},
          {"final", m.final},
          {"pid", m.pid},
          {"comm", m.comm},
          {"groups", nlohmann::json::array()},
          {"target_exited", m.target_exited},
          {"data_quality", dq.to_json()}};
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
    for (const auto& g : groups) bpfdiag::emit_json(os, json_group(m, g, dq));
    // every pool thread gone (or none seen): still one record, so each interval and
    // the summary carry their data quality
    if (groups.empty()) bpfdiag::emit_json(os, json_empty(m, dq));
    return;
  }
  os << "\n";
  if (c.timestamp) os << bpfdiag::clock_hms() << " ";
  os << (m.summary ? "=== summary" : "--- interval") << " pid " << m.pid << " (" << m.comm << ")"
     << (m.target_exited ? ": process exited, report covers until it did" : "") << "\n";
  if (groups.empty()) os << "no pool activity: no thread of the pool ran or existed\n";
  for (const auto& g : groups) text_group(os, c, m, g);
  os << wrap(dq.to_text()) << "\n";
  os.flush();
}

}  // namespace threadpool
