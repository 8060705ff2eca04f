// Findings and report sections, read from the tools' own records: their verdicts
// (threadpool, doctor), readings (lockstat) and numbers. Nothing is re-derived: a
// number in the report is a field of a record, formatted.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "tools/runbook/runbook.h"

namespace runbook {
using json = nlohmann::json;

std::string fmt_ms(uint64_t ns) {
  char b[64];
  std::snprintf(b, sizeof b, "%.1f ms", static_cast<double>(ns) / 1e6);
  return b;
}

namespace {

uint64_t u64(const json& r, const char* k) { return r.contains(k) && r[k].is_number() ? r[k].get<uint64_t>() : 0; }
double num(const json& r, const char* k) { return r.contains(k) && r[k].is_number() ? r[k].get<double>() : 0.0; }
std::string str(const json& r, const char* k) { return r.contains(k) && r[k].is_string() ? r[k].get<std::string>() : ""; }
std::string f1(double v, const char* fmt = "%.1f") {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}
std::string who(const json& r) {
  std::string c = str(r, "comm");
  return c.empty() ? "" : c + " (" + std::to_string(u64(r, "pid")) + ")";
}
// Top records of a kind by a field, largest first.
std::vector<const json*> top(const ToolRun& t, const std::string& kind, const char* key, size_t n) {
  auto v = t.final_records(kind);
  std::stable_sort(v.begin(), v.end(), [key](const json* a, const json* b) { return u64(*a, key) > u64(*b, key); });
  if (v.size() > n) v.resize(n);
  return v;
}
// The innermost user frames of a stack record, "inner <- caller <- ...".
std::string user_frames(const json& r, size_t n) {
  std::string s;
  if (!r.contains("user_stack") || !r["user_stack"].is_array()) return s;
  size_t i = 0;
  for (auto& f : r["user_stack"]) {
    if (i++ == n) break;
    s += (s.empty() ? "" : " <- ") + f.get<std::string>();
  }
  return s;
}

std::vector<std::string> frames_of(const json& r, size_t n) {
  std::vector<std::string> v;
  if (r.contains("user_stack") && r["user_stack"].is_array())
    for (auto& f : r["user_stack"])
      if (v.size() < n && f.is_string()) v.push_back(f.get<std::string>());
  return v;
}

struct Ctx {
  Report& rep;
  std::map<std::string, Section*> sec;
  Finding& find(const ToolRun& t, std::string text, std::string number, bool problem = true) {
    Finding f;
    f.tool = t.name;
    f.text = std::move(text);
    f.number = std::move(number);
    f.problem = problem;
    rep.findings.push_back(std::move(f));
    return rep.findings.back();
  }
  void line(const std::string& s, std::string l) { sec[s]->lines.push_back(std::move(l)); }
};

// The thread time behind a pool's verdict: what its workers lost to the cause named.
uint64_t pool_impact_ns(const json& g, const std::string& verdict) {
  const json& b = g.contains("blocked_total_ns") && g["blocked_total_ns"].is_object() ? g["blocked_total_ns"] : json::object();
  if (verdict == "blocked-on-locks") return u64(b, "lock");
  if (verdict == "blocked-on-io") return u64(b, "io") + u64(b, "poll");
  if (verdict == "blocked-on-gil") return u64(b, "gil");
  if (verdict == "blocked-other") return u64(b, "other");
  if (verdict == "sleeping") return u64(b, "sleep");
  if (verdict == "cpu-starved") return u64(g, "cpu_wait_total_ns");
  if (verdict == "pool-too-small") return u64(g, "queue_wait_avg_ns") * u64(g, "queue_wait_count");
  return 0;
}

void threadpool(Ctx& c, const ToolRun& t) {
  for (auto* g : t.final_records("group")) {
    std::string v = str(*g, "verdict");
    bool bad = v != "ok" && v != "idle" && v != "no-data" && v != "uncertain";
    Finding& f = c.find(t, "pool '" + str(*g, "group") + "' of " + who(*g) + ": " + v + " — " + str(*g, "verdict_reason"),
           "utilization " + f1(100 * num(*g, "utilization"), "%.0f%%") + ", " + f1(num(*g, "busy_avg")) + " of " +
               std::to_string(u64(*g, "thread_count")) + " threads busy",
           bad);
    f.impact_ns = pool_impact_ns(*g, v);
    // Context, not a finding: an idle pool; workers in timed sleeps nobody ended early
    // (a timer thread: jemalloc's background thread, HotSpot's VM Periodic Task); one
    // thread whose wait for work threadpool could not find, so that every wait of it
    // counts as busy (a main thread in read() on its stdin)
    const bool work_unknown = u64(*g, "thread_count") == 1 && g->contains("work_waits") &&
                              (*g)["work_waits"].is_object() && !(*g)["work_waits"].value("found", true);
    if (v == "idle" || v == "sleeping" || (bad && work_unknown)) {
      f.context = true;
      f.problem = false;
      if (v != "idle")
        f.text += v == "sleeping" ? " (timed sleeps: context)"
                                  : " (one thread, no wait for work seen: its waits cannot be told from idle)";
    }
    c.line("Thread pool", "group '" + str(*g, "group") + "': " + std::to_string(u64(*g, "thread_count")) +
                              " threads, on-CPU " + fmt_ms(u64(*g, "oncpu_total_ns")) + ", runnable " +
                              fmt_ms(u64(*g, "runnable_total_ns")) + ", idle " + fmt_ms(u64(*g, "idle_total_ns")) +
                              "; verdict " + v);
    if (g->contains("dispatch_p99_ns"))
      c.line("Thread pool", "dispatch latency p50 " + fmt_ms(u64(*g, "dispatch_p50_ns")) + ", p99 " +
                                fmt_ms(u64(*g, "dispatch_p99_ns")) + " (" + std::to_string(u64(*g, "dispatch_count")) +
                                " dispatches)");
  }
}

// The call site lockstat ranks first for a lock ("" when it has none).
std::string top_site(const json& l) {
  if (!l.contains("sites") || !l["sites"].is_array() || l["sites"].empty()) return "";
  return str(l["sites"][0], "site");
}

void lockstat(Ctx& c, const ToolRun& t) {
  size_t i = 0;
  for (auto* l : top(t, "lock", "wait_total_ns", 5)) {
    std::string name = str(*l, "symbol").empty() ? str(*l, "lock") : str(*l, "symbol");
    std::string site = top_site(*l);
    std::string text = "lock " + name + " in " + who(*l) + (site.empty() ? "" : " at " + site) + ": " + str(*l, "reading");
    std::string number = fmt_ms(u64(*l, "wait_total_ns")) + " waited, " + std::to_string(u64(*l, "wait_count")) +
                         " waits by " + std::to_string(u64(*l, "thread_count")) + " threads, max " +
                         fmt_ms(u64(*l, "wait_max_ns"));
    // lockstat's reading says whether it matters ("light: ..." does not)
    if (i++ < 3 && str(*l, "class") == "contention") {
      Finding& f = c.find(t, text, number, str(*l, "reading").rfind("light", 0) != 0);
      f.impact_ns = u64(*l, "wait_total_ns");
      f.max_event_ns = u64(*l, "wait_max_ns");
      f.lock = name;
      for (auto& s : (*l)["sites"])
        if (s.is_object()) {
          for (auto& fr : frames_of(s, 4)) f.frames.push_back(fr);
          if (s.contains("site") && s["site"].is_string()) f.frames.push_back(s["site"].get<std::string>());
        }
    }
    c.line("Locks", "lockstat: " + text + " — " + number + " [" + str(*l, "class") + "]");
  }
  for (auto* s : t.final_records("summary"))
    c.line("Locks", "lockstat: " + std::to_string(u64(*s, "lock_count")) + " contended locks, " +
                        fmt_ms(u64(*s, "wait_total_ns")) + " waited in all; other waits (not contention) " +
                        fmt_ms(u64(*s, "other_wait_total_ns")));
}

void pmheld(Ctx& c, const ToolRun& t) {
  size_t i = 0;
  for (auto* l : top(t, "lock", "hold_total_ns", 5)) {
    std::string name = str(*l, "symbol").empty() ? str(*l, "lock") : str(*l, "symbol");
    std::string text = "mutex " + name + " in " + who(*l) + " held " + std::to_string(u64(*l, "hold_count")) + " times";
    std::string number = fmt_ms(u64(*l, "hold_total_ns")) + " held in all, p99 " + fmt_ms(u64(*l, "hold_p99_ns")) +
                         ", max " + fmt_ms(u64(*l, "hold_max_ns"));
    if (i++ == 0) {
      Finding& f = c.find(t, text, number);
      f.lock = name;
      f.max_event_ns = u64(*l, "hold_max_ns");
    }
    c.line("Locks", "pmheld: " + text + " — " + number);
  }
}

// Off-CPU waits that are context, not findings: waiting for work, timed sleeps,
// condition waits and tracers' own attach/detach (offcputime's wait_class, from the
// wait-site rules).
bool context_wait(const json& r) {
  std::string k = str(r, "wait_class");
  return k == "idle" || k == "sleep" || k == "condition" || k == "tracer";
}

void offcputime(Ctx& c, const ToolRun& t) {
  for (auto* s : t.final_records("summary")) {
    std::string by;
    if (s->contains("wait_class_total_ns") && (*s)["wait_class_total_ns"].is_object())
      for (auto& [k, v] : (*s)["wait_class_total_ns"].items())
        if (v.is_number() && v.get<uint64_t>()) by += (by.empty() ? "; " : ", ") + k + " " + fmt_ms(v.get<uint64_t>());
    c.line("Off-CPU", "threads were off-CPU " + fmt_ms(u64(*s, "offcpu_total_ns")) + " in " +
                          std::to_string(u64(*s, "offcpu_count")) + " blocks (" + std::to_string(u64(*s, "thread_count")) +
                          " threads, " + std::to_string(u64(*s, "stack_count")) + " stacks)" + by);
  }
  // the top stacks by time; a finding only from one that is not waiting for work, a
  // sleep or a condition (its wait class and the rule's words are in the line)
  bool found = false, found_context = false;
  for (auto* r : top(t, "stack", "offcpu_total_ns", 8)) {
    std::string what = str(*r, "wait_site_what");
    std::string kind = str(*r, "wait_class").empty() ? "unclassified" : str(*r, "wait_class");
    std::string text = who(*r) + (kind == "cpu" ? " waited for a CPU in " : " blocked in ") + (user_frames(*r, 3).empty() ? "[kernel]" : user_frames(*r, 3)) +
                       " [" + kind + (what.empty() ? "" : ": " + what) + "]";
    std::string number = fmt_ms(u64(*r, "offcpu_total_ns")) + " off-CPU in " + std::to_string(u64(*r, "offcpu_count")) +
                         " blocks";
    bool& seen = context_wait(*r) ? found_context : found;  // one finding of each
    if (!seen) {
      seen = true;
      Finding& f = c.find(t, (context_wait(*r) ? "most off-CPU time: " : "top off-CPU stack: ") + text, number,
                          !context_wait(*r));
      f.context = context_wait(*r);
      f.impact_ns = u64(*r, "offcpu_total_ns");
      f.max_event_ns = u64(*r, "offcpu_max_ns");
      f.frames = frames_of(*r, 6);
      if (kind == "lock") f.lock = what.empty() ? "lock" : what;
    }
    c.line("Off-CPU", text + " — " + number + (context_wait(*r) ? " (context: not a finding)" : ""));
  }
}

void runqlen(Ctx& c, const ToolRun& t) {
  for (auto* a : t.final_records("all")) {
    double occ = num(*a, "occupancy_pct");
    Finding& f = c.find(t, "run queue non-empty " + f1(occ, "%.0f%%") + " of samples (all CPUs)",
           "avg length " + f1(num(*a, "runqlen_avg"), "%.2f") + ", p99 " + std::to_string(u64(*a, "runqlen_p99")) +
               ", max " + std::to_string(u64(*a, "runqlen_max")) + " (whole machine)",
           occ >= 50);
    // tasks queued on average x the time: the machine's thread time waiting for a CPU;
    // the target's own share of it is not known here, so with -p it is not ranked by it
    if (!t.whole_machine)
      f.impact_ns = static_cast<uint64_t>(num(*a, "runqlen_avg") * static_cast<double>(u64(*a, "interval_ns")));
  }
  for (auto* p : t.final_records("cpu"))
    c.line("CPU and run queue", "CPU " + std::to_string(u64(*p, "cpu")) + ": run queue non-empty " +
                                    f1(num(*p, "occupancy_pct"), "%.0f%%") + ", avg " +
                                    f1(num(*p, "runqlen_avg"), "%.2f") + ", max " + std::to_string(u64(*p, "runqlen_max")) +
                                    " (" + std::to_string(u64(*p, "sample_count")) + " samples)");
  for (auto* a : t.final_records("all"))
    c.line("CPU and run queue", "all CPUs: run queue non-empty " + f1(num(*a, "occupancy_pct"), "%.0f%%") + ", avg " +
                                    f1(num(*a, "runqlen_avg"), "%.2f") + " (" + std::to_string(u64(*a, "sample_count")) +
                                    " samples)");
}

// profile (on-CPU samples): the hottest stacks, by whatever count its records carry.
void profile(Ctx& c, const ToolRun& t) {
  const char* key = nullptr;
  for (auto* k : {"sample_count", "samples", "count"})
    if (!t.final_records("stack").empty() && t.final_records("stack")[0]->contains(k)) key = k;
  uint64_t total = 0, hz = 0;
  for (auto* s : t.final_records("summary")) {
    for (auto* k : {"sample_count", "samples"})
      if (!total) total = u64(*s, k);
    hz = u64(*s, "frequency_hz");
  }
  if (!key) return;
  size_t i = 0;
  for (auto* r : top(t, "stack", key, 5)) {
    uint64_t n = u64(*r, key);
    std::string text = who(*r) + " on CPU in " + (user_frames(*r, 3).empty() ? "[kernel]" : user_frames(*r, 3));
    std::string number = std::to_string(n) + " samples" + (total ? " (" + f1(100.0 * n / total, "%.1f%%") + ")" : "");
    if (i++ == 0) {
      Finding& f = c.find(t, "hottest on-CPU stack: " + text, number);
      f.impact_ns = hz ? n * 1'000'000'000ULL / hz : 0;
    }
    c.line("CPU and run queue", "profile: " + text + " — " + number);
  }
}

void naptime(Ctx& c, const ToolRun& t) {
  for (auto* s : t.final_records("summary")) {
    c.find(t, std::to_string(u64(*s, "sleep_count")) + " deliberate sleeps by " + std::to_string(u64(*s, "process_count")) +
                  " processes",
           fmt_ms(u64(*s, "sleep_total_ns")) + " asleep (requested " + fmt_ms(u64(*s, "requested_total_ns")) + "), " +
               std::to_string(u64(*s, "interrupted_count")) + " interrupted",
           false);
    // deliberate sleeps are context: naptime cannot tell a sleep that delays work
    // from one that paces it
    Finding& f = c.rep.findings.back();
    f.context = u64(*s, "sleep_count") > 0;
    f.impact_ns = u64(*s, "sleep_total_ns");
  }
  for (auto* p : top(t, "process", "sleep_total_ns", 5))
    c.line("Sleeps", who(*p) + ": " + std::to_string(u64(*p, "sleep_count")) + " sleeps, " +
                         fmt_ms(u64(*p, "sleep_total_ns")) + " asleep (requested " + fmt_ms(u64(*p, "requested_total_ns")) +
                         ")");
}

void doctor(Ctx& c, const ToolRun& t) {
  for (auto* s : t.final_records("summary"))
    c.find(t, "machine verdict: " + str(*s, "verdict"),
           std::to_string(u64(*s, "ok_count")) + " ok, " + std::to_string(u64(*s, "warn_count")) + " warn, " +
               std::to_string(u64(*s, "fail_count")) + " fail, " + std::to_string(u64(*s, "skip_count")) + " skipped",
           str(*s, "verdict") != "ready");
  for (auto* k : t.final_records("check")) {
    std::string st = str(*k, "status");
    if (st == "fail" || st == "warn")
      c.find(t, "check " + str(*k, "name") + ": " + str(*k, "detail") + (str(*k, "fix").empty() ? "" : "; fix: " + str(*k, "fix")),
             st);
    c.line("Machine checks", "[" + st + "] " + str(*k, "name") + ": " + str(*k, "detail"));
  }
}

// One story: when threadpool says workers are blocked on locks, the Locks section shows
// how much of that lockstat attributes to contended locks, and says so when it is less
// than half (the rest: waits lockstat classed otherwise, or locks it does not see).
void locks_story(Ctx& c, const Run& run) {
  const ToolRun* pool = nullptr;
  const ToolRun* locks = nullptr;
  for (auto& t : run.tools) {
    if (t.name == "threadpool" && !t.failed()) pool = &t;
    if (t.name == "lockstat" && !t.failed()) locks = &t;
  }
  if (!pool) return;
  uint64_t blocked = 0;
  for (auto* g : pool->final_records("group"))
    if (str(*g, "verdict") == "blocked-on-locks") blocked += pool_impact_ns(*g, "blocked-on-locks");
  if (!blocked) return;
  if (!locks) {
    c.line("Locks", "threadpool: workers blocked on locks " + fmt_ms(blocked) +
                        "; this runbook has no lockstat to name the locks (runbook lock-contention has)");
    return;
  }
  uint64_t contended = 0;
  const json* other = nullptr;  // lockstat's largest row that is not contention
  for (auto* l : locks->final_records("lock")) {
    if (str(*l, "class") == "contention") contended += u64(*l, "wait_total_ns");
    else if (!other || u64(*l, "wait_total_ns") > u64(*other, "wait_total_ns")) other = l;
  }
  if (2 * contended >= blocked) return;
  std::string text = "threadpool counts " + fmt_ms(blocked) + " of its workers' time blocked on locks; lockstat classes " +
                     fmt_ms(contended) + " as lock contention";
  if (other && 2 * u64(*other, "wait_total_ns") >= blocked) {
    std::string name = str(*other, "symbol").empty() ? str(*other, "lock") : str(*other, "symbol");
    text += ". Its largest other row, " + name + " (class " + str(*other, "class") + ", " +
            std::to_string(u64(*other, "thread_count")) + " threads, " + fmt_ms(u64(*other, "wait_total_ns")) +
            "), is large enough to hold those waits: the two tools disagree on what it is";
  } else {
    text += ": the rest is in waits lockstat does not see (e.g. a runtime's own locks without a rule: see the "
            "Off-CPU section's lock stacks)";
  }
  c.line("Locks", text);
}

const std::map<std::string, std::string> kSectionOf = {
    {"runqlen", "CPU and run queue"}, {"profile", "CPU and run queue"}, {"offcputime", "Off-CPU"},
    {"lockstat", "Locks"},            {"pmheld", "Locks"},              {"naptime", "Sleeps"},
    {"threadpool", "Thread pool"},    {"doctor", "Machine checks"}};

}  // namespace

void add_method_and_quality(const Run& run, Report& rep);  // report_sections.cpp

Report build_report(const Run& run) {
  Report rep;
  rep.title = "runbook " + run.book.name + ": " + run.book.title;
  for (auto* s : {"Method and scope", "CPU and run queue", "Off-CPU", "Locks", "Sleeps", "Thread pool",
                  "Machine checks", "Data quality", "How to rerun"})
    rep.sections.push_back(Section{s, {}, {}, {}, {}, {}});
  Ctx c{rep, {}};
  for (auto& s : rep.sections) c.sec[s.title] = &s;
  for (auto& t : run.tools) {
    if (t.failed())
      c.find(t, t.name + " failed" + (t.exit_code > 0 ? " (exit " + std::to_string(t.exit_code) + ")" : "") + ": " +
                    t.stderr_last_line(),
             t.exit_signal ? "signal " + std::to_string(t.exit_signal) : "no report");
    if (t.failed()) rep.findings.back().failure = true;
    std::string sec = kSectionOf.count(t.name) ? kSectionOf.at(t.name) : "";
    size_t before = sec.empty() ? 0 : c.sec[sec]->lines.size();
    if (t.name == "threadpool") threadpool(c, t);
    if (t.name == "lockstat") lockstat(c, t);
    if (t.name == "pmheld") pmheld(c, t);
    if (t.name == "offcputime") offcputime(c, t);
    if (t.name == "runqlen") runqlen(c, t);
    if (t.name == "profile") profile(c, t);
    if (t.name == "naptime") naptime(c, t);
    if (t.name == "doctor") doctor(c, t);
    if (!sec.empty() && c.sec[sec]->lines.size() == before)
      c.line(sec, t.name + ": " + (t.failed() ? "failed: " + t.stderr_last_line() : "nothing recorded"));
    for (auto& f : t.files)
      if (f.size() > 4 && f.compare(f.size() - 4, 4, ".svg") == 0 && !sec.empty()) {
        const std::string pb = f.substr(0, f.size() - 4) + ".pb.gz";  // the tool's --pprof, if it wrote one
        bool has_pb = std::find(t.files.begin(), t.files.end(), pb) != t.files.end();
        c.sec[sec]->figures.push_back({t.name + " flame graph", f, has_pb ? pb : ""});
      }
  }
  locks_story(c, run);
  rank_findings(run, rep);
  add_method_and_quality(run, rep);
  // a section no tool of this runbook covers says so (the doctor's only when it ran)
  for (auto& s : rep.sections)
    if (s.lines.empty() && s.table.empty() && s.pre.empty() && s.figures.empty())
      s.lines.push_back("not measured by this runbook");
  rep.sections.erase(std::remove_if(rep.sections.begin(), rep.sections.end(),
                                    [](const Section& s) {
                                      return s.title == "Machine checks" && s.lines.size() == 1 &&
                                             s.lines[0] == "not measured by this runbook";
                                    }),
                     rep.sections.end());
  return rep;
}

}  // namespace runbook
