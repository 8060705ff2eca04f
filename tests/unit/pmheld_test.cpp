#include <doctest/doctest.h>

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
  CHECK(c->sort == "total");
  CHECK_FALSE(c->schedule.duration_ns.has_value());

  const uint32_t self = static_cast<uint32_t>(getpid()), parent = static_cast<uint32_t>(getppid());
  c = parse({"-p", std::to_string(self) + "," + std::to_string(parent), "-s", "0", "-n", "5", "--sort",
             "p99", "-i", "500ms", "-j", "10", "--stack-storage-size", "1024"});
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

TEST_CASE("parse_args: bad input is an error value naming the problem") {
  CHECK(parse({"-p", "abc"}).error().find("PID") != std::string::npos);
  CHECK_FALSE(parse({"-p", "0"}));
  // a PID that does not exist is bad input (exit 2), found while parsing
  auto gone = parse({"-p", "4194303"});
  REQUIRE_FALSE(gone);
  CHECK(gone.error() == "no process with PID 4194303");
  CHECK(parse({"--stack-storage-size", "0"}).error().find("stack storage size") != std::string::npos);
  CHECK_FALSE(parse({"--stack-storage-size", "262145"}));
  CHECK(parse({"--stack-storage-size", "262144"}));
  CHECK(parse({"--sort", "bogus"}).error().find("valid keys") != std::string::npos);
  CHECK(parse({"--fields", "lock,nope"}).error().find("nope") != std::string::npos);
  CHECK_FALSE(parse({"-s", "1001"}));
  CHECK_FALSE(parse({"-i", "0"}));
  CHECK_FALSE(parse({"5", "6"}));
  CHECK_FALSE(parse({"--bogus"}));
}

TEST_CASE("--ebpf text and cflags") {
  CHECK(bpf_text().find("int lock_return(struct pt_regs *ctx)") != std::string::npos);
  CHECK(bpf_text().find("int cond_entry(struct pt_regs *ctx)") != std::string::npos);
  Config c;
  CHECK(bpf_cflags(c) == std::vector<std::string>{"-DSTACK_ENTRIES=16384"});
  c.stack_storage_size = 1000;
  CHECK(bpf_cflags(c) == std::vector<std::string>{"-DSTACK_ENTRIES=1000"});
  c.stacks = 0;
  CHECK(bpf_cflags(c) == std::vector<std::string>{"-DNO_STACKS"});
}

TEST_CASE("render: text table, histogram, stacks and data quality") {
  Config c;
  std::vector<LockHold> locks = {make_lock(42, 0x5000, "", 1000, 3),
                                 make_lock(42, 0x4040, "cache_lock", 200000, 10)};
  bpfdiag::DataQuality dq;
  dq.unmatched_end = 1;
  std::ostringstream os;
  render(os, c, locks, dq, 1000000000ULL, true);
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
  render(quiet, c, locks, dq, 1000000000ULL, true);
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
  render(os, c, {l}, dq, 1, true);
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
  bpfdiag::DataQuality dq;
  std::ostringstream os;
  render(os, c, locks, dq, 5, true);
  std::istringstream in(os.str());
  std::string line;
  std::vector<nlohmann::json> recs;
  while (std::getline(in, line)) recs.push_back(nlohmann::json::parse(line));
  REQUIRE(recs.size() == 2);
  auto& r = recs[0];
  CHECK(r["type"] == "pmheld_lock");
  CHECK(r["pid"] == 42);
  CHECK(r["addr"].is_number_unsigned());
  CHECK(r["addr"] == 0x4040);
  CHECK(r["addr_hex"] == "0x4040");
  CHECK(r["symbol"] == "cache_lock");
  CHECK(r["count"] == 10);
  CHECK(r["total_hold_ns"] == 2000000);
  CHECK(r["max_hold_ns"] == 200000);
  CHECK(r["p50_ns"].get<uint64_t>() == doctest::Approx(200000).epsilon(0.0625));
  CHECK(r["p99_ns"].get<uint64_t>() <= 200000);
  CHECK(r["hist"]["buckets"][0]["count"] == 10);
  CHECK(r["stacks"][0]["frames"][0] == "update_cache");
  CHECK(r["data_quality"]["unmatched_end"] == 0);
  CHECK(recs[1]["type"] == "pmheld_summary");
  CHECK(recs[1]["locks"] == 2);
  CHECK(recs[1]["locks_shown"] == 1);
  CHECK(recs[1]["holds"] == 13);
  CHECK(recs[1].contains("data_quality"));
}

TEST_CASE("render: an empty report still shows data quality") {
  Config c;
  std::ostringstream os;
  render(os, c, {}, bpfdiag::DataQuality{}, 1, true);
  CHECK(os.str() == "no mutex holds ended in this interval\n"
                    "data quality: lost events 0, lost stacks 0, unmatched begin 0, unmatched end 0, "
                    "map full 0\n");
}
