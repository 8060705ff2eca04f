// The tool registry (common/registry.h) as the build collects it (gen/suite_tools.cpp):
// every tool once, names unique, every mode with needs, options that the tool's own
// parser accepts, and doctor's matrix covering every mode.
#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "common/registry.h"
#include "tools/doctor/doctor.h"

using namespace bpfdiag;

namespace {
// CMake's TOOLS list, the one place a tool is added to the build.
std::vector<std::string> cmake_tools() {
  std::ifstream in(std::string(BPFDIAG_SOURCE_DIR) + "/CMakeLists.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  std::smatch m;
  std::string text = ss.str();
  std::vector<std::string> out;
  if (!std::regex_search(text, m, std::regex(R"(set\(TOOLS ([a-z ]+)\))"))) return out;
  std::istringstream names(m[1].str());
  for (std::string n; names >> n;) out.push_back(n);
  return out;
}
}  // namespace

TEST_CASE("registry lists every tool of the build once, in its order") {
  const auto& tools = suite_tools();
  std::vector<std::string> names;
  for (const ToolEntry* t : tools) names.push_back(t->name);
  CHECK(names == cmake_tools());
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
  for (const ToolEntry* t : tools) {
    CHECK_MESSAGE(t->spec().name == t->name, t->name);
    CHECK(find_tool(tools, t->name) == t);
  }
  CHECK(find_tool(tools, "flamegraph") == nullptr);
}

TEST_CASE("every mode names what it needs, once across the suite") {
  std::set<std::string> modes;
  for (const ToolEntry* t : suite_tools()) {
    CHECK_MESSAGE(!t->modes.empty(), t->name);
    for (const ModeNeeds& m : t->modes) {
      CHECK_MESSAGE(!m.empty(), m.mode);
      CHECK_MESSAGE(!m.gives.empty(), m.mode);
      CHECK_MESSAGE(m.mode.rfind(t->name, 0) == 0, m.mode);  // "lockstat -K" under lockstat
      CHECK_MESSAGE(modes.insert(m.mode).second, "mode listed twice: " << m.mode);
      for (const auto* list : {&m.tracepoints, &m.raw_tracepoints})
        for (const auto& tp : *list) CHECK_MESSAGE(tp.find(':') != std::string::npos, tp);
    }
  }
  CHECK(modes.count("profile"));
  CHECK(modes.count("lockstat -U"));
}

TEST_CASE("each mode's command line passes the tool's own parser") {
  for (const ToolEntry* t : suite_tools())
    for (const ModeNeeds& m : t->modes) {
      std::vector<std::string> argv;
      std::istringstream words(m.mode);
      for (std::string w; words >> w;) argv.push_back(w);
      if (t->name == "threadpool") argv.insert(argv.end(), {"-p", "1"});  // required
      auto st = t->check(argv);
      CHECK_MESSAGE(!st, m.mode << ": " << (st ? st->message : ""));
    }
  const ToolEntry* lockstat = find_tool(suite_tools(), "lockstat");
  REQUIRE(lockstat);
  CHECK(lockstat->check({"lockstat", "--no-such-option"}));  // a refusal is seen
}

TEST_CASE("doctor's matrix has a row for every registry mode") {
  doctor::Features f;
  std::set<std::string> rows;
  for (const auto& k : doctor::tool_matrix(f, suite_tools())) rows.insert(k.name);
  for (const ToolEntry* t : suite_tools())
    for (const ModeNeeds& m : t->modes) CHECK_MESSAGE(rows.count(m.mode), m.mode);
  // every tracepoint a mode names is looked up
  auto tps = doctor::matrix_tracepoints(suite_tools());
  CHECK(std::find(tps.begin(), tps.end(), "sched:sched_waking") != tps.end());
}

TEST_CASE("tool_json: options as the help lists them, modes with needs") {
  const ToolEntry* runqlen = find_tool(suite_tools(), "runqlen");
  REQUIRE(runqlen);
  auto j = tool_json(*runqlen);
  CHECK(j["tool"] == "runqlen");
  CHECK(j["usage"] == usage_line(runqlen->spec()));
  bool has_freq = false, has_hidden = false;
  for (const auto& o : j["options"]) {
    if (o["short"] == "F" && o["long"] == "frequency" && o["arg"] == "HZ") has_freq = true;
    if (o["short"] == "f" && o["long"] == "") has_hidden = true;  // -f: hidden older name
  }
  CHECK(has_freq);
  CHECK_FALSE(has_hidden);
  CHECK(j["modes"][0]["perf_cpu_clock"] == true);
}
