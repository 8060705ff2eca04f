#include <doctest/doctest.h>

#include <sstream>
#include <vector>

#include "tools/runqlen/runqlen.h"

using namespace runqlen;

static bpfdiag::Result<Config> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "runqlen");
  return parse_args(static_cast<int>(args.size()), const_cast<char**>(args.data()));
}

TEST_CASE("runqlen options") {
  auto c = parse({"-C", "-T", "-F", "49", "1", "5"});
  REQUIRE(c.ok());
  CHECK(c->per_cpu);
  CHECK(c->timestamp);
  CHECK(c->freq_hz == 49);
  CHECK(*c->schedule.interval_ns == 1000000000ULL);
  CHECK(*c->schedule.count == 5);
  CHECK(parse({"--cfs", "-O", "-j"})->cfs_only);
  CHECK(parse({})->freq_hz == 99);
  CHECK(parse({"-f", "49"})->freq_hz == 49);             // BCC-era letter, hidden alias
  CHECK(parse({"--frequency", "7"})->freq_hz == 7);
  CHECK_FALSE(parse({})->schedule.interval_ns.has_value());
  // the suite's schedule grammar, or BCC's positional form
  auto s = parse({"-i", "500ms", "-c", "3"});
  REQUIRE(s.ok());
  CHECK(*s->schedule.interval_ns == 500000000ULL);
  CHECK(*s->schedule.count == 3);
  CHECK(*parse({"-d", "10"})->schedule.duration_ns == 10000000000ULL);
}

TEST_CASE("runqlen --help is generated from the option table") {
  std::string h = help_text();
  CHECK(h.find("USAGE: runqlen [-T] [-O] [-C] [-F HZ] [--cfs] [--cgroup PATH] [--container ID] [-j] [-i TIME] [-c N] [-d TIME] [--prometheus FILE] [--listen ADDR:PORT] [--ebpf] [-h] [--version] "
               "[interval [count]]\n") != std::string::npos);
  CHECK(h.find("-f ") == std::string::npos);  // the alias is hidden
  CHECK(h.find("EXAMPLES:\n  runqlen ") != std::string::npos);
}

TEST_CASE("runqlen rejects bad input") {
  CHECK_FALSE(parse({"-F", "0"}).ok());
  CHECK_FALSE(parse({"-F", "abc"}).ok());
  CHECK_FALSE(parse({"-F", "100000"}).ok());
  CHECK_FALSE(parse({"-f", "0"}).ok());
  CHECK_FALSE(parse({"-F", "9", "-f", "9"}).ok());
  CHECK_FALSE(parse({"-i", "1", "1"}).ok());  // both schedule forms
  CHECK_FALSE(parse({"-c", "2"}).ok());       // a count without an interval
  CHECK_FALSE(parse({"0"}).ok());
  CHECK_FALSE(parse({"1", "0"}).ok());
  CHECK_FALSE(parse({"-1"}).ok());
  CHECK_FALSE(parse({"--nope"}).ok());
  CHECK_FALSE(parse({"1", "2", "3"}).ok());
  CHECK(parse({"0"}).error() == "invalid interval '0': must be between 1 ms and 86400 s");
}

TEST_CASE("runqlen BPF text reads the CPU's run queue from BTF offsets") {
  std::string t = bpf_text();
  CHECK(t.find("do_perf_event") != std::string::npos);
  CHECK(t.find("RAW_TRACEPOINT_PROBE(sched_switch)") != std::string::npos);  // idle time
  CHECK(t.find("OFF_RQ_NR_RUNNING") != std::string::npos);
  CHECK(t.find("OFF_CFS_RQ_NR") != std::string::npos);
  CHECK(t.find("#include <linux/sched.h>") == std::string::npos);  // no kernel headers
  CHECK(t.find("dq_count(RUNQLEN_CNT_READ_ERRORS)") != std::string::npos);  // shared counters
  Config c;
  auto plan = bpf_plan(c);
  if (plan.ok()) {
    CHECK(plan->defines().size() >= 6);  // + rq.clock and rq.clock_idle where the kernel has them
    CHECK(plan->has("OFF_TASK_PID"));
    CHECK(plan->has("OFF_CFS_RQ_NR"));
    CHECK(!plan->has("CFS_ONLY"));
    CHECK(plan->text == t);
    Config cfs;
    cfs.cfs_only = true;
    CHECK(bpf_plan(cfs)->value("CFS_ONLY") == "");
  }
}

