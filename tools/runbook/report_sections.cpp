// The report's method/scope, data quality and rerun sections.
#include <sys/utsname.h>

#include <set>

#include "tools/runbook/runbook.h"

namespace runbook {
using json = nlohmann::json;

namespace {

std::string shell_quote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=,:+") ==
                        std::string::npos)
    return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The data_quality of a tool's last summary (or last record that has one).
const json* last_dq(const ToolRun& t) {
  const json* dq = nullptr;
  for (auto& r : t.records)
    if (r.contains("data_quality") && r["data_quality"].is_object()) dq = &r["data_quality"];
  return dq;
}

}  // namespace

std::string command_line(const std::vector<std::string>& argv) {
  std::string s;
  for (auto& a : argv) s += (s.empty() ? "" : " ") + shell_quote(a);
  return s;
}

std::string status_text(const ToolRun& t) {
  if (!t.error.empty()) return "not run";
  if (t.killed) return "killed (did not stop)";
  if (t.exit_signal) return "signal " + std::to_string(t.exit_signal);
  return "exit " + std::to_string(t.exit_code);
}

void add_method_and_quality(const Run& run, Report& rep) {
  Section* method = nullptr;
  Section* quality = nullptr;
  Section* rerun = nullptr;
  for (auto& s : rep.sections) {
    if (s.title == "Method and scope") method = &s;
    if (s.title == "Data quality") quality = &s;
    if (s.title == "How to rerun") rerun = &s;
  }
  utsname u{};
  uname(&u);
  method->lines.push_back(run.book.summary.empty() ? run.book.title : run.book.summary);
  method->lines.push_back("target: " + (run.cfg.pid_arg.empty() ? std::string(run.cfg.cgroup ? "every process" : "the whole machine")
                                      : "PID " + run.cfg.pid_arg + (run.cfg.children ? " and its child processes" : "")) +
                          cgroup_banner(run.cfg.cgroup));
  method->lines.push_back("window: " + iso_time(run.window_start_ns) + " to " + iso_time(run.window_end_ns) + " (" +
                          fmt_ms(run.window_end_ns - run.window_start_ns) + ")" +
                          (run.interrupted ? ", ended early by Ctrl-C" : "") +
                          (run.attach_timeout ? ", started before every tool attached (timeout)" : ""));
  method->lines.push_back("tools, started together, each with -j (NDJSON): " + [&] {
    std::string s;
    for (auto& t : run.tools) s += (s.empty() ? "" : ", ") + t.name;
    return s;
  }());
  for (auto& t : run.tools)
    if (t.whole_machine) method->lines.push_back(t.name + " has no -p: it measured the whole machine");
  method->lines.push_back(std::string("host ") + u.nodename + ", kernel " + u.release + " (" + u.machine + ")");

  quality->table_head = {"tool", "status", "records", "lost events", "lost stacks", "unmatched begin/end", "map full",
                         "other"};
  for (auto& t : run.tools) {
    std::vector<std::string> row{t.name, status_text(t), std::to_string(t.records.size())};
    const json* dq = last_dq(t);
    auto v = [&](const char* k) { return dq && dq->contains(k) ? (*dq)[k].dump() : std::string("-"); };
    row.push_back(v("lost_events"));
    row.push_back(v("lost_stacks"));
    row.push_back(v("unmatched_begin") + " / " + v("unmatched_end"));
    row.push_back(v("map_full"));
    std::string other;
    static const std::set<std::string> common{"lost_events", "lost_stacks", "unmatched_begin", "unmatched_end",
                                              "map_full"};
    if (dq)
      for (auto it = dq->begin(); it != dq->end(); ++it)
        if (!common.count(it.key()) && !(it.value().is_number() && it.value().get<double>() == 0))
          other += (other.empty() ? "" : ", ") + it.key() + " " + it.value().dump();
    if (t.bad_lines) other += (other.empty() ? "" : ", ") + std::to_string(t.bad_lines) + " non-JSON lines";
    row.push_back(other.empty() ? "0" : other);
    quality->table.push_back(row);
    if (t.failed()) quality->lines.push_back(t.name + " " + status_text(t) + ": " + t.stderr_last_line());
    std::string lost = losses_text(t);
    if (!lost.empty())
      quality->lines.push_back(t.name + " lost data (" + lost + "): its findings above are marked [weakened]");
  }
  if (quality->lines.empty())
    quality->lines.push_back("every tool ran to its final report; no lost events, stacks or unmatched pairs");

  rerun->lines.push_back("the same runbook, options and window (run.json has all of it):");
  rerun->pre = command_line(run.command) + "\n\n# or each tool by hand (start together, stop with Ctrl-C):\n";
  for (auto& t : run.tools) rerun->pre += command_line(t.argv) + "\n";
}

}  // namespace runbook
