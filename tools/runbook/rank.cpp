// Findings ranked by impact. Each tool's reader (findings.cpp) says how much thread
// time a finding explains; this file orders them across tools, says a wait once when
// two tools saw it, puts each tool's losses next to its findings and gives each the
// share of the target's thread time it explains.
#include <algorithm>
#include <cstdio>
#include <set>

#include "tools/runbook/runbook.h"

namespace runbook {
using json = nlohmann::json;

namespace {

// One event of at least this share of a finding's time makes it a one-off (a single
// 404 ms hold beside a lock 16 threads queue on): ranked after every sustained one.
// Chosen, not measured.
constexpr double kOneOffShare = 0.9;

uint64_t u64(const json& r, const char* k) { return r.contains(k) && r[k].is_number() ? r[k].get<uint64_t>() : 0; }

// A frame's function: "update_stats(int)+0x1c" -> "update_stats(int)".
std::string function_of(const std::string& frame) {
  size_t p = frame.rfind("+0x");
  return p == std::string::npos ? frame : frame.substr(0, p);
}

bool shares_frame(const Finding& a, const Finding& b) {
  for (auto& x : a.frames)
    for (auto& y : b.frames)
      if (!x.empty() && function_of(x) == function_of(y) && x != "[unknown]") return true;
  return false;
}

// offcputime's lock waits that lockstat measured too: the lock finding says it (with
// the lock's name), the stack stays in the Off-CPU section.
void merge_same_waits(Report& rep) {
  std::vector<const Finding*> locks;
  for (auto& f : rep.findings)
    if (f.tool == "lockstat" && f.problem && !f.context) locks.push_back(&f);
  std::vector<Finding> kept;
  for (auto& f : rep.findings) {
    bool same = false;
    if (f.tool == "offcputime" && f.problem && !f.lock.empty())
      for (auto* l : locks) same = same || shares_frame(f, *l);
    if (!same) kept.push_back(f);
  }
  rep.findings = std::move(kept);
}

// pmheld's holds matter through the threads that wait for them: with lockstat in the
// run, a held lock nobody waited for is context, and one that was waited for ranks
// right after lockstat's finding for it.
void place_holds(const Run& run, Report& rep) {
  bool have_lockstat = false;
  for (auto& t : run.tools) have_lockstat = have_lockstat || (t.name == "lockstat" && !t.failed());
  if (!have_lockstat) return;
  for (auto& f : rep.findings) {
    if (f.tool != "pmheld" || f.failure) continue;
    const Finding* waited = nullptr;
    for (auto& l : rep.findings)
      if (l.tool == "lockstat" && l.problem && l.lock == f.lock) waited = &l;
    if (waited) {
      f.follows = true;
      f.impact_ns = waited->impact_ns ? waited->impact_ns - 1 : 0;
      f.max_event_ns = std::min(f.max_event_ns, waited->max_event_ns);
    } else {
      f.problem = false;
      f.context = true;
      f.text += " (lockstat saw no thread wait for it)";
    }
  }
}

}  // namespace

std::string losses_text(const ToolRun& t) {
  const json* dq = nullptr;
  for (auto& r : t.records)
    if (r.contains("data_quality") && r["data_quality"].is_object()) dq = &r["data_quality"];
  if (!dq) return "";
  std::string s;
  for (const char* k : {"lost_events", "lost_samples", "lost_stacks", "unmatched_begin", "unmatched_end", "map_full",
                        "dropped_periods", "threads_untracked"})
    if (uint64_t v = u64(*dq, k)) s += (s.empty() ? "" : ", ") + std::string(k) + " " + std::to_string(v);
  return s;
}

ThreadTime thread_time(const Run& run) {
  ThreadTime pool;
  uint64_t off = 0, on = 0;
  bool have_off = false, have_on = false;
  for (auto& t : run.tools) {
    if (t.name == "threadpool")
      for (auto* g : t.final_records("group")) pool.ns += u64(*g, "accounted_total_ns");
    if (t.name == "offcputime")
      for (auto* s : t.final_records("summary")) off = u64(*s, "offcpu_total_ns"), have_off = true;
    if (t.name == "profile")
      for (auto* s : t.final_records("summary"))
        if (uint64_t hz = u64(*s, "frequency_hz")) on = u64(*s, "sample_count") * 1'000'000'000ULL / hz, have_on = true;
  }
  if (pool.ns) return {pool.ns, "the target's threads' time, as threadpool accounted it", "thread time"};
  if (have_off && have_on)
    return {off + on, "the target's threads' time: off-CPU (offcputime) plus on-CPU (profile)", "thread time"};
  if (have_off) return {off, "the target's off-CPU time (offcputime; on-CPU time not measured)", "off-CPU time"};
  return {};
}

void rank_findings(const Run& run, Report& rep) {
  merge_same_waits(rep);
  place_holds(run, rep);
  ThreadTime tt = thread_time(run);
  for (auto& f : rep.findings) {
    f.one_off = f.problem && f.impact_ns && f.max_event_ns >= kOneOffShare * static_cast<double>(f.impact_ns);
    if (f.one_off) f.text += " (one-off: a single event of " + fmt_ms(f.max_event_ns) + ")";
    if (f.impact_ns && tt.ns && (f.problem || f.context) && !f.follows) {
      char b[64];
      std::snprintf(b, sizeof b, "%.1f%%", 100.0 * static_cast<double>(f.impact_ns) / static_cast<double>(tt.ns));
      f.number += "; " + std::string(b) + " of " + tt.unit;
    }
  }
  for (auto& t : run.tools) {
    std::string lost = losses_text(t);
    if (lost.empty()) continue;
    for (auto& f : rep.findings)
      if (f.tool == t.name && !f.failure && (f.problem || f.context)) {
        f.weakened = lost;
        f.text += " [weakened: " + t.name + " " + lost + "]";
      }
  }
  // failures, then problems (sustained before one-off, by impact), then the fine ones,
  // then context; each tool's own order kept among equals
  auto rank = [](const Finding& f) { return f.failure ? 0 : f.context ? 4 : !f.problem ? 3 : f.one_off ? 2 : 1; };
  std::stable_sort(rep.findings.begin(), rep.findings.end(), [&](const Finding& a, const Finding& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return rank(a) <= 2 && a.impact_ns > b.impact_ns;
  });
  rep.ranked_by = tt.ns ? "Ranked by the time each explains; shares are of " + tt.source + ", " +
                              fmt_ms(tt.ns) + "."
                        : "Ranked by the time each explains.";
}

}  // namespace runbook
