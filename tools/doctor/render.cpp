// doctor output: one line per check (status, check, what was found, the fix; then the
// commands to run for a target, one "      run: CMD" line each), a summary line; or
// NDJSON records through the suite's envelope.
#include <cstdio>

#include "common/runloop.h"
#include "tools/doctor/doctor.h"

namespace doctor {
using namespace bpfdiag;

namespace {

constexpr const char* kTool = "doctor";

std::vector<std::string> failed_required(const std::vector<Check>& checks) {
  std::vector<std::string> names;
  for (const auto& k : checks)
    if (k.required && k.status == Verdict::Fail) names.push_back(k.name);
  return names;
}

}  // namespace

DataQuality empty_quality() { return DataQuality::with_keys({}); }

nlohmann::json check_json(const Check& k) {
  nlohmann::json j = {{"category", k.category}, {"name", k.name},     {"status", status_name(k.status)},
                      {"required", k.required}, {"detail", k.detail}, {"fix", k.fix}};
  if (k.pid) j["pid"] = k.pid;
  if (!k.commands.empty()) j["commands"] = k.commands;
  return j;
}

void render_start(std::ostream& os, const Config& c) {
  if (!c.json) return;
  nlohmann::json options = {{"live", c.live}};
  announce_attached(os, kTool, true, "", start_record_fields(c.pids, {}, 0, options), empty_quality());
}

void render(std::ostream& os, const Config& c, const std::vector<Check>& checks, const DataQuality& dq,
            uint64_t elapsed_ns) {
  const auto counts = status_counts(checks);
  const auto failed = failed_required(checks);
  if (c.json) {
    const Window event{realtime_ns(), 0, false};
    for (const auto& k : checks) write_record(os, make_record(kTool, "check", event, check_json(k), dq));
    nlohmann::json s = {{"verdict", failed.empty() ? "ready" : "not_ready"},
                        {"ok_count", counts.at("ok")},
                        {"warn_count", counts.at("warn")},
                        {"fail_count", counts.at("fail")},
                        {"skip_count", counts.at("skip")},
                        {"required_failed", failed},
                        {"elapsed_ns", elapsed_ns}};
    write_record(os, make_record(kTool, "summary", window_ending_now(elapsed_ns, true), s, dq));
    return;
  }
  char line[160];
  for (const auto& k : checks) {
    std::string name = k.category == "tools" ? "tool " + k.name : k.name;
    std::snprintf(line, sizeof line, "%-4s  %-23s  ", status_name(k.status), name.c_str());
    os << line << k.detail;
    if (!k.fix.empty()) os << "; fix: " << k.fix;
    os << "\n";
    for (const auto& cmd : k.commands) os << "      run: " << cmd << "\n";
  }
  std::snprintf(line, sizeof line, "%llu ok, %llu warn, %llu fail, %llu skip in %.2f s: ",
                static_cast<unsigned long long>(counts.at("ok")), static_cast<unsigned long long>(counts.at("warn")),
                static_cast<unsigned long long>(counts.at("fail")), static_cast<unsigned long long>(counts.at("skip")),
                elapsed_ns / 1e9);
  os << line;
  if (failed.empty()) {
    os << "this machine can be traced";
  } else {
    os << "cannot be traced until fixed:";
    for (const auto& n : failed) os << " " << n;
  }
  os << "\n" << dq.to_text() << "\n";
  os.flush();
}

void render_tool_list(std::ostream& os, const Config& c, const std::vector<const ToolEntry*>& tools) {
  if (c.json) {
    const Window event{realtime_ns(), 0, true};
    for (const ToolEntry* t : tools)
      write_record(os, make_record(kTool, "tool", event, tool_json(*t), empty_quality()));
    return;
  }
  for (const ToolEntry* t : tools)
    for (const auto& m : t->modes) os << m.mode << ": " << m.gives << "\n    needs " << needs_text(m) << "\n";
  os.flush();
}

}  // namespace doctor
