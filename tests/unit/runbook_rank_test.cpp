// runbook's findings ranked by impact (tools/runbook/rank.cpp), from tools' records as
// the tools write them: the shapes of the MariaDB and PostgreSQL reports of issue 21.
#include <doctest/doctest.h>

#include "tools/runbook/runbook.h"

using namespace runbook;
using json = nlohmann::json;

namespace {

constexpr uint64_t kMs = 1000000;

json lock(const std::string& sym, uint64_t total_ms, uint64_t count, uint64_t max_ms, const std::string& site) {
  return {{"type", "lockstat.lock"}, {"final", true},        {"symbol", sym},          {"comm", "mariadbd"},
          {"pid", 42},               {"class", "contention"}, {"reading", "convoy: 16 threads queue"},
          {"wait_total_ns", total_ms * kMs}, {"wait_count", count}, {"wait_max_ns", max_ms * kMs},
          {"thread_count", 16},      {"sites", json::array({{{"site", site}, {"wait_count", count},
                                                              {"wait_total_ns", total_ms * kMs}}})}};
}

json stack(const std::string& cls, const std::string& what, uint64_t total_ms, uint64_t max_ms,
           std::vector<std::string> frames) {
  return {{"type", "offcputime.stack"}, {"final", true}, {"comm", "mariadbd"}, {"pid", 42},
          {"offcpu_total_ns", total_ms * kMs}, {"offcpu_count", 1000}, {"offcpu_max_ns", max_ms * kMs},
          {"wait_class", cls}, {"wait_site_what", what}, {"user_stack", frames}, {"kernel_stack", json::array()}};
}

ToolRun tool(const std::string& name, std::vector<json> records) {
  ToolRun t;
  t.name = name;
  t.exit_code = 0;
  t.records = std::move(records);
  return t;
}

Run mariadb_run() {
  Run run;
  run.book.name = "lock-contention";
  json lost = {{"type", "lockstat.summary"}, {"final", true}, {"wait_total_ns", 9500 * kMs},
               {"lock_count", 3},         {"other_wait_total_ns", 0},
               {"data_quality", {{"lost_events", 18}, {"map_full", 0}}}};
  run.tools.push_back(tool("lockstat", {lock("LOCK_table_cache", 9100, 20000, 5, "tdc_acquire_share"),
                                        lock("LOCK_open", 404, 1, 404, "open_table"),
                                        lock("LOCK_plugin", 300, 900, 2, "plugin_lock"), lost}));
  json held = {{"type", "pmheld.lock"}, {"final", true},  {"symbol", "_rtld_global"}, {"comm", "mariadbd"},
               {"pid", 42},             {"hold_count", 1}, {"hold_total_ns", 600 * kMs}, {"hold_max_ns", 600 * kMs},
               {"hold_p99_ns", 600 * kMs}};
  run.tools.push_back(tool("pmheld", {held}));
  json summ = {{"type", "offcputime.summary"}, {"final", true}, {"offcpu_total_ns", 150000 * kMs},
               {"offcpu_count", 5000}, {"thread_count", 20}, {"stack_count", 3}};
  run.tools.push_back(tool("offcputime", {stack("idle", "event loop", 120000, 900, {"epoll_wait", "handle_connections"}),
                                          stack("lock", "pthread mutex", 9000, 5,
                                                {"__lll_lock_wait", "pthread_mutex_lock", "tdc_acquire_share+0x3c"}),
                                          summ}));
  json prof = {{"type", "profile.summary"}, {"final", true}, {"sample_count", 9990}, {"frequency_hz", 999}};
  run.tools.push_back(tool("profile", {prof}));
  return run;
}

}  // namespace

TEST_CASE("runbook ranks findings by the thread time they explain, across tools") {
  Run run = mariadb_run();
  Report rep = build_report(run);
  std::vector<std::string> order;
  for (auto& f : rep.findings) order.push_back(f.tool + ":" + f.text.substr(0, f.text.find(' ', 5)));
  INFO(doctest::toString(order.size()));
  REQUIRE(rep.findings.size() >= 4);
  // the lock 16 threads queue on is first, with its call site in the line
  CHECK(rep.findings[0].tool == "lockstat");
  CHECK(rep.findings[0].text.find("LOCK_table_cache") != std::string::npos);
  CHECK(rep.findings[0].text.find("at tdc_acquire_share") != std::string::npos);
  // its share: 9.1 s of 150 s off-CPU + 10 s on-CPU
  CHECK(rep.findings[0].number.find("5.7% of thread time") != std::string::npos);
  // sustained before one-off, whatever their totals: LOCK_plugin (300 ms in 900 waits)
  // before LOCK_open (one 404 ms wait)
  size_t plugin = 0, open = 0, idle = 0, held = 0;
  for (size_t i = 0; i < rep.findings.size(); ++i) {
    const Finding& f = rep.findings[i];
    if (f.text.find("LOCK_plugin") != std::string::npos) plugin = i;
    if (f.text.find("LOCK_open") != std::string::npos) open = i;
    if (f.text.find("event loop") != std::string::npos) idle = i;
    if (f.text.find("_rtld_global") != std::string::npos) held = i;
  }
  CHECK(plugin < open);
  CHECK(rep.findings[open].one_off);
  CHECK(rep.findings[open].text.find("one-off") != std::string::npos);
  // the off-CPU lock stack at the same site is lockstat's finding, said once
  for (auto& f : rep.findings) CHECK_FALSE((f.tool == "offcputime" && f.text.find("tdc_acquire_share") != std::string::npos));
  // event-loop idling is context, after every finding, not a problem
  CHECK(rep.findings[idle].context);
  CHECK_FALSE(rep.findings[idle].problem);
  CHECK(idle == rep.findings.size() - 1);
  // a mutex held once that nobody waited for is context, not finding #1
  CHECK(rep.findings[held].context);
  CHECK(held > open);
  // lockstat lost events: next to each of its problem findings and in Data quality
  for (auto& f : rep.findings)
    if (f.tool == "lockstat" && f.problem) CHECK(f.weakened == "lost_events 18");
  bool said = false;
  for (auto& s : rep.sections)
    if (s.title == "Data quality")
      for (auto& l : s.lines) said = said || l.find("lockstat lost data (lost_events 18)") == 0;
  CHECK(said);
  CHECK(rep.ranked_by.find("off-CPU (offcputime) plus on-CPU (profile)") != std::string::npos);
}