TEST_CASE("runqlen weighs every CPU by time: idle time counts as length 0") {
  // 1 s at 100 Hz. CPU 0 busy all the time (100 samples, queue 1); CPU 1 idle 0.98 s
  // and busy 20 ms, in which it took 5 samples (a woken CPU samples at wake-up).
  PerCpu busy;
  busy[0][1] = 100;
  busy[1][2] = 4;
  busy[1][0] = 1;
  std::map<uint32_t, uint64_t> idle{{0, 0}, {1, 980000000ULL}, {2, 2000000000ULL}};
  auto w = weigh(busy, idle, 1000000000ULL, 100);
  REQUIRE(w.size() == 3);
  CHECK(w[0] == std::map<int64_t, uint64_t>{{1, 100}});
  // busy 20 ms = 2 samples' worth, spread as taken (4:1 -> 2:0), plus 98 idle samples
  CHECK(w[1] == std::map<int64_t, uint64_t>{{0, 98}, {2, 2}});
  // idle beyond the interval (clock skew) is capped; a CPU without samples is kept
  CHECK(w[2] == std::map<int64_t, uint64_t>{{0, 100}});
  uint64_t n0 = 0, n1 = 0;
  for (auto& [l, n] : w[0]) n0 += n;
  for (auto& [l, n] : w[1]) n1 += n;
  CHECK(n0 == n1);  // weighted equally in time
  // busy time but no sample: nothing to spread, only the idle part is reported
  PerCpu none;
  auto w2 = weigh(none, {{0, 500000000ULL}}, 1000000000ULL, 100);
  CHECK(w2[0] == std::map<int64_t, uint64_t>{{0, 50}});
}

TEST_CASE("runqlen text report matches BCC layout plus summary line") {
  Config c;
  PerCpu s;
  s[0][0] = 10;
  s[1][1] = 30;
  std::ostringstream os;
  render(os, c, s, bpfdiag::DataQuality{}, bpfdiag::Window{1, 1000000000ULL, false});
  CHECK(os.str() ==
        "     runqlen       : count     distribution\n"
        "        0          : 10       |*************                           |\n"
        "        1          : 30       |****************************************|\n"
        "     avg 0.75, p50 1, p99 1, max 1 (40 samples)\n"
        "data quality: lost events 0, lost stacks 0, unmatched begin 0, unmatched end 0, map full 0\n");
}

TEST_CASE("runqlen occupancy and per-CPU JSON") {
  Config c;
  c.occupancy = true;
  PerCpu s;
  s[0][0] = 3;
  s[0][2] = 1;
  std::ostringstream os;
  render(os, c, s, bpfdiag::DataQuality{}, bpfdiag::Window{});
  CHECK(os.str().rfind("runqocc: 25.00%\ndata quality: ", 0) == 0);

  Config j;
  j.json = true;
  j.per_cpu = true;
  s[1][0] = 4;
  std::ostringstream js;
  render(js, j, s, empty_quality(), bpfdiag::Window{9, 5, true});
  std::istringstream in(js.str());
  std::string line;
  std::vector<nlohmann::json> recs;
  while (std::getline(in, line)) recs.push_back(nlohmann::json::parse(line));
  REQUIRE(recs.size() == 4);  // cpu 0, cpu 1, all, summary
  for (int n = 0; n < 2; ++n) {
    CHECK(recs[n]["type"] == "runqlen.cpu");
    CHECK(recs[n]["cpu"] == n);  // always an integer
    CHECK(recs[n]["data_quality"]["read_errors"] == 0);
    CHECK(recs[n]["runqlen_hist"]["buckets"].is_array());
  }
  CHECK(recs[0]["sample_count"] == 4);
  CHECK(recs[0]["runqlen_avg"].get<double>() == doctest::Approx(0.5));
  CHECK(recs[0]["runqlen_max"] == 2);
  CHECK(recs[2]["type"] == "runqlen.all");
  CHECK_FALSE(recs[2].contains("cpu"));
  CHECK(recs[2]["sample_count"] == 8);
  CHECK(recs[3]["type"] == "runqlen.summary");
  CHECK(recs[3]["final"] == true);
  CHECK(recs[3]["cpu_count"] == 2);
}
