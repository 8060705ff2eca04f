// profile's parsing (strict values, one-line errors) and its BPF flags.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tools/profile/profile.h"

using namespace profile;

static bpfdiag::Result<Config> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "profile");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

static bool has(const bpfdiag::BpfPlan& p, const std::string& s) { return p.has(s); }

TEST_CASE("profile: defaults are BCC's (49 Hz, user + kernel, idle excluded)") {
  auto c = parse({});
  REQUIRE(c);
  CHECK(c->freq_hz == 49);
  CHECK_FALSE(c->include_idle);
  auto f = bpf_plan(*c);
  CHECK(has(f, "CAPTURE_USER"));
  CHECK(has(f, "CAPTURE_KERNEL"));
  CHECK_FALSE(has(f, "INCLUDE_IDLE"));
  CHECK(f.value("STACK_STORAGE_SIZE") == "16384");
}

TEST_CASE("profile: -F, -U/-K, -I, duration forms, --svg") {
  auto c = parse({"-F", "99", "-U", "-I", "--svg", "/tmp/x.svg", "5"});
  REQUIRE(c);
  CHECK(c->freq_hz == 99);
  CHECK(c->svg == "/tmp/x.svg");
  CHECK(c->pprof.empty());
  CHECK(c->schedule.duration_ns == 5000000000ULL);
  auto p = parse({"--pprof", "/tmp/x.pb.gz", "-j", "2"});  // with -j: both from one run
  REQUIRE(p);
  CHECK(p->pprof == "/tmp/x.pb.gz");
  CHECK(p->json);
  auto f = bpf_plan(*c);
  CHECK(has(f, "CAPTURE_USER"));
  CHECK_FALSE(has(f, "CAPTURE_KERNEL"));
  CHECK(has(f, "INCLUDE_IDLE"));
  auto d = parse({"-d", "1500ms", "-K"});
  REQUIRE(d);
  CHECK(d->schedule.duration_ns == 1500000000ULL);
  CHECK_FALSE(has(bpf_plan(*d), "CAPTURE_USER"));
}

TEST_CASE("profile: --unwind (dwarf by default with -p/-t, fp system-wide)") {
  const std::string self = std::to_string(getpid());
  CHECK(parse({"-p", self})->unwind_dwarf);
  CHECK(parse({"-t", self})->unwind_dwarf);
  CHECK_FALSE(parse({})->unwind_dwarf);
  CHECK_FALSE(parse({"-p", self, "--unwind", "fp"})->unwind_dwarf);
  CHECK_FALSE(parse({"-p", self, "-K"})->unwind_dwarf);  // kernel stacks only: nothing to unwind
  CHECK(parse({"--unwind", "dwarf"}).error().find("needs -p or -t") != std::string::npos);
}

TEST_CASE("profile: bad input is one error") {
  for (auto args : std::vector<std::vector<std::string>>{{"-F", "0"},
                                                         {"-F", "10001"},
                                                         {"-F", "49x"},
                                                         {"-U", "-K"},
                                                         {"-f", "-j"},
                                                         {"--stack-storage-size", "10"},
                                                         {"-d", "5", "5"},
                                                         {"--svg", ""},
                                                         {"-p", "0"}}) {
    auto c = parse(args);
    CHECK_MESSAGE(!c, args[0]);
    if (!c) CHECK(c.error().find('\n') == std::string::npos);
  }
}

TEST_CASE("profile: the BPF program has the sampler and no kprobes") {
  std::string t = bpf_text();
  CHECK(t.find("int do_perf_event(struct bpf_perf_event_data *ctx)") != std::string::npos);
  CHECK(t.find("kprobe") == std::string::npos);
  CHECK(t.find("#define STACKS_SIZE STACK_STORAGE_SIZE") != std::string::npos);
  CHECK(t.find("BPF_STACK_TRACE(stack_traces, STACKS_SIZE)") != std::string::npos);  // stacks.h, pasted
  CHECK(t.find("bpfdiag_stack_id(&ctx->regs, BPF_F_USER_STACK)") != std::string::npos);
}
