#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/stacks.h"
#include "tools/offcputime/offcputime.h"

using namespace offcputime;

static bpfdiag::Result<Config> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "offcputime");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

TEST_CASE("offcputime: defaults") {
  auto c = parse({});
  REQUIRE(c);
  CHECK(c->min_us == 1);
  CHECK(c->max_us == 0);
  CHECK(c->stack_storage_size == 16384);
  CHECK(!c->schedule.duration_ns);
  CHECK(!c->state);
}

TEST_CASE("offcputime: options") {
  std::string self = std::to_string(getpid());
  auto c = parse({"-p", self, "-t", self, "-u", "-U", "-d", "-f", "-P", "-m", "1000", "-M", "5000",
                  "--state", "2", "--stack-storage-size", "1024", "--map-size", "4096", "5"});
  REQUIRE(c);
  CHECK(c->pids == std::vector<uint32_t>{static_cast<uint32_t>(getpid())});
  CHECK(c->tids.size() == 1);
  CHECK(c->user_threads_only);
  CHECK(c->user_stacks_only);
  CHECK(c->delimiter);
  CHECK(c->folded);
  CHECK(c->per_thread);
  CHECK(c->min_us == 1000);
  CHECK(c->max_us == 5000);
  CHECK(*c->state == 2);
  CHECK(c->stack_storage_size == 1024);
  CHECK(c->map_size == 4096);
  CHECK(*c->schedule.duration_ns == 5000000000ULL);
  CHECK(parse({"-df", "2"}));
}

TEST_CASE("offcputime: bad input is one clear error") {
  auto err = [](std::vector<std::string> a) {
    auto r = parse(a);
    REQUIRE_FALSE(r);
    CHECK(r.error().find('\n') == std::string::npos);
    return r.error();
  };
  CHECK(err({"-m", "5000", "-M", "100"}).find("above max") != std::string::npos);
  CHECK(err({"-m", "99999999999999999999"}).find("min block time") != std::string::npos);
  CHECK(err({"-M", "0"}).find("max block time") != std::string::npos);
  CHECK(err({"-p", "4194304"}).find("no process with PID 4194304") != std::string::npos);
  CHECK(err({"-p", "abc"}).find("PID") != std::string::npos);
  CHECK(err({"-t", "4194303"}).find("no thread with TID") != std::string::npos);
  // PID 1's threads never include our own thread
  CHECK(err({"-p", "1", "-t", std::to_string(getpid())}).find("is not a thread of PID 1") != std::string::npos);
  CHECK(err({"-u", "-k"}).find("mutually exclusive") != std::string::npos);
  CHECK(err({"-U", "-K"}).find("mutually exclusive") != std::string::npos);
  CHECK(err({"-f", "-j"}).find("mutually exclusive") != std::string::npos);
  CHECK(err({"--stack-storage-size", "0"}).find("stack storage size") != std::string::npos);
  CHECK(err({"--state", "70000"}).find("state") != std::string::npos);
  CHECK(err({"1", "2"}).find("unexpected argument") != std::string::npos);
  CHECK(err({"--bogus"}).find("bogus") != std::string::npos);
}

TEST_CASE("offcputime: BPF cflags carry filters, bounds and BTF offsets") {
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0) return;
  auto c = parse({"-p", std::to_string(getpid()), "-m", "10", "-M", "20", "--state", "0", "-K"});
  REQUIRE(c);
  auto f = bpf_cflags(*c);
  REQUIRE(f);
  std::string all;
  for (auto& s : *f) all += s + " ";
  CHECK(all.find("-DTGID_OK(x)=((x)==" + std::to_string(getpid()) + ")") != std::string::npos);
  CHECK(all.find("-DTID_OK(x)=(1)") != std::string::npos);
  CHECK(all.find("-DMIN_NS=10000ULL") != std::string::npos);
  CHECK(all.find("-DMAX_NS=20000ULL") != std::string::npos);
  CHECK(all.find("-DSTATE_EQ=0") != std::string::npos);
  CHECK(all.find("-DCAPTURE_KERNEL") != std::string::npos);
  CHECK(all.find("-DCAPTURE_USER") == std::string::npos);
  CHECK(all.find("-DOFF_TASK_STATE=") != std::string::npos);
  CHECK(bpf_text().find("RAW_TRACEPOINT_PROBE(sched_switch)") != std::string::npos);
  // `seen` is pruned when a process exits
  CHECK(bpf_text().find("RAW_TRACEPOINT_PROBE(sched_process_exit)") != std::string::npos);
  // several PIDs: the shared generator's form
  auto c2 = parse({"-p", std::to_string(getpid()) + ",1"});
  REQUIRE(c2);
  auto f2 = bpf_cflags(*c2);
  REQUIRE(f2);
  bool found = false;
  for (auto& s : *f2)
    found = found || s == "-DTGID_OK(x)=((x)==" + std::to_string(getpid()) + "||(x)==1)";
  CHECK(found);
}

