// bpfdiag's command line (tools/bpfdiag): which command runs with which argv, help,
// --version, and the one-line usage errors; the generated list of commands.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tools/bpfdiag/bpfdiag.h"

using namespace bpfdiag_cmd;

namespace {
const std::vector<Command> kCmds = {{"offcputime", "off-CPU time"}, {"runbook", "several tools"}};
}

TEST_CASE("bpfdiag NAME ARGS: NAME runs with ARGS unchanged, argv[0] its name") {
  auto r = parse_request({"bpfdiag", "offcputime", "-p", "181", "--version", "--", "5"}, kCmds);
  REQUIRE(r);
  CHECK(r->kind == Request::Run);
  CHECK(r->tool == "offcputime");
  CHECK(r->args == std::vector<std::string>{"offcputime", "-p", "181", "--version", "--", "5"});
  auto h = parse_request({"bpfdiag", "help", "runbook"}, kCmds);
  REQUIRE(h);
  CHECK(h->kind == Request::Run);
  CHECK(h->args == std::vector<std::string>{"runbook", "--help"});
}

TEST_CASE("bpfdiag: help, no arguments, -h, --version") {
  for (std::vector<std::string> a : {std::vector<std::string>{"bpfdiag"}, {"bpfdiag", "help"}, {"bpfdiag", "-h"},
                                     {"bpfdiag", "--help"}}) {
    auto r = parse_request(a, kCmds);
    REQUIRE(r);
    CHECK(r->kind == Request::Help);
  }
  auto v = parse_request({"bpfdiag", "--version"}, kCmds);
  REQUIRE(v);
  CHECK(v->kind == Request::Version);
}

TEST_CASE("bpfdiag: usage errors are one line naming what is wrong") {
  auto e1 = parse_request({"bpfdiag", "sh"}, kCmds);
  REQUIRE_FALSE(e1);
  CHECK(e1.error() == "unknown command 'sh' (commands: offcputime, runbook)");
  // paths are not names: nothing outside the list runs
  for (std::string bad : {"../offcputime", "/bin/sh", "./offcputime", "offcputime/", "", "OFFCPUTIME"})
    CHECK_FALSE(parse_request({"bpfdiag", bad}, kCmds));
  auto e2 = parse_request({"bpfdiag", "--frobnicate"}, kCmds);
  REQUIRE_FALSE(e2);
  CHECK(e2.error().rfind("unknown option '--frobnicate'", 0) == 0);
  CHECK_FALSE(parse_request({"bpfdiag", "help", "nope"}, kCmds));
  CHECK_FALSE(parse_request({"bpfdiag", "help", "runbook", "x"}, kCmds));
  CHECK_FALSE(parse_request({"bpfdiag", "--version", "x"}, kCmds));
  auto e3 = parse_request({"bpfdiag", std::string("a\nb\x1b")}, kCmds);
  REQUIRE_FALSE(e3);
  CHECK(e3.error().find('\n') == std::string::npos);
  CHECK(e3.error().find('\x1b') == std::string::npos);
}

TEST_CASE("bpfdiag help: every command with its summary, USAGE, examples, 80 columns") {
  std::string h = help_text(kCmds);
  CHECK(h.find("\nUSAGE: bpfdiag [-h] [--version] COMMAND [ARGS...]\n") != std::string::npos);
  CHECK(h.find("\nCOMMANDS:\n  offcputime  off-CPU time\n  runbook     several tools\n") != std::string::npos);
  CHECK(h.find("\nEXAMPLES:\n  bpfdiag ") != std::string::npos);
  // a long summary continues under itself
  std::vector<Command> long_one = kCmds;
  long_one.push_back({"x", std::string(60, 'a') + " " + std::string(20, 'b') + " c"});
  h = help_text(long_one);
  CHECK(h.find("\n  x           " + std::string(60, 'a') + "\n              " + std::string(20, 'b') + " c\n") !=
        std::string::npos);
  size_t start = 0;
  for (size_t nl; (nl = h.find('\n', start)) != std::string::npos; start = nl + 1)
    CHECK_MESSAGE(nl - start <= 80, h.substr(start, nl - start));
}

TEST_CASE("the generated list: the suite's programs, each with its summary, not bpfdiag") {
  const auto& cmds = commands();
  std::vector<std::string> names;
  for (auto& c : cmds) {
    names.push_back(c.name);
    CHECK_MESSAGE(!c.summary.empty(), c.name);
  }
  for (const char* n : {"runqlen", "offcputime", "lockstat", "doctor", "runbook", "flamegraph"})
    CHECK_MESSAGE(std::find(names.begin(), names.end(), n) != names.end(), n);
  CHECK(std::find(names.begin(), names.end(), "bpfdiag") == names.end());
}
