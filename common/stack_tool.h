// What the stack tools (offcputime, profile) share: the Config members every one has,
// their parsing from the options table, and the text and folded views built from
// entries with pid, tid, comm and a Stack.
//
//   struct Config : bpfdiag::StackToolConfig { uint64_t freq_hz = 49; ... };
//   auto cli = parse_stack_tool_cli(tool_spec(), argc, argv, c);  // Result<ParsedCli>
//   if (!cli) return Error{cli.error()};
//   if (c.help) return c;
//   c.include_idle = cli->raw.count("include-idle");
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/cgroup.h"
#include "common/options.h"
#include "common/output.h"
#include "common/result.h"
#include "common/runloop.h"
#include "common/stacks.h"

namespace bpfdiag {

struct StackToolConfig {
  bool help = false;
  std::vector<uint32_t> pids;       // -p: processes (tgids)
  std::vector<uint32_t> tids;       // -t: threads
  std::optional<CgroupTarget> cgroup;  // --cgroup / --container (resolved)
  bool user_stacks_only = false;    // -U
  bool kernel_stacks_only = false;  // -K
  bool delimiter = false;           // "delimited": "--" between kernel and user frames
  bool folded = false;              // -f
  bool per_thread = false;          // -P: "comm-PID/TID" in folded output
  std::string svg;                  // --svg FILE: flame graph of the whole run
  std::string pprof;                // --pprof FILE: pprof profile of the whole run
  std::string prometheus;           // --prometheus FILE: metrics at every report (common/metrics.h)
  std::string listen;               // --listen ADDR:PORT: the same over HTTP
  bool json = false;
  bool ebpf = false;
  Schedule schedule;  // -d/--duration / [duration], -i, -c

  // The stack parts a report resolves (-U: user only, -K: kernel only).
  StackParts parts() const { return {!kernel_stacks_only, !user_stacks_only}; }
};

// parse_tool_cli, then the shared options into `c` (with "delimited" from the raw
// result: its short flag differs per tool). The result's raw part holds the tool's own
// options; its common part what a tool reads under its own rules (e.g. -m/-M).
Result<ParsedCli> parse_stack_tool_cli(const ToolSpec& spec, int argc, char** argv, StackToolConfig& c);

// The banner's target: "all threads", "TID 1,2" (-t wins) or "PID 3", then the cgroup
// (" in cgroup PATH (id N)").
std::string stack_targets_text(const StackToolConfig& c);
// The banner's stack kind: "user", "kernel" or "user + kernel".
std::string stack_parts_text(const StackToolConfig& c);

// -j: a "<tool>.stack" record per entry, largest key(entry) first, with fields(entry)
// and the entry's stack (stack_json), then the "<tool>.summary" record.
template <class E, class KeyFn, class FieldsFn>
void write_stack_records(std::ostream& os, const std::string& tool, const std::vector<E>& entries, KeyFn key,
                         FieldsFn fields, const nlohmann::json& summary, const Window& w, const DataQuality& dq) {
  const nlohmann::json dq_json = dq.to_json();
  const std::string dq_text = dq_json.dump();
  for (auto* e : sorted_by(entries, key, true)) {
    nlohmann::json j = fields(*e);
    nlohmann::json st = stack_json(e->stack);
    for (auto it = st.begin(); it != st.end(); ++it) j[it.key()] = std::move(it.value());
    write_record_shared_dq(os, make_record_json(tool, "stack", w, std::move(j), nullptr), dq_text);
  }
  write_record(os, make_record_json(tool, "summary", w, summary, dq_json));  // flushes the report
}

// A stack tool's "<tool>.summary" fields: the tool's own `totals` plus stack_count,
// thread_count and `threads` (an array, one object per thread).
nlohmann::json stack_summary_fields(nlohmann::json totals, size_t stacks, const nlohmann::json& threads);

// A report's symbolization counts, from the Symbolizer's stats before and after its
// stacks were resolved: "unknown_frames" (frames no symbol names),
// "processes_gone_before_seen" (exited before their mappings could be read),
// "symbolize_skipped", and "debuginfod_files" / "debuginfod_failed" (DEBUGINFOD_URLS:
// files named from a debuginfod server / lookups that named nothing).
void add_symbolizer_dq(DataQuality& dq, const Symbolizer::Stats& before, const Symbolizer::Stats& after);

// -f output: the folded lines on `os` (flushed), the data-quality line on `err`, so
// stdout stays flamegraph input.
void write_folded_report(std::ostream& os, std::ostream& err, const std::vector<std::string>& lines,
                         const DataQuality& dq);

// Adds the folded stacks of `entries` (thread names per -P) to `set`, each weighing
// value(entry).
template <class E, class ValueFn>
void add_folded_entries(FoldedSet& set, const std::vector<E>& entries, bool per_thread, ValueFn value) {
  for (auto& e : entries) set.add(folded_name(e.comm, e.pid, e.tid, per_thread), e.stack, value(e));
}

}  // namespace bpfdiag