static Entry entry(uint32_t pid, uint32_t tid, const std::string& comm, uint64_t ns,
                   std::vector<std::string> user, std::vector<std::string> kernel) {
  Entry e;
  e.pid = pid;
  e.tid = tid;
  e.comm = comm;
  e.total_ns = ns;
  e.count = 2;
  e.max_ns = ns / 2;
  e.stack.user = std::move(user);
  e.stack.kernel = std::move(kernel);
  return e;
}

static Report sample_report() {
  Report r;
  r.entries.push_back(entry(10, 11, "app", 5000000, {"read", "reader"}, {"schedule", "anon_pipe_read"}));
  r.entries.push_back(entry(10, 12, "app", 3000000, {"read", "reader"}, {"schedule", "anon_pipe_read"}));
  r.entries.push_back(entry(10, 13, "app", 1500, {"nanosleep", "sleeper"}, {"schedule", "do_nanosleep"}));
  r.dq.lost_stacks = 3;
  r.duration_ns = 1000000000;
  return r;
}

TEST_CASE("offcputime: multi-line text, ascending, values in us, data quality") {
  Config c;
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  CHECK(os.str() ==
        "    schedule\n    do_nanosleep\n    nanosleep\n    sleeper\n"
        "    -                app (13)\n        1\n\n"
        "    schedule\n    anon_pipe_read\n    read\n    reader\n"
        "    -                app (12)\n        3000\n\n"
        "    schedule\n    anon_pipe_read\n    read\n    reader\n"
        "    -                app (11)\n        5000\n\n"
        "data quality: lost events 0, lost stacks 3, unmatched begin 0, unmatched end 0, map full 0\n");
  CHECK(err.str().empty());
}

TEST_CASE("offcputime: folded merges threads unless --per-thread") {
  Config c;
  c.folded = true;
  auto lines = folded_lines(c, sample_report().entries);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "app;reader;read;-;anon_pipe_read;schedule 8000");
  CHECK(lines[1] == "app;sleeper;nanosleep;-;do_nanosleep;schedule 1");
  c.per_thread = true;
  lines = folded_lines(c, sample_report().entries);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "app-10/11;reader;read;-;anon_pipe_read;schedule 5000");
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  CHECK(os.str().find("data quality") == std::string::npos);  // stdout stays flamegraph input
  CHECK(err.str().find("lost stacks 3") != std::string::npos);
}

TEST_CASE("offcputime: JSON record") {
  Config c;
  c.json = true;
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  auto j = nlohmann::json::parse(os.str());
  CHECK(j["type"] == "offcputime");
  CHECK(j["duration_ns"] == 1000000000);
  REQUIRE(j["stacks"].size() == 3);
  CHECK(j["stacks"][0]["total_ns"] == 5000000);  // descending
  CHECK(j["stacks"][0]["kernel_stack"][1] == "anon_pipe_read");
  CHECK(j["stacks"][0]["user_stack"][1] == "reader");
  REQUIRE(j["threads"].size() == 3);
  CHECK(j["threads"][0]["tid"] == 11);
  CHECK(j["threads"][0]["total_ns"] == 5000000);
  CHECK(j["data_quality"]["lost_stacks"] == 3);
}

TEST_CASE("offcputime: warnings name the option that fixes them") {
  Config c;
  bpfdiag::DataQuality dq;
  CHECK(warnings(c, dq).empty());
  dq.lost_stacks = 5;
  dq.map_full = 2;
  auto w = warnings(c, dq);
  REQUIRE(w.size() == 2);
  CHECK(w[0].find("--stack-storage-size 65536") != std::string::npos);
  CHECK(w[1].find("--map-size 131072") != std::string::npos);
  CHECK(w[1].find("off-CPU periods were dropped") != std::string::npos);
  // a full `seen` map drops no periods: its own warning, which says so
  dq.map_full = 0;
  dq.extra["seen_full"] = 4;
  w = warnings(c, dq);
  REQUIRE(w.size() == 2);
  CHECK(w[1].find("4 new processes were not announced") != std::string::npos);
  CHECK(w[1].find("no periods were dropped") != std::string::npos);
  CHECK(w[1].find("--map-size 131072") != std::string::npos);
  dq.extra["seen_full"] = 0;
  CHECK(warnings(c, dq).size() == 1);
}

// Used by the integration test: every line of a real folded output file (path in
// OFFCPU_FOLDED_FILE) parses with the project's parser and re-folds to itself.
TEST_CASE("offcputime: folded file round trip (integration helper)") {
  const char* path = std::getenv("OFFCPU_FOLDED_FILE");
  if (!path) return;
  std::ifstream f(path);
  REQUIRE(f);
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    auto p = bpfdiag::parse_folded(line);
    REQUIRE_MESSAGE(p, line);
    std::string again = p->frames[0];
    for (size_t i = 1; i < p->frames.size(); ++i) again += ";" + p->frames[i];
    CHECK(again + " " + std::to_string(p->value) == line);
    ++n;
  }
  CHECK(n > 0);
  MESSAGE("folded lines round-tripped: " << n);
}
