#include <doctest/doctest.h>

#include "tests/unit/golden.h"

#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/pmheld/pmheld.h"

using namespace pmheld;

namespace {

bpfdiag::Result<Config> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "pmheld");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

LockHold make_lock(uint32_t pid, uint64_t addr, const std::string& sym, uint64_t hold_ns, uint64_t n) {
  LockHold l;
  l.pid = pid;
  l.comm = "app";
  l.addr = addr;
  l.symbol = sym;
  for (uint64_t i = 0; i < n; ++i) l.hist.record(hold_ns);
  l.count = n;
  l.total_ns = hold_ns * n;
  l.max_ns = hold_ns;
  l.hist.set_exact_sum(l.total_ns);
  l.hist.set_exact_max(l.max_ns);
  StackHold s;
  s.frames = {"update_cache", "worker", "start_thread"};
  s.count = n, s.total_ns = l.total_ns, s.max_ns = hold_ns;
  l.stacks.push_back(s);
  return l;
}

}  // namespace

TEST_CASE("parse_args: defaults and options") {
  auto c = parse({});
  REQUIRE(c);
  CHECK(c->pids.empty());
  CHECK(c->stacks == 3);
  CHECK(c->stack_storage_size == 16384);
  CHECK(c->entries == 10);
  CHECK(c->sort == "hold_total_ns");
  CHECK_FALSE(c->schedule.duration_ns.has_value());

  const uint32_t self = static_cast<uint32_t>(getpid()), parent = static_cast<uint32_t>(getppid());
  c = parse({"-p", std::to_string(self) + "," + std::to_string(parent), "-s", "0", "-n", "5", "--sort",
             "p99", "-i", "500ms", "-j", "-d", "10", "--stack-storage-size", "1024"});
  REQUIRE(c);
  CHECK(c->pids == std::vector<uint32_t>{self, parent});
  CHECK(c->stack_storage_size == 1024);
  CHECK(c->stacks == 0);
  CHECK(c->entries == 5);
  CHECK(c->sort == "p99");
  CHECK(*c->schedule.interval_ns == 500000000ULL);
  CHECK(*c->schedule.duration_ns == 10000000000ULL);
  CHECK(c->json);
  CHECK(parse({"--probe-at-symbol", "-v", "--no-hist", "-T"})->at_symbol);
}

TEST_CASE("parse_args: --unwind (dwarf by default with -p, fp system-wide)") {
  const std::string self = std::to_string(getpid());
  CHECK(parse({"-p", self})->unwind_dwarf);
  CHECK_FALSE(parse({})->unwind_dwarf);
  CHECK_FALSE(parse({"-p", self, "--unwind", "fp"})->unwind_dwarf);
  CHECK_FALSE(parse({"-p", self, "-s", "0"})->unwind_dwarf);  // no stacks to unwind
  CHECK(parse({"--unwind", "dwarf"}).error().find("needs -p") != std::string::npos);
  CHECK(parse({"-p", self, "--unwind", "lbr"}).error().find("fp or dwarf") != std::string::npos);
}

TEST_CASE("parse_args: bad input is an error value naming the problem") {
  CHECK(parse({"-p", "abc"}).error().find("PID") != std::string::npos);
  CHECK_FALSE(parse({"-p", "0"}));
  CHECK(parse({"--stack-storage-size", "0"}).error().find("--stack-storage-size") != std::string::npos);
  CHECK_FALSE(parse({"--stack-storage-size", "262145"}));
  CHECK(parse({"--stack-storage-size", "262144"}));
  CHECK(parse({"--sort", "bogus"}).error().find("valid keys") != std::string::npos);
  CHECK(parse({"--fields", "lock,nope"}).error().find("nope") != std::string::npos);
  CHECK_FALSE(parse({"-s", "1001"}));
  CHECK_FALSE(parse({"-i", "0"}));
  CHECK_FALSE(parse({"5", "6"}));
  CHECK_FALSE(parse({"10"}));  // no positional duration: -d 10
  CHECK_FALSE(parse({"-c", "3"}));  // a count needs an interval
  CHECK(parse({"-S", "count"}));    // short names stay accepted
  CHECK(parse({"--fields", "lock,hold_count,hold_p99_ns"}));
  CHECK_FALSE(parse({"--bogus"}));
}

