// Output helpers: data-quality accounting shown in every report, NDJSON records,
// and timestamps.
#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bpfdiag {

// Everything that can make a report incomplete. Shown in every report, text and JSON.
struct DataQuality {
  uint64_t lost_events = 0;      // perf/ring buffer overruns
  uint64_t lost_stacks = 0;      // stack ids that failed (-EFAULT, -EEXIST, map full)
  uint64_t unmatched_begin = 0;  // begins with no end seen (e.g. still in progress)
  uint64_t unmatched_end = 0;    // ends whose begin predates tracing or was lost
  uint64_t map_full = 0;         // updates dropped because a map was full
  std::map<std::string, uint64_t> extra;  // tool-specific counters

  // A report's fixed key set: the common keys plus these tool-specific ones, all
  // present (zero) in every record even when nothing happened.
  static DataQuality with_keys(const std::vector<std::string>& tool_keys);
  static bool is_common_key(const std::string& key);
  // Adds to a common counter or a tool-specific one by name.
  void add(const std::string& key, uint64_t n);

  bool clean() const;
  nlohmann::json to_json() const;
  // "data quality: lost events 0, lost stacks 0, ..." (one line, no newline)
  std::string to_text() const;
};

// Writes one NDJSON record (compact, newline-terminated) and flushes.
void emit_json(std::ostream& os, const nlohmann::json& record);

// "HH:MM:SS" local time, as BCC's -T: now, or of a CLOCK_REALTIME time in ns.
std::string clock_hms();
std::string clock_hms(uint64_t realtime_ns);

}  // namespace bpfdiag
