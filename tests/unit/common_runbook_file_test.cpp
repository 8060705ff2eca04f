#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstdlib>
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
  CHECK(r->tools[0].line == 4);
  CHECK(r->tools[1].line == 6);
  CHECK(parse_runbook("d", "tool: doctor\nwait: exit\n")->wait_exit);
  CHECK(parse_runbook("d", "tool: doctor\n")->title == "d");
}

TEST_CASE("parse_runbook: errors name the line") {
  CHECK(parse_runbook("x", "title: T\n").error() == "no 'tool:' line");
  CHECK(parse_runbook("x", "tool: a\ntools: b\n").error().rfind("line 2: unknown key 'tools'", 0) == 0);
  CHECK(parse_runbook("x", "tool: ../bin/sh\n").error().rfind("line 1: tool name", 0) == 0);
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

namespace {

// A directory for the trust checks: next to the test binary (not /tmp, whose sticky
// world-writable mode is refused for runbooks).
std::string scratch_dir() {
  std::string tmpl = self_exe_dir() + "/unit-runbook-XXXXXX";
  if (!mkdtemp(tmpl.data())) return "";
  chmod(tmpl.c_str(), 0755);
  return tmpl;
}

void put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("open_trusted: the file and every directory above it, on descriptors") {
  std::string d = scratch_dir();
  REQUIRE_FALSE(d.empty());
  put(d + "/ok.runbook", "tool: naptime\n");
  chmod((d + "/ok.runbook").c_str(), 0644);
  auto fd = open_trusted(d + "/ok.runbook");
  REQUIRE(fd);
  close(*fd);
  auto rb = load_runbook(d + "/ok.runbook");
  REQUIRE(rb);
  CHECK(rb->name == "ok");

  // the file writable by others
  chmod((d + "/ok.runbook").c_str(), 0666);
  auto e = open_trusted(d + "/ok.runbook");
  REQUIRE_FALSE(e);
  CHECK(e.error().find("ok.runbook is world-writable") != std::string::npos);
  chmod((d + "/ok.runbook").c_str(), 0664);
  CHECK(open_trusted(d + "/ok.runbook").error().find("is group-writable") != std::string::npos);
  chmod((d + "/ok.runbook").c_str(), 0644);

  // a directory on the path writable by others
  chmod(d.c_str(), 0777);
  auto open_dir = load_runbook(d + "/ok.runbook");
  REQUIRE_FALSE(open_dir);
  CHECK(open_dir.error().find(d + " is world-writable") != std::string::npos);
  chmod(d.c_str(), 0775);
  CHECK(load_runbook(d + "/ok.runbook").error().find(d + " is group-writable") != std::string::npos);
  // ... unless it is sticky and root's, like /tmp: each entry is then kept to its owner
  chmod(d.c_str(), 01777);
  if (getuid() == 0) {
    CHECK(load_runbook(d + "/ok.runbook"));
    REQUIRE(chown(d.c_str(), 65534, 65534) == 0);  // sticky but another user's: refused
    CHECK(load_runbook(d + "/ok.runbook").error().find("owned by uid 65534") != std::string::npos);
    REQUIRE(chown(d.c_str(), 0, 0) == 0);
  } else {  // sticky, but ours, not root's: only root's sticky directories are shared ones
    CHECK(load_runbook(d + "/ok.runbook").error().find(d + " is world-writable") != std::string::npos);
  }
  chmod(d.c_str(), 0755);

  // another user's file (needs root to hand it over)
  if (getuid() == 0) {
    REQUIRE(chown((d + "/ok.runbook").c_str(), 65534, 65534) == 0);
    CHECK(open_trusted(d + "/ok.runbook").error().find("owned by uid 65534") != std::string::npos);
    REQUIRE(chown((d + "/ok.runbook").c_str(), 0, 0) == 0);
  }

  // a symbolic link is followed only as far as realpath resolves it: the target is checked
  REQUIRE(symlink((d + "/ok.runbook").c_str(), (d + "/link.runbook").c_str()) == 0);
  CHECK(open_trusted(d + "/link.runbook"));
  // not a regular file
  CHECK(open_trusted(d).error().find("not a regular file") != std::string::npos);
  CHECK(open_trusted(d, true));
  CHECK_FALSE(open_trusted(d + "/missing.runbook"));

  // $BPFDIAG_RUNBOOKS: an untrusted directory is skipped by the list, refused by name
  std::string bad = d + "/bad";
  REQUIRE(mkdir(bad.c_str(), 0755) == 0);
  put(bad + "/evil.runbook", "tool: naptime\n");
  chmod(bad.c_str(), 0777);
  setenv("BPFDIAG_RUNBOOKS", (bad + ":" + d).c_str(), 1);
  auto dirs = runbook_dirs();
  REQUIRE(dirs.size() >= 2);
  CHECK(dirs[0].path == bad);
  CHECK_FALSE(dirs[0].untrusted.empty());
  CHECK(dirs[1].untrusted.empty());
  std::vector<std::string> warn;
  auto books = list_runbooks(&warn);
  bool evil = false, ok = false;
  for (auto& b : books) {
    evil = evil || b.name == "evil";
    ok = ok || b.name == "ok";
  }
  CHECK_FALSE(evil);
  CHECK(ok);
  REQUIRE_FALSE(warn.empty());
  CHECK(warn[0].find(bad + " is world-writable") != std::string::npos);
  auto refused = load_runbook("evil");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().find("runbook 'evil': refused") == 0);
  CHECK(load_runbook("ok"));  // found in the trusted directory after the untrusted one
  unsetenv("BPFDIAG_RUNBOOKS");
  std::string rm = "rm -rf '" + d + "'";
  CHECK(std::system(rm.c_str()) == 0);
}
