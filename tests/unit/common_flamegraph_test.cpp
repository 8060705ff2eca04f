// Flame graph SVG: structure, proportions, kernel frames, escaping, bad input.
#include <doctest/doctest.h>

#include <regex>
#include <sstream>
#include <string>

#include "common/flamegraph.h"

using namespace bpfdiag;

namespace {

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

// The width attribute of the rect of the frame whose title starts with `name (`.
double frame_width(const std::string& svg, const std::string& name) {
  auto p = svg.find("<title>" + name + " (");
  REQUIRE(p != std::string::npos);
  std::smatch m;
  std::string rest = svg.substr(p, 400);
  REQUIRE(std::regex_search(rest, m, std::regex("width=\"([0-9.]+)\"")));
  return std::stod(m[1]);
}

}  // namespace

TEST_CASE("flame graph: merged paths, proportional widths, kernel frames, totals") {
  auto in = read_folded("app;main;work;-;sys_read;schedule 300\n"
                        "app;main;work 100\n"
                        "\n"
                        "app;main;idle;-;schedule 600\n"
                        "app;main;work;-;sys_read;schedule 0\n");
  REQUIRE(in);
  CHECK(in->size() == 4);
  FlameOptions o;
  o.width = 1020;  // 1000 px for the frames
  o.unit = "us";
  o.palette = FlamePalette::OffCpu;
  std::string svg = render_flamegraph(*in, o);
  // all, app, main, work, sys_read, schedule (under work), idle, schedule (under idle)
  CHECK(count(svg, "<g class=\"f\"") == 8);
  CHECK(count(svg, "data-k=\"1\"") == 3);  // sys_read and both schedule frames
  CHECK(svg.find("data-total=\"1000\"") != std::string::npos);
  CHECK(frame_width(svg, "all") == doctest::Approx(1000.0));
  CHECK(frame_width(svg, "work") == doctest::Approx(400.0));
  CHECK(frame_width(svg, "idle") == doctest::Approx(600.0));
  CHECK(frame_width(svg, "sys_read") == doctest::Approx(300.0));
  CHECK(svg.find("<title>work (400 us, 40.00%)</title>") != std::string::npos);
  CHECK(svg.find("<title>-") == std::string::npos);  // the separator is not a frame
}

TEST_CASE("flame graph: names are escaped, tiny frames counted, empty input renders") {
  auto in = read_folded("a;operator<<(std::ostream&, \"x\") 999999\nb;tiny 1\n");
  REQUIRE(in);
  FlameOptions o;
  o.width = 220;
  std::string svg = render_flamegraph(*in, o);
  CHECK(svg.find("operator&lt;&lt;(std::ostream&amp;, &quot;x&quot;)") != std::string::npos);
  CHECK(svg.find("data-hidden=\"2\"") != std::string::npos);  // b and tiny: < 0.1 px
  std::string empty = render_flamegraph({}, o);
  CHECK(empty.find("data-total=\"0\"") != std::string::npos);
  CHECK(count(empty, "<g class=\"f\"") == 0);
}

TEST_CASE("read_folded: a malformed line is named") {
  auto r = read_folded("a;b 1\na;b notanumber\n");
  REQUIRE_FALSE(r);
  CHECK(r.error().find("line 2") != std::string::npos);
}

TEST_CASE("read_folded_stream: long lines, deep stacks and the byte cap are skipped and counted") {
  FoldedLimits lim;
  lim.max_line = 64;
  lim.max_frames = 5;
  std::string deep = "c";
  for (int i = 0; i < 6; ++i) deep += ";f" + std::to_string(i);
  std::string text = "a;b 1\n" + std::string(100000, 'x') + " 7\n" + deep + " 3\na;c 2\n" + std::string(65, 'y');
  std::istringstream in(text);
  FoldedReadStats st;
  auto r = read_folded_stream(in, lim, st);
  REQUIRE(r);
  REQUIRE(r->size() == 2);  // a;b and a;c: the long line, the deep stack and the unterminated long tail skipped
  CHECK((*r)[1].frames == std::vector<std::string>{"a", "c"});
  CHECK(st.lines == 2);
  CHECK(st.long_lines == 2);
  CHECK(st.deep_stacks == 1);
  CHECK_FALSE(st.cut);
  CHECK(st.warning(lim).find("skipped 2 lines longer than 64 bytes; skipped 1 stacks deeper than 5 frames") == 0);

  // a malformed line is still an error, counted in input lines (skipped ones included)
  std::istringstream bad(std::string(100, 'x') + "\na;b zz\n");
  FoldedReadStats st2;
  auto e = read_folded_stream(bad, lim, st2);
  REQUIRE_FALSE(e);
  CHECK(e.error().find("line 2") != std::string::npos);

  // the byte cap: what is past it is not read, and that is said
  FoldedLimits small;
  small.max_bytes = 12;
  std::istringstream capped("a;b 1\na;c 2\na;d 3\n");
  FoldedReadStats st3;
  auto c = read_folded_stream(capped, small, st3);
  REQUIRE(c);
  CHECK(c->size() == 2);
  CHECK(st3.cut);
  CHECK(st3.warning(small) == "read only the first 12 bytes of the input");
}
