#include <dirent.h>

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

#include "common/runbook_file.h"

using namespace bpfdiag;

TEST_CASE("parse_runbook: keys, tools with arguments, defaults") {
  auto r = parse_runbook("x", "# c\ntitle: T\nsummary: S\ntool: lockstat -s 3\n\ntool: naptime\nduration: 5s\n");
  REQUIRE(r);
  CHECK(r->title == "T");
  CHECK(r->summary == "S");
  CHECK(r->duration_ns == 5'000'000'000ULL);
  CHECK_FALSE(r->wait_exit);
  REQUIRE(r->tools.size() == 2);
  CHECK(r->tools[0].name == "lockstat");
  CHECK(r->tools[0].args == std::vector<std::string>{"-s", "3"});
  CHECK(parse_runbook("d", "tool: doctor\nwait: exit\n")->wait_exit);
  CHECK(parse_runbook("d", "tool: doctor\n")->title == "d");
}

TEST_CASE("parse_runbook: errors name the line") {
  CHECK(parse_runbook("x", "title: T\n").error() == "no 'tool:' line");
  CHECK(parse_runbook("x", "tool: a\ntools: b\n").error().rfind("line 2: unknown key 'tools'", 0) == 0);
  CHECK(parse_runbook("x", "tool: ../bin/sh\n").error().rfind("line 1: tool name", 0) == 0);
  CHECK(parse_runbook("x", "tool: lockstat -j\n").error() == "line 1: '-j' is added by runbook itself");
  CHECK(parse_runbook("x", "tool: a\nwait: soon\n").error().rfind("line 2: wait is", 0) == 0);
  CHECK_FALSE(parse_runbook("x", "tool: a\nduration: 10x\n"));
  CHECK(parse_runbook("x", "just words\n").error() == "line 1: expected 'key: value'");
}

TEST_CASE("every shipped runbook parses and names tools of the suite") {
  std::string dir = std::string(BPFDIAG_SOURCE_DIR) + "/runbooks";
  DIR* d = opendir(dir.c_str());
  REQUIRE(d);
  int n = 0;
  while (dirent* e = readdir(d)) {
    std::string f = e->d_name;
    if (f.size() < 9 || f.substr(f.size() - 8) != ".runbook") continue;
    auto r = load_runbook(dir + "/" + f);
    INFO(f);
    REQUIRE(r);
    CHECK(r->name == f.substr(0, f.size() - 8));
    CHECK_FALSE(r->summary.empty());
    ++n;
  }
  closedir(d);
  CHECK(n >= 5);
}
