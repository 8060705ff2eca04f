// profile's model: entries merged as they render, per-thread totals, folded lines,
// the warnings at the end of a run, the start record's fields and the banner.
#include <algorithm>
#include <map>

#include "tools/profile/profile.h"

#include "common/unwind_maps.h"

namespace profile {
using namespace bpfdiag;

const std::vector<std::string>& dq_keys() {
  // lost_samples: samples taken but not counted (counts map full, also in map_full);
  // user/kernel_stack_missing: samples whose wanted stack part was not stored (also
  // in lost_stacks); stack_storage_full: of those, refused for lack of room in the
  // stack table (--stack-storage-size); idle_samples: idle-task samples left out
  // (without -I); seen_full: a new process not announced to be read while it runs
  // (bpf_sources/announce.h: its frames may stay unnamed); overflow_stacks: stacks kept in the collision overflow map (not lost,
  // bpf_sources/stacks.h); unknown_frames: frames no symbol names; processes_gone_before_seen:
  // exited before their mappings could be read; symbolize_skipped: user frames left
  // unnamed because the report was due (Ctrl-C) before their symbols were loaded;
  // debuginfod_files / debuginfod_failed: DEBUGINFOD_URLS lookups that named a file's
  // frames / that named nothing (common/debuginfod.h).
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = {"lost_samples",         "user_stack_missing", "kernel_stack_missing",
                                  "stack_storage_full",   "idle_samples",       "seen_full",          "overflow_stacks",    "unknown_frames",
                                  "processes_gone_before_seen", "symbolize_skipped",
                                  "debuginfod_files", "debuginfod_failed"};
    for (auto& u : unwind_dq_keys()) k.push_back(u);  // --unwind=dwarf (zero with fp)
    return k;
  }();
  return keys;
}

void merge_identical(std::vector<Entry>& entries) {
  merge_identical_stacks(entries, [](Entry& m, const Entry& e) { m.samples += e.samples; });
}

std::vector<ThreadTotal> thread_totals(const std::vector<Entry>& entries) {
  std::map<std::pair<uint32_t, uint32_t>, ThreadTotal> by_thread;
  for (auto& e : entries) {
    auto& t = by_thread[{e.pid, e.tid}];
    if (t.comm.empty()) t = ThreadTotal{e.pid, e.tid, e.comm, 0};
    t.samples += e.samples;
  }
  std::vector<ThreadTotal> out;
  for (auto& [k, t] : by_thread) out.push_back(t);
  return out;
}

void add_folded(FoldedSet& set, const Config& c, const std::vector<Entry>& entries) {
  add_folded_entries(set, entries, c.per_thread, [](const Entry& e) { return e.samples; });
}

FoldedSet folded(const Config& c, const std::vector<Entry>& entries) {
  FoldedSet set;
  add_folded(set, c, entries);
  return set;
}

std::vector<std::string> warnings(const Config& c, const DataQuality& dq) {
  std::vector<std::string> w;
  auto get = [&](const char* k) {
    auto it = dq.extra.find(k);
    return it == dq.extra.end() ? uint64_t{0} : it->second;
  };
  if (uint64_t full = get("stack_storage_full"))
    w.push_back("warning: " + std::to_string(full) +
                " stack traces could not be stored (hash collision or full table); try "
                "--stack-storage-size " + std::to_string(std::min<uint64_t>(c.stack_storage_size * 4, 1048576)));
  else if (dq.lost_stacks)
    w.push_back("warning: " + std::to_string(dq.lost_stacks) + " stacks could not be read (shown as [Missed ...])");
  if (uint64_t lost = get("lost_samples"))
    w.push_back("warning: " + std::to_string(lost) + " samples were dropped because the counts map was full; " +
                "try --map-entries " + std::to_string(std::min<uint64_t>(c.map_entries * 4, 1048576)));
  return w;
}

nlohmann::json start_fields(const Config& c, uint64_t cpus) {
  auto opt_ns = [](const std::optional<uint64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json f = start_record_fields(c.pids, c.tids, cpus,
                             {{"frequency_hz", c.freq_hz},
                              {"include_idle", c.include_idle},
                              {"user_stacks_only", c.user_stacks_only},
                              {"kernel_stacks_only", c.kernel_stacks_only},
                              {"stack_storage_size", c.stack_storage_size},
                              {"map_entries", c.map_entries},
                              {"unwind", c.unwind_dwarf ? "dwarf" : "fp"},
                              {"interval_ns", opt_ns(c.schedule.interval_ns)},
                              {"duration_ns", opt_ns(c.schedule.duration_ns)}});
  if (c.cgroup) f["cgroup"] = cgroup_json(c.cgroup);
  return f;
}

std::string traced_text(const Config& c) {
  std::string who = stack_targets_text(c);
  if (c.include_idle && c.pids.empty() && c.tids.empty()) who += " (idle included)";
  return std::to_string(c.freq_hz) + " Hertz of " + who + " by " + stack_parts_text(c) + " stack" +
         (c.unwind_dwarf ? " (user stacks: DWARF unwinding)" : "");
}

std::string banner(const Config& c) { return "Sampling at " + traced_text(c) + banner_until(c.schedule); }

}  // namespace profile
