// naptime's renderers: a text line or a naptime.sleep record per sleep; per report
// the --summary tables (text) or naptime.process records, then the summary.
#include <time.h>

#include <cstdio>

#include "tools/naptime/naptime.h"

namespace naptime {
using namespace bpfdiag;

namespace {
std::string clock_short(int32_t clock) {
  switch (clock) {
    case NAPTIME_CLOCK_REALTIME: return "REAL";
    case NAPTIME_CLOCK_MONOTONIC: return "MONO";
    case NAPTIME_CLOCK_BOOTTIME: return "BOOT";
    case NAPTIME_CLOCK_TAI: return "TAI";
    case NAPTIME_CLOCK_REALTIME_ALARM: return "REAL_ALARM";
    case NAPTIME_CLOCK_BOOTTIME_ALARM: return "BOOT_ALARM";
    case NAPTIME_CLOCK_PROCESS_CPUTIME_ID:
    case NAPTIME_CLOCK_THREAD_CPUTIME_ID: return "CPU";
    default: return clock < 0 ? "CPU" : "CLK" + std::to_string(clock);
  }
}

std::string seconds(uint64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6f", ns / 1e9);
  return b;
}

}  // namespace

void render_header(std::ostream& os) {
  char line[160];
  std::snprintf(line, sizeof line, "%-8s %-6s %-15s %-6s %-15s %9s %9s %s\n", "TIME", "PPID",
                "PCOMM", "PID", "COMM", "SECONDS", "SLEPT", "NOTE");
  os << line;
}

void render_sleep(std::ostream& os, const Config& c, const Sleep& s, const DataQuality& dq) {
  if (c.json) {
    nlohmann::json f = {{"pid", s.pid},
                        {"tid", s.tid},
                        {"ppid", s.ppid},
                        {"comm", s.comm},
                        {"pcomm", s.pcomm},
                        {"syscall", s.syscall},
                        {"clock", clock_name(s.clock)},
                        {"abstime", s.abstime},
                        {"requested_ns", nullptr},
                        {"sleep_ns", s.slept_ns},
                        {"interrupted", s.interrupted},
                        {"restarted", s.restarted},
                        {"ret", s.ret},
                        {"error", nullptr}};
    if (s.requested_ns) f["requested_ns"] = *s.requested_ns;
    if (s.ret) f["error"] = errno_name(s.ret);
    auto j = make_record("naptime", "sleep", Window{s.time_ns, 0, false}, f, dq);
    // flushed by the caller once per batch of events
    os << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    return;
  }
  std::string note;
  auto add = [&](const std::string& w) { note += (note.empty() ? "" : " ") + w; };
  if (s.abstime) {
    add(clock_short(s.clock));
    add("abs");
  } else if (s.clock != NAPTIME_CLOCK_REALTIME && s.clock != NAPTIME_CLOCK_MONOTONIC) {
    add(clock_short(s.clock));
  }
  if (s.restarted) add("restarted");
  if (s.ret) add(errno_name(s.ret));
  char line[256];
  std::snprintf(line, sizeof line, "%-8s %-6u %-15s %-6u %-15s %9s %9s %s", clock_hms(s.time_ns).c_str(),
                s.ppid, s.pcomm.c_str(), s.pid, s.comm.c_str(),
                s.requested_ns ? seconds(*s.requested_ns).c_str() : "?", seconds(s.slept_ns).c_str(),
                note.c_str());
  std::string l = line;
  while (!l.empty() && l.back() == ' ') l.pop_back();
  os << l << "\n";
}

void render_report(std::ostream& os, const Config& c, const Summary& sum, const DataQuality& dq,
                   const Window& w) {
  if (c.json) {
    for (auto& [pid, p] : sum.procs())
      write_record(os, make_record("naptime", "process", w,
                                   {{"pid", pid},
                                    {"comm", p.comm},
                                    {"sleep_count", p.count},
                                    {"interrupted_count", p.interrupted},
                                    {"restarted_count", p.restarted},
                                    {"requested_total_ns", p.requested_ns},
                                    {"sleep_total_ns", p.slept_ns},
                                    {"sleep_hist", p.slept.to_json()}},
                                   dq));
    write_record(os, make_record("naptime", "summary", w,
                                 {{"sleep_count", sum.count()},
                                  {"interrupted_count", sum.interrupted()},
                                  {"restarted_count", sum.restarted()},
                                  {"requested_total_ns", sum.requested_ns()},
                                  {"sleep_total_ns", sum.slept_ns()},
                                  {"process_count", sum.procs().size()},
                                  {"sleep_hist", sum.all().to_json()}},
                                 dq));
    return;
  }
  if (c.summary) {
    char line[160];
    std::snprintf(line, sizeof line, "%-7s %-15s %8s %6s %13s %13s\n", "PID", "COMM", "SLEEPS",
                  "INTR", "REQUESTED_S", "SLEPT_S");
    os << line;
    for (auto& [pid, p] : sum.procs()) {
      std::snprintf(line, sizeof line, "%-7u %-15s %8llu %6llu %13s %13s\n", pid, p.comm.c_str(),
                    static_cast<unsigned long long>(p.count),
                    static_cast<unsigned long long>(p.interrupted), seconds(p.requested_ns).c_str(),
                    seconds(p.slept_ns).c_str());
      os << line;
    }
    if (!sum.all().empty()) {
      os << "\n";
      print_log2_hist(os, sum.all_us().log2_slots(), "usecs");
    }
    os << "\n";
  }
  os << dq.to_text() << "\n";
  os.flush();
}

}  // namespace naptime