TEST_CASE("--ebpf text and cflags") {
  CHECK(bpf_text().find("int lock_return(struct pt_regs *ctx)") != std::string::npos);
  CHECK(bpf_text().find("int cond_entry(struct pt_regs *ctx)") != std::string::npos);
  Config c;
  auto defines = [](const Config& c) { return bpf_plan(c).defines(); };
  using Defines = std::map<std::string, std::string>;
  CHECK(defines(c) == Defines{{"STACK_ENTRIES", "16384"}});
  c.stack_storage_size = 1000;
  CHECK(defines(c) == Defines{{"STACK_ENTRIES", "1000"}});
  c.stacks = 0;
  CHECK(defines(c) == Defines{{"NO_STACKS", ""}});
  CHECK(bpf_plan(c).text == bpf_text());
}

TEST_CASE("render: text table, histogram, stacks and data quality") {
  Config c;
  std::vector<LockHold> locks = {make_lock(42, 0x5000, "", 1000, 3),
                                 make_lock(42, 0x4040, "cache_lock", 200000, 10)};
  bpfdiag::DataQuality dq;
  dq.unmatched_end = 1;
  std::ostringstream os;
  render(os, os, c, locks, dq, bpfdiag::Window{0, 1000000000ULL, true});
  std::string out = os.str();
  // sorted by total: cache_lock first
  auto table = out.substr(0, out.find("\n\n"));
  CHECK(table ==
        "    PID LOCK                     COUNT   TOTAL     AVG     P50     P99     MAX\n"
        "     42 cache_lock                  10  2.00ms   200us   200us   200us   200us\n"
        "     42 0x5000                       3  3.00us  1.00us  1.00us  1.00us  1.00us");
  CHECK(out.find("cache_lock (0x4040) in app (42): 10 holds, total 2.00ms") != std::string::npos);
  CHECK(out.find("     nsecs               : count     distribution\n") != std::string::npos);
  CHECK(out.find("    131072 -> 262143     : 10       |****************************************|\n") !=
        std::string::npos);
  // BCC's multi-line stack (common print_stack_multiline), value = total hold in ns
  CHECK(out.find("  stack 1: holds 10, total 2.00ms, max 200us; total hold in ns below\n"
                 "    update_cache\n    worker\n    start_thread\n    -                app (42)\n"
                 "        2000000\n\n") != std::string::npos);
  CHECK(out.find("warning:") == std::string::npos);
  CHECK(out.find("data quality: lost events 0, lost stacks 0, unmatched begin 0, unmatched end 1") !=
        std::string::npos);

  c.no_hist = true;
  c.stacks = 0;
  std::ostringstream quiet;
  render(quiet, quiet, c, locks, dq, bpfdiag::Window{0, 1000000000ULL, true});
  CHECK(quiet.str().find("nsecs") == std::string::npos);
  CHECK(quiet.str().find("update_cache") == std::string::npos);
}

TEST_CASE("render: a lost stack shows a placeholder and the warning names the fix") {
  Config c;
  c.stack_storage_size = 1024;
  LockHold l = make_lock(7, 0x4040, "cache_lock", 1000, 2);
  l.stacks[0].frames.clear();
  l.stacks[0].missing = true;
  bpfdiag::DataQuality dq;
  dq.lost_stacks = 5;
  std::ostringstream os;
  render(os, os, c, {l}, dq, bpfdiag::Window{0, 1, true});
  CHECK(os.str().find("    [Missed User Stack]\n    -                app (7)\n        2000\n") !=
        std::string::npos);
  CHECK(os.str().find("warning: 5 acquiring stacks were lost (stack table full or hash collision); "
                      "try --stack-storage-size 4096\n") != std::string::npos);
  c.stack_storage_size = 200000;
  CHECK(lost_stacks_warning(c, dq).find("--stack-storage-size 262144") != std::string::npos);
  CHECK(lost_stacks_warning(c, bpfdiag::DataQuality{}).empty());
}

