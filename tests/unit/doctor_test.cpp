#include <doctest/doctest.h>

#include <sstream>
#include <vector>

#include "tools/doctor/doctor.h"

using namespace doctor;

static bpfdiag::Result<Config> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "doctor");
  return parse_args(static_cast<int>(args.size()), const_cast<char**>(args.data()));
}

TEST_CASE("doctor options") {
  auto c = parse({});
  REQUIRE(c.ok());
  CHECK(c->live);
  CHECK_FALSE(c->json);
  CHECK(c->pids.empty());
  auto p = parse({"-p", "1,2", "-j", "--no-live"});
  REQUIRE(p.ok());
  CHECK(p->pids == std::vector<uint32_t>{1, 2});
  CHECK(p->json);
  CHECK_FALSE(p->live);
  CHECK_FALSE(parse({"5"}).ok());          // no positional arguments
  CHECK_FALSE(parse({"-p", "x"}).ok());
  CHECK_FALSE(parse({"--ebpf", "--no-live"}).ok());
  CHECK(std::string(help_text()).find("USAGE: doctor [-p PID[,PID]] [--no-live] [-l] [-j] [--ebpf] [-h] [--version]\n") !=
        std::string::npos);
}

TEST_CASE("lockdown mode is the bracketed word") {
  CHECK(lockdown_mode("none [integrity] confidentiality") == "integrity");
  CHECK(lockdown_mode("[none] integrity confidentiality") == "none");
  CHECK(lockdown_mode("garbage") == "");
}

TEST_CASE("frame setup: frame pointer, a frame without one, or a frameless leaf") {
  const uint8_t fp[] = {0x55, 0x48, 0x89, 0xe5, 0x53};                          // push rbp; mov rsp,rbp
  const uint8_t endbr_fp[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5};  // endbr64 first
  const uint8_t other_push[] = {0x41, 0x54, 0x55, 0x48, 0x8b, 0xec};            // push r12; push rbp; mov (8b form)
  const uint8_t no_fp[] = {0x55, 0x53, 0x48, 0x83, 0xec, 0x08};                 // push rbp as callee-saved only
  const uint8_t sub_rsp[] = {0x48, 0x83, 0xec, 0x18, 0xe8, 0, 0, 0, 0};         // sub $0x18,%rsp; call
  const uint8_t leaf[] = {0x8d, 0x47, 0x01, 0xc3};                              // lea 1(%rdi),%eax; ret
  const uint8_t branch_first[] = {0xeb, 0x00, 0x55, 0x48, 0x89, 0xe5};          // jmp: the walk stops
  CHECK(frame_setup(fp, sizeof fp) == FrameSetup::FramePointer);
  CHECK(frame_setup(endbr_fp, sizeof endbr_fp) == FrameSetup::FramePointer);
  CHECK(frame_setup(other_push, sizeof other_push) == FrameSetup::FramePointer);
  CHECK(frame_setup(no_fp, sizeof no_fp) == FrameSetup::NoFramePointer);
  CHECK(frame_setup(sub_rsp, sizeof sub_rsp) == FrameSetup::NoFramePointer);
  CHECK(frame_setup(leaf, sizeof leaf) == FrameSetup::Frameless);
  CHECK(frame_setup(branch_first, sizeof branch_first) == FrameSetup::Frameless);
  CHECK(frame_setup(fp, 2) == FrameSetup::NoFramePointer);  // truncated: only the push is seen
}

TEST_CASE("frame pointer verdict thresholds") {
  CHECK(frame_pointer_verdict({100, 80, 7}) == "yes");
  CHECK(frame_pointer_verdict({100, 79, 0}) == "mixed");
  CHECK(frame_pointer_verdict({100, 20, 0}) == "no");
  CHECK(frame_pointer_verdict({4, 4, 50}) == "unknown");
}