TEST_CASE("runbook: a pool blocked on locks that lockstat does not see is said in the Locks section") {
  Run run;
  run.book.name = "slow-service";
  json g = {{"type", "threadpool.group"}, {"final", true}, {"group", "pool"}, {"comm", "java"}, {"pid", 7},
            {"verdict", "blocked-on-locks"}, {"verdict_reason", "busy workers are blocked on locks 80%"},
            {"utilization", 1.0}, {"busy_avg", 8.0}, {"thread_count", 8}, {"accounted_total_ns", 80000 * kMs},
            {"blocked_total_ns", {{"lock", 50000 * kMs}, {"io", 0}, {"poll", 0}, {"gil", 0}, {"sleep", 0}, {"other", 0}}}};
  run.tools.push_back(tool("threadpool", {g}));
  json s = {{"type", "lockstat.summary"}, {"final", true}, {"wait_total_ns", 9 * kMs}, {"lock_count", 3},
            {"other_wait_total_ns", 40000 * kMs}};
  json park = {{"type", "lockstat.lock"}, {"final", true}, {"symbol", "Java LockSupport.park"},
               {"class", "unclassified"}, {"thread_count", 8}, {"wait_total_ns", 46000 * kMs}};
  json tiny = lock("CompileQueue", 9, 10, 1, "CompileBroker");
  tiny["comm"] = "java";
  run.tools.push_back(tool("lockstat", {tiny, park, s}));
  // a timer thread (sleeps the whole window, nobody ends it early) and a main thread in
  // read() whose wait for work threadpool cannot find: context, not findings
  json timer = {{"type", "threadpool.group"}, {"final", true}, {"group", "VM Periodic Tas"}, {"comm", "java"},
                {"pid", 7}, {"verdict", "sleeping"}, {"verdict_reason", "busy workers sleep 99%"},
                {"utilization", 1.0}, {"thread_count", 1}, {"accounted_total_ns", 8000 * kMs},
                {"blocked_total_ns", {{"sleep", 7900 * kMs}}}, {"work_waits", {{"found", false}}}};
  json mainth = {{"type", "threadpool.group"}, {"final", true}, {"group", "java"}, {"comm", "java"},
                 {"pid", 7}, {"verdict", "blocked-on-io"}, {"verdict_reason", "busy workers are blocked on I/O"},
                 {"utilization", 1.0}, {"thread_count", 1}, {"accounted_total_ns", 8000 * kMs},
                 {"blocked_total_ns", {{"io", 8000 * kMs}}}, {"work_waits", {{"found", false}}}};
  run.tools[0].records.push_back(timer);
  run.tools[0].records.push_back(mainth);
  Report rep = build_report(run);
  REQUIRE(!rep.findings.empty());
  CHECK(rep.findings[0].tool == "threadpool");
  CHECK(rep.findings[0].number.find("52.1% of thread time") != std::string::npos);  // of 96 s
  for (auto& f : rep.findings)
    if (f.text.find("VM Periodic") != std::string::npos || f.text.find("'java'") != std::string::npos) {
      CHECK(f.context);
      CHECK_FALSE(f.problem);
    }
  std::string said;
  for (auto& sec : rep.sections)
    if (sec.title == "Locks")
      for (auto& l : sec.lines)
        if (l.find("threadpool counts 50000.0 ms") == 0) said = l;
  CHECK(said.find("Java LockSupport.park (class unclassified, 8 threads, 46000.0 ms)") != std::string::npos);
  CHECK(said.find("lockstat does not see") == std::string::npos);
}

TEST_CASE("runbook: run.json's findings are report.md's, in its order, with their flags") {
  Run run = mariadb_run();
  Report rep = build_report(run);
  json fs = findings_json(rep);
  REQUIRE(fs.size() == rep.findings.size());
  std::string md = render_markdown(rep);
  size_t at = 0;
  for (size_t i = 0; i < fs.size(); ++i) {
    const Finding& f = rep.findings[i];
    CHECK(fs[i]["tool"] == f.tool);
    CHECK(fs[i]["text"] == f.text);
    CHECK(fs[i]["number"] == f.number);
    CHECK(fs[i]["problem"] == f.problem);
    CHECK(fs[i]["context"] == f.context);
    CHECK(fs[i]["weakened"] == f.weakened);
    // each is report.md's line, in the same order
    std::string line = std::string("] ") + f.text + " — **" + f.number + "** (" + f.tool + ")";
    size_t pos = md.find(line, at);
    CHECK_MESSAGE(pos != std::string::npos, line);
    if (pos != std::string::npos) at = pos;
  }
  // lockstat lost events in this run: its findings say so, in run.json too
  CHECK(fs[0]["weakened"] == "lost_events 18");
  CHECK(fs[0]["impact_ns"].get<uint64_t>() == 9100 * kMs);
}