TEST_CASE("render: NDJSON records per lock and a summary") {
  Config c;
  c.json = true;
  c.entries = 1;
  std::vector<LockHold> locks = {make_lock(42, 0x5000, "", 1000, 3),
                                 make_lock(42, 0x4040, "cache_lock", 200000, 10)};
  bpfdiag::DataQuality dq = empty_dq();
  std::ostringstream os;
  render(os, os, c, locks, dq, bpfdiag::Window{0, 5, true});
  std::istringstream in(os.str());
  std::string line;
  std::vector<nlohmann::json> recs;
  while (std::getline(in, line)) recs.push_back(nlohmann::json::parse(line));
  REQUIRE(recs.size() == 2);
  auto& r = recs[0];
  CHECK(r["type"] == "pmheld.lock");
  CHECK(r["schema"] == bpfdiag::kSchemaVersion);
  CHECK(r["pid"] == 42);
  CHECK(r["addr"] == "0x4040");
  CHECK(r["lock"] == "cache_lock");
  CHECK(r["symbol"] == "cache_lock");
  CHECK(r["hold_count"] == 10);
  CHECK(r["hold_total_ns"] == 2000000);
  CHECK(r["hold_max_ns"] == 200000);
  CHECK(r["hold_p50_ns"].get<uint64_t>() == doctest::Approx(200000).epsilon(0.0625));
  CHECK(r["hold_p99_ns"].get<uint64_t>() <= 200000);
  CHECK(r["hold_hist"]["buckets"][0]["count"] == 10);
  CHECK(r["stacks"][0]["user_stack"][0] == "update_cache");
  CHECK(r["stacks"][0]["user_stack_missing"] == false);
  CHECK(r["data_quality"]["unmatched_end"] == 0);
  CHECK(r["data_quality"]["cond_waits"] == 0);  // fixed keys: present when zero
  CHECK(recs[1]["type"] == "pmheld.summary");
  CHECK(recs[1]["final"] == true);
  CHECK(recs[1]["lock_count"] == 2);
  CHECK(recs[1]["hold_count"] == 13);
  CHECK(recs[1]["hold_total_ns"] == 2000000 + 3000);
  // JSON keys are the table's column names: --fields/--sort/CSV name the same thing
  auto t = lock_table();
  for (const auto& col : t.columns()) CHECK(r.contains(col.name));
}

TEST_CASE("render: an empty report still shows data quality") {
  Config c;
  std::ostringstream os;
  render(os, os, c, {}, bpfdiag::DataQuality{}, bpfdiag::Window{0, 1, true});
  CHECK(os.str() == "no mutex holds ended in this interval\n"
                    "data quality: lost events 0, lost stacks 0, unmatched begin 0, unmatched end 0, "
                    "map full 0\n");
}

// --- golden files: whole reports from a fixed model (tests/golden/pmheld_*) ----------

namespace {

using bpfdiag_test::check_golden;

std::vector<LockHold> fixture() {
  std::vector<LockHold> locks = {make_lock(42, 0x5000, "", 1000, 3), make_lock(42, 0x4040, "cache_lock", 200000, 10),
                                 make_lock(43, 0x7f00a000, "", 5000000, 2)};
  locks[0].stacks[0].missing = true;  // a lost acquiring stack
  locks[0].stacks[0].frames.clear();
  StackHold second;
  second.frames = {"flush_cache", "main"};
  second.count = 1, second.total_ns = 900000, second.max_ns = 900000;
  locks[1].stacks.push_back(second);
  locks[2].comm = "db";
  return locks;
}

bpfdiag::DataQuality fixture_dq() {
  bpfdiag::DataQuality dq = empty_dq();
  dq.add("lost_stacks", 1);
  dq.add("cond_waits", 4);
  dq.add("unmatched_begin", 2);
  return dq;
}

}  // namespace

