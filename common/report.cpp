#include "common/report.h"

#include <ctime>

namespace bpfdiag {

DataQuality DataQuality::with_keys(const std::vector<std::string>& tool_keys) {
  DataQuality dq;
  for (auto& k : tool_keys)
    if (!is_common_key(k)) dq.extra[k] = 0;
  return dq;
}

bool DataQuality::is_common_key(const std::string& key) {
  return key == "lost_events" || key == "lost_stacks" || key == "unmatched_begin" ||
         key == "unmatched_end" || key == "map_full";
}

void DataQuality::add(const std::string& key, uint64_t n) {
  if (key == "lost_events")
    lost_events += n;
  else if (key == "lost_stacks")
    lost_stacks += n;
  else if (key == "unmatched_begin")
    unmatched_begin += n;
  else if (key == "unmatched_end")
    unmatched_end += n;
  else if (key == "map_full")
    map_full += n;
  else
    extra[key] += n;
}

bool DataQuality::clean() const {
  if (lost_events || lost_stacks || unmatched_begin || unmatched_end || map_full) return false;
  for (auto& [k, v] : extra)
    if (v) return false;
  return true;
}

nlohmann::json DataQuality::to_json() const {
  nlohmann::json j = {{"lost_events", lost_events},         {"lost_stacks", lost_stacks},
                      {"unmatched_begin", unmatched_begin}, {"unmatched_end", unmatched_end},
                      {"map_full", map_full}};
  for (auto& [k, v] : extra) j[k] = v;
  return j;
}

std::string DataQuality::to_text() const {
  std::string s = "data quality: lost events " + std::to_string(lost_events) + ", lost stacks " +
                  std::to_string(lost_stacks) + ", unmatched begin " + std::to_string(unmatched_begin) +
                  ", unmatched end " + std::to_string(unmatched_end) + ", map full " +
                  std::to_string(map_full);
  for (auto& [k, v] : extra) {
    std::string name = k;
    for (auto& c : name)
      if (c == '_') c = ' ';
    s += ", " + name + " " + std::to_string(v);
  }
  return s;
}

void emit_json(std::ostream& os, const nlohmann::json& record) {
  // Names from the traced processes (comm, symbols) need not be UTF-8: replaced, not thrown.
  os << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  os.flush();
}

std::string clock_hms(uint64_t realtime_ns) {
  std::time_t t = static_cast<std::time_t>(realtime_ns / 1000000000ULL);
  std::tm tm;
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

std::string clock_hms() { return clock_hms(static_cast<uint64_t>(std::time(nullptr)) * 1000000000ULL); }

}  // namespace bpfdiag
