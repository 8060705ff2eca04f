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
  auto c = parse({"-C", "-T", "-f", "49", "1", "5"});
  REQUIRE(c.ok());
  CHECK(c->per_cpu);
  CHECK(c->timestamp);
  CHECK(c->freq_hz == 49);
  CHECK(*c->schedule.interval_ns == 1000000000ULL);
  CHECK(*c->schedule.count == 5);
  CHECK(parse({"--cfs", "-O", "-j"})->cfs_only);
  CHECK(parse({})->freq_hz == 99);
  CHECK_FALSE(parse({})->schedule.interval_ns.has_value());
}

TEST_CASE("runqlen rejects bad input") {
  CHECK_FALSE(parse({"-f", "0"}).ok());
  CHECK_FALSE(parse({"-f", "abc"}).ok());
  CHECK_FALSE(parse({"-f", "100000"}).ok());
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
  CHECK(t.find("OFF_RQ_NR_RUNNING") != std::string::npos);
  CHECK(t.find("OFF_CFS_RQ_NR") != std::string::npos);
  CHECK(t.find("#include <linux/sched.h>") == std::string::npos);  // no kernel headers
  Config c;
  auto flags = bpf_cflags(c);
  if (flags.ok()) {
    CHECK(flags->size() == 5);
    Config cfs;
    cfs.cfs_only = true;
    CHECK(bpf_cflags(cfs)->back() == "-DCFS_ONLY");
  }
}

TEST_CASE("runqlen text report matches BCC layout plus summary line") {
  Config c;
  PerCpu s;
  s[0][0] = 10;
  s[1][1] = 30;
  std::ostringstream os;
  render(os, c, s, {}, 1000000000ULL, false);
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
  render(os, c, s, {}, 0, false);
  CHECK(os.str().rfind("runqocc: 25.00%\ndata quality: ", 0) == 0);

  Config j;
  j.json = true;
  j.per_cpu = true;
  s[1][0] = 4;
  std::ostringstream js;
  bpfdiag::DataQuality dq;
  render(js, j, s, dq, 5, true);
  std::istringstream in(js.str());
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    auto rec = nlohmann::json::parse(line);
    CHECK(rec["type"] == "runqlen");
    CHECK(rec["cpu"] == n);
    CHECK(rec.contains("data_quality"));
    CHECK(rec["hist"]["buckets"].is_array());
    if (n == 0) {
      CHECK(rec["samples"] == 4);
      CHECK(rec["mean"].get<double>() == doctest::Approx(0.5));
      CHECK(rec["max"] == 2);
    }
    ++n;
  }
  CHECK(n == 2);
}