TEST_CASE("golden: full text report") {
  Config c;
  std::ostringstream os;
  render(os, os, c, fixture(), fixture_dq(), bpfdiag::Window{1700000000000000000ULL, 2000000000ULL, true});
  check_golden("pmheld_report.txt", os.str());
}

TEST_CASE("golden: NDJSON report and CSV") {
  Config c;
  c.json = true;
  std::ostringstream os;
  render(os, os, c, fixture(), fixture_dq(), bpfdiag::Window{1700000000000000000ULL, 2000000000ULL, true});
  check_golden("pmheld_report.ndjson", os.str());
  Config csv;
  csv.csv = true;
  csv.fields = "+comm,addr,p90";
  std::ostringstream out, err;
  render(out, err, csv, fixture(), fixture_dq(), bpfdiag::Window{1, 1, true});
  check_golden("pmheld_report.csv", out.str());
  CHECK(err.str().rfind("data quality: ", 0) == 0);
}

// --- --contended: futex hand-offs, no uprobes (issue 22) ----------------------------

TEST_CASE("--contended: parsing, BPF flags and the uprobe-only options") {
  const std::string self = std::to_string(getpid());
  auto c = parse({"--contended", "-p", self});
  REQUIRE(c);
  CHECK(c->contended);
  CHECK(c->unwind_dwarf);  // the unlock's stack, unwound as the default mode's are
  CHECK_FALSE(parse({})->contended);
  auto bad = parse({"--contended", "--probe-at-symbol"});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().find("--probe-at-symbol") != std::string::npos);
  CHECK(parse({"--contended", "--fields", "lock,count,waiters_max,hold_exact"}));
  CHECK_FALSE(parse({"--fields", "waiters_max"}));  // default mode has no waiters
  Config k;
  k.contended = true;
  auto d = bpf_plan(k).defines();
  CHECK(d.count("CONTENDED"));
  CHECK(bpf_text().find("TRACEPOINT_PROBE(syscalls, sys_enter_futex)") != std::string::npos);
  CHECK(std::string(help_text()).find("pmheld --contended -p 181") != std::string::npos);
}

TEST_CASE("--contended: reports say what the mode sees; waiters in JSON and text") {
  Config c;
  c.contended = true;
  LockHold l = make_lock(42, 0x4040, "cache_lock", 200000, 10);
  l.waiters_max = 3, l.waiters_sum = 25, l.exact = 8;
  bpfdiag::DataQuality dq = empty_dq(true);
  std::ostringstream os;
  render(os, os, c, {l}, dq, bpfdiag::Window{0, 5, true});
  std::string out = os.str();
  CHECK(out.rfind("[contended holds only, timed from the first waiter; uncontended holds not seen; stacks are "
                  "the holders' at the unlock]\n", 0) == 0);
  CHECK(out.find("cache_lock (0x4040) in app (42): 10 contended holds, total 2.00ms") != std::string::npos);
  CHECK(out.find("  waiters at the unlock: max 3, avg 2.5; 8 of 10 holds timed from the holder's own wake-up") !=
        std::string::npos);
  CHECK(out.find("  releasing stack 1: holds 10") != std::string::npos);
  CHECK(out.find("other futex wakes 0") != std::string::npos);
  c.json = true;
  std::ostringstream js;
  render(js, js, c, {l}, dq, bpfdiag::Window{0, 5, true});
  std::istringstream in(js.str());
  std::string line;
  std::vector<nlohmann::json> recs;
  while (std::getline(in, line)) recs.push_back(nlohmann::json::parse(line));
  REQUIRE(recs.size() == 2);
  CHECK(recs[0]["waiters_max"] == 3);
  CHECK(recs[0]["waiters_avg"].get<double>() == doctest::Approx(2.5));
  CHECK(recs[0]["hold_exact"] == 8);
  CHECK(recs[0]["data_quality"]["other_futex_wakes"] == 0);
  CHECK(recs[0]["data_quality"]["cond_waits"] == 0);  // the default mode's keys stay (schema)
  CHECK(recs[1]["mode"] == "contended");
  CHECK(recs[1]["sees"] == "contended holds only, timed from the first waiter; uncontended holds not seen");
}
