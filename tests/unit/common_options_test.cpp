// The suite's option table: parsing of the shared options, the one schedule grammar,
// and the generated --help / USAGE line.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/options.h"
#include "common/output.h"

using namespace bpfdiag;

namespace {

ToolSpec spec(Positional p) {
  return ToolSpec{"demo", "a demo tool", "Does things.",
                  {opt::pid(), opt::tid(), opt::json("NDJSON"), opt::csv(), opt::entries("rows shown"),
                   opt::min("shortest"), opt::interval(), opt::count(), opt::duration(), opt::ebpf(),
                   opt::help(), OptionSpec{"x,extra", "N", "a tool option\nover two lines", "Filters"},
                   OptionSpec{"old", "", "an old name", "Output", true}},
                  "  demo -p 1   # trace PID 1\n", p};
}

Result<ParsedCli> parse(const ToolSpec& s, std::vector<std::string> args) {
  std::vector<char*> argv;
  static std::vector<std::string> keep;
  keep = args;
  keep.insert(keep.begin(), "demo");
  for (auto& a : keep) argv.push_back(a.data());
  return parse_tool_cli(s, static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("schedule: -i/-c/-d, the positional form, not both") {
  auto ic = spec(Positional::IntervalCount);
  auto r = parse(ic, {"2", "5"});
  REQUIRE(r);
  CHECK(*r->common.schedule.interval_ns == 2000000000ULL);
  CHECK(*r->common.schedule.count == 5);
  CHECK_FALSE(r->common.schedule.duration_ns);
  r = parse(ic, {"-i", "500ms", "-c", "3", "-d", "10"});
  REQUIRE(r);
  CHECK(*r->common.schedule.interval_ns == 500000000ULL);
  CHECK(*r->common.schedule.count == 3);
  CHECK(*r->common.schedule.duration_ns == 10000000000ULL);
  CHECK_FALSE(parse(ic, {"-i", "1", "2"}));  // both forms
  CHECK_FALSE(parse(ic, {"-c", "3"}));       // a count without an interval
  CHECK_FALSE(parse(ic, {"1", "2", "3"}));
  auto d = spec(Positional::Duration);
  r = parse(d, {"7"});
  REQUIRE(r);
  CHECK(*r->common.schedule.duration_ns == 7000000000ULL);
  CHECK_FALSE(r->common.schedule.interval_ns);
  auto none = spec(Positional::None);
  CHECK_FALSE(parse(none, {"7"}));
  CHECK(parse(none, {"-d", "7"}));
}

TEST_CASE("shared options: lists, counts, durations, exclusions") {
  auto s = spec(Positional::None);
  auto r = parse(s, {"-p", "1,1,2", "-t3", "-n", "0", "-m", "2ms", "-x", "9", "-j"});
  REQUIRE(r);
  CHECK(r->common.pids == std::vector<uint32_t>{1, 2});
  CHECK(r->common.tids == std::vector<uint32_t>{3});
  CHECK(*r->common.entries == 0);
  CHECK(*r->common.min_ns == 2000000ULL);
  CHECK(r->common.json);
  CHECK(r->raw["extra"].as<std::string>() == "9");
  CHECK_FALSE(parse(s, {"-j", "--csv"}));
  CHECK_FALSE(parse(s, {"-p", "0"}));
  CHECK_FALSE(parse(s, {"-n", "x"}));
  CHECK_FALSE(parse(s, {"-U"}));  // not declared by this tool
  CHECK(parse(s, {"--old"}));     // hidden, still accepted
  r = parse(s, {"-h", "-j", "--csv"});
  REQUIRE(r);  // --help wins
  CHECK(r->common.help);
}

TEST_CASE("generated help: usage line, groups, hidden options, examples") {
  auto s = spec(Positional::IntervalCount);
  std::string u = usage_line(s);
  CHECK(u ==
        "demo [-p PID[,PID]] [-t TID[,TID]] [-j] [--csv] [-n N] [-m TIME] [-i TIME] [-c N] [-d TIME] "
        "[--ebpf] [-h] [--version] [-x N] [interval [count]]");
  std::string h = render_help(s);
  CHECK(h.rfind("demo - a demo tool\n\nUSAGE: " + u + "\n", 0) == 0);
  CHECK(h.find(" Filters:\n  -p, --pid PID[,PID]   only these processes\n") != std::string::npos);
  CHECK(h.find("  -x, --extra N         a tool option\n                        over two lines\n") !=
        std::string::npos);
  CHECK(h.find("--old") == std::string::npos);
  CHECK(h.find(" Schedule:\n  -i, --interval TIME") != std::string::npos);
  CHECK(h.find("\nEXAMPLES:\n  demo -p 1   # trace PID 1\n") != std::string::npos);
}

TEST_CASE("--version: listed after -h/--help, accepted, and answered before anything else") {
  auto s = spec(Positional::IntervalCount);
  std::string h = render_help(s);
  CHECK(h.find("  -h, --help            show this help\n"
               "      --version         print the version and exit\n") != std::string::npos);
  auto r = parse(s, {"--version"});
  REQUIRE(r);
  CHECK(r->raw.count("version") == 1);
  // like --help, it wins over the rest of the line (which is not checked)
  CHECK(static_cast<bool>(parse(s, {"-p", "x", "--version"})));
  CHECK(static_cast<bool>(parse(s, {"-n", "5", "--version", "1", "2", "3"})));
  CHECK_FALSE(static_cast<bool>(parse(s, {"-p", "x"})));
  // a spec without -h/--help gets no --version either
  ToolSpec bare{"bare", "no help", "", {opt::json("NDJSON")}, "", Positional::None};
  CHECK(usage_line(bare) == "bare [-j]");
  CHECK_FALSE(static_cast<bool>(parse(bare, {"--version"})));
  // the word itself, before any "--"; not an abbreviation, not a value after "--"
  auto asks = [](std::vector<std::string> a) {
    std::vector<char*> av;
    a.insert(a.begin(), "demo");
    for (auto& x : a) av.push_back(x.data());
    return version_requested(static_cast<int>(av.size()), av.data());
  };
  CHECK(asks({"--version"}));
  CHECK(asks({"-p", "1", "--version", "5"}));
  CHECK_FALSE(asks({}));
  CHECK_FALSE(asks({"--vers"}));
  CHECK_FALSE(asks({"-v"}));
  CHECK_FALSE(asks({"--", "--version"}));
  CHECK(std::string(suite_version()).find('.') != std::string::npos);
}

TEST_CASE("record envelope: type, schema, window, fixed data quality keys") {
  DataQuality dq = DataQuality::with_keys({"below_min", "lost_stacks"});
  dq.add("lost_stacks", 2);
  auto j = make_record("demo", "lock", Window{5, 7, true}, {{"pid", 1}}, dq);
  CHECK(j["type"] == "demo.lock");
  CHECK(j["schema"] == kSchemaVersion);
  CHECK(j["time_ns"] == 5);
  CHECK(j["interval_ns"] == 7);
  CHECK(j["final"] == true);
  CHECK(j["pid"] == 1);
  CHECK(j["data_quality"]["below_min"] == 0);
  CHECK(j["data_quality"]["lost_stacks"] == 2);
  CHECK(j["data_quality"]["map_full"] == 0);
  Stack st;
  st.want_kernel = false;
  st.user = {"f", "main"};
  auto sj = stack_json(st);
  CHECK(sj["user_stack"].size() == 2);
  CHECK_FALSE(sj.contains("kernel_stack"));
}
