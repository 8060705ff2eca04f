// One output layer for the suite (the model is bpftrace's Output/TextOutput/JsonOutput
// split): every NDJSON record of every tool is built here, in one envelope:
//
//   {"type": "<tool>.<kind>", "schema": 1, "time_ns": ..., "interval_ns": ...,
//    "final": true|false, ...the record's own fields..., "data_quality": {...}}
//
// - type: "<tool>.<kind>", e.g. "lockstat.lock", "lockstat.summary", "naptime.sleep";
//   every tool's first record is "<tool>.start" (the probes are attached) and its last
//   "<tool>.summary" with final=true.
// - time_ns: CLOCK_REALTIME (ns since the epoch) when the record's window ended (for
//   an event record: when the event ended); interval_ns: the window's length (0 for an
//   event or the start record); final: part of the final report.
// - data_quality: the fixed key set of DataQuality::to_json (common keys, then the
//   tool's own keys, all always present, zero when nothing happened).
// Field names follow one vocabulary: comm, pid, tid, cpu; durations `<metric>_<stat>_ns`
// (wait_total_ns, hold_p99_ns, sleep_max_ns, offcpu_total_ns); counts `<metric>_count`;
// stacks as {"user_stack": [frames...], "kernel_stack": [...], "user_stack_missing":
// bool, "kernel_stack_missing": bool} (frames innermost first, as the kernel reports).
// The JSON Schema of every tool is docs/schema/<tool>.schema.json.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/report.h"
#include "common/stacks.h"

namespace bpfdiag {

// Bumped on any incompatible change of any tool's records (README lists the changes).
constexpr int kSchemaVersion = 1;

// The window a record covers.
struct Window {
  uint64_t time_ns = 0;      // CLOCK_REALTIME at the end of the window
  uint64_t interval_ns = 0;  // its length; 0 for an event
  bool final = false;
};
// A window of `interval_ns` ending now.
Window window_ending_now(uint64_t interval_ns, bool final);

// The envelope with `fields` merged in (fields may not use the envelope's names).
nlohmann::json make_record(const std::string& tool, const std::string& kind, const Window& w,
                           const nlohmann::json& fields, const DataQuality& dq);
// The same with `fields` moved in and the data quality already in JSON (a report's
// many records share one).
nlohmann::json make_record_json(const std::string& tool, const std::string& kind, const Window& w,
                                nlohmann::json fields, const nlohmann::json& dq);

// A stack in the suite's JSON form (see above); parts not wanted (-U/-K) are omitted.
nlohmann::json stack_json(const Stack& st);
// The inverse: a record's user_stack/kernel_stack fields back into a Stack (parts
// absent from the record are not wanted); for folded lines from NDJSON (runbook).
Stack stack_from_json(const nlohmann::json& record);

// Writes a record made by make_record_json(..., nullptr) with its data_quality spliced
// in from `dq_text` (the object dumped once): a report's 10,000 stack records share
// one data quality, 60% of each line; dumping it every time was half the final
// report's render time. No flush: the report's last record flushes.
void write_record_shared_dq(std::ostream& os, const nlohmann::json& record, const std::string& dq_text);

// Writes one NDJSON record and flushes it (a consumer sees each record at once).
void write_record(std::ostream& os, const nlohmann::json& record);

// The usual "<tool>.start" fields: "pid" / "tid" lists (only when filtering), "probes"
// (how many were attached) and "options" (the tool's effective options).
nlohmann::json start_record_fields(const std::vector<uint32_t>& pids, const std::vector<uint32_t>& tids,
                                   uint64_t probes, const nlohmann::json& options);

// Says the probes are attached, once, right after the last attach:
//  - text mode: `banner` on stderr (e.g. "Tracing off-CPU time... Hit Ctrl-C to end.");
//  - JSON mode: the banner on stderr too, and a "<tool>.start" record on stdout with
//    `fields` (e.g. {"pid": [...], "probes": 4, "options": {...}}) and zero data quality.
// Scripts wait for the start record (or the banner) instead of sleeping.
void announce_attached(std::ostream& out, const std::string& tool, bool json, const std::string& banner,
                       const nlohmann::json& fields, const DataQuality& zero_dq);

// Writes all of `text` to `fd` (short writes continued, EINTR retried); false on an
// error (errno says which).
bool write_all(int fd, const std::string& text);

}  // namespace bpfdiag