TEST_CASE("tool matrix names what is missing") {
  const auto& tools = bpfdiag::suite_tools();
  Features f;
  f.root = f.btf = f.tracefs = f.uprobes = f.perf_cpu_clock = true;
  for (const auto& tp : matrix_tracepoints(tools)) f.tracepoints.insert(tp);
  for (const auto& k : tool_matrix(f, tools)) CHECK_MESSAGE(k.status == Verdict::Ok, k.name);
  f.tracepoints.erase("lock:contention_begin");
  f.uprobes = false;
  std::map<std::string, Check> by;
  for (const auto& k : tool_matrix(f, tools)) by[k.name] = k;
  CHECK(by.at("lockstat -K").status == Verdict::Warn);
  CHECK(by.at("lockstat -K").detail.find("lock:contention_begin") != std::string::npos);
  CHECK(by.at("lockstat").status == Verdict::Warn);
  CHECK(by.at("lockstat -U").status == Verdict::Ok);
  CHECK(by.at("pmheld").status == Verdict::Warn);
  CHECK(by.at("offcputime").status == Verdict::Ok);
  CHECK_FALSE(by.at("pmheld").required);
  // the modes the hand-kept table lacked: profile's sampling, lockstat's wakers
  CHECK(by.at("profile").status == Verdict::Ok);
  f.perf_cpu_clock = false;
  f.tracepoints.erase("sched:sched_waking");
  by.clear();
  for (const auto& k : tool_matrix(f, tools)) by[k.name] = k;
  CHECK(by.at("profile").status == Verdict::Warn);
  CHECK(by.at("profile").detail.find("perf cpu-clock") != std::string::npos);
  CHECK(by.at("lockstat -U").status == Verdict::Warn);
  CHECK(by.at("lockstat -U").detail.find("sched:sched_waking") != std::string::npos);
  CHECK(by.at("lockstat -K").detail.find("sched_waking") == std::string::npos);
}

TEST_CASE("live verdicts and the exit code") {
  LiveResult r;
  r.syscalls_made = r.syscalls_counted = r.events_received = 1000;
  r.sleeps_made = 50;
  r.switches_counted = r.switches_kernel = 50;
  r.uprobe_calls = r.uprobe_hits = 1000;
  auto good = live_checks(r);
  CHECK(exit_code(good) == 0);
  CHECK(status_counts(good).at("ok") == good.size());
  r.events_lost = 3;
  r.events_received = 997;
  auto lossy = live_checks(r);
  CHECK(exit_code(lossy) == 1);
  r.events_lost = 0;
  r.events_received = 1000;
  r.switches_counted = 49;  // a switch not seen
  CHECK(exit_code(live_checks(r)) == 1);
  r.switches_kernel = 49;  // a sleep that expired before the thread switched out
  CHECK(exit_code(live_checks(r)) == 0);
  r.switches_counted = 51;  // an extra event
  CHECK(exit_code(live_checks(r)) == 1);
  r.switches_counted = r.switches_kernel = 0;  // no switch at all: the handler never ran
  CHECK(exit_code(live_checks(r)) == 1);
  r.switches_counted = r.switches_kernel = 50;
  r.uprobe_error = "no uprobes";
  auto no_uprobe = live_checks(r);
  CHECK(exit_code(no_uprobe) == 0);  // optional
  CHECK(status_counts(no_uprobe).at("warn") == 1);
}

TEST_CASE("text: one line per check with the fix; JSON: check records and a summary") {
  std::vector<Check> checks = {{"kernel", "btf", Verdict::Ok, true, "found", "", 0},
                               {"kernel", "kprobes", Verdict::Warn, false, "absent", "not needed", 0}};
  Config c;
  std::ostringstream text;
  render(text, c, checks, empty_quality(), 500000000);
  CHECK(text.str().find("ok    btf                      found\n") != std::string::npos);
  CHECK(text.str().find("warn  kprobes                  absent; fix: not needed\n") != std::string::npos);
  CHECK(text.str().find("1 ok, 1 warn, 0 fail, 0 skip in 0.50 s: this machine can be traced") !=
        std::string::npos);
  c.json = true;
  std::ostringstream js;
  render(js, c, checks, empty_quality(), 1);
  std::istringstream lines(js.str());
  std::vector<nlohmann::json> recs;
  for (std::string l; std::getline(lines, l);) recs.push_back(nlohmann::json::parse(l));
  REQUIRE(recs.size() == 3);
  CHECK(recs[0]["type"] == "doctor.check");
  CHECK(recs[1]["status"] == "warn");
  CHECK(recs[2]["type"] == "doctor.summary");
  CHECK(recs[2]["verdict"] == "ready");
  CHECK(recs[2]["final"] == true);
}
