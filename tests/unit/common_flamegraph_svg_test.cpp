// The SVG every stack tool writes with --svg (and flamegraph --diff): well-formed XML,
// frames with their title text, the zoom/search script, no network references, kernel
// frames in their own colours, and the differential colours. Also the shared folding
// (FoldedSet, merge_identical_stacks) that offcputime and profile both use.
#include <doctest/doctest.h>

#include <cctype>
#include <regex>
#include <string>
#include <vector>

#include "common/flamegraph.h"
#include "common/stacks.h"

using namespace bpfdiag;

namespace {

// A small well-formedness check: every tag closes in order, attributes are quoted,
// the only text markup is entities, one root element; CDATA, the XML declaration and
// comments are skipped. Returns "" or what is wrong.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> open;
  size_t i = 0, roots = 0;
  while (i < s.size()) {
    if (s[i] != '<') {
      if (s[i] == '&') {
        auto semi = s.find(';', i);
        if (semi == std::string::npos || semi - i > 8) return "bare & at " + std::to_string(i);
      }
      if (open.empty() && !isspace(static_cast<unsigned char>(s[i]))) return "text outside the root";
      ++i;
      continue;
    }
    if (s.compare(i, 9, "<![CDATA[") == 0) {
      auto e = s.find("]]>", i);
      if (e == std::string::npos) return "unterminated CDATA";
      i = e + 3;
      continue;
    }
    if (s.compare(i, 2, "<?") == 0 || s.compare(i, 4, "<!--") == 0) {
      auto e = s.find(s[i + 1] == '?' ? "?>" : "-->", i);
      if (e == std::string::npos) return "unterminated declaration";
      i = e + 2;
      continue;
    }
    auto e = s.find('>', i);
    if (e == std::string::npos) return "unterminated tag";
    std::string tag = s.substr(i + 1, e - i - 1);
    i = e + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "mismatched </" + tag.substr(1) + ">";
      open.pop_back();
      continue;
    }
    bool self = tag.back() == '/';
    std::string name = tag.substr(0, tag.find_first_of(" \t\n/"));
    // attributes: name="value" pairs
    static const std::regex attrs(R"(^[A-Za-z][\w:-]*(\s+[\w:-]+="[^"<]*")*\s*/?$)");
    if (!std::regex_match(tag, attrs)) return "bad attributes in <" + tag.substr(0, 60) + ">";
    if (open.empty()) ++roots;
    if (!self) open.push_back(name);
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  return roots == 1 ? "" : "expected one root element";
}

std::vector<FoldedLine> folded(const std::string& text) {
  auto r = read_folded(text);
  REQUIRE(r);
  return *r;
}

std::string fill_of(const std::string& svg, const std::string& name) {
  auto p = svg.find("<title>" + name + " (");
  REQUIRE(p != std::string::npos);
  std::smatch m;
  std::string rest = svg.substr(p, 400);
  REQUIRE(std::regex_search(rest, m, std::regex("fill=\"(rgb\\([0-9,]+\\))\"")));
  return m[1];
}

const char kStacks[] =
    "app;main;func_a 300\n"
    "app;main;func_b 100\n"
    "app;main;write;-;ksys_write;pipe_write 20\n"
    "kworker;-;worker_thread;process_one_work 5\n";

}  // namespace

TEST_CASE("--svg flame graph: well-formed, titled frames, script, no network") {
  for (auto palette : {FlamePalette::OnCpu, FlamePalette::OffCpu}) {
    FlameOptions o;
    o.palette = palette;
    o.title = "T <&> \"q\"";
    std::string svg = render_flamegraph(folded(kStacks), o);
    CHECK_MESSAGE(xml_problem(svg) == "", xml_problem(svg));
    for (auto name : {"func_a", "func_b", "main", "pipe_write", "process_one_work"})
      CHECK(svg.find("<title>" + std::string(name) + " (") != std::string::npos);
    CHECK(svg.find("<title>func_a (300 samples, 70.59%)</title>") != std::string::npos);
    // click-to-zoom, reset and search with a match percentage are in the script
    CHECK(svg.find("function zoom(") != std::string::npos);
    CHECK(svg.find("function search(") != std::string::npos);
    CHECK(svg.find("Reset zoom") != std::string::npos);
    CHECK(svg.find("data-match-pct") != std::string::npos);
    // self-contained: the only URL is the SVG namespace name, nothing is fetched
    std::string no_ns = std::regex_replace(svg, std::regex("xmlns=\"http://www.w3.org/2000/svg\""), "");
    CHECK(no_ns.find("http://") == std::string::npos);
    CHECK(no_ns.find("https://") == std::string::npos);
    CHECK(no_ns.find("href") == std::string::npos);
    CHECK(no_ns.find("<script src") == std::string::npos);
    CHECK(no_ns.find("@import") == std::string::npos);
  }
}

TEST_CASE("--svg flame graph: every label fits its frame, the full name stays in the title") {
  // long C++ names in frames from 1200 px down to a few px (issue 21: MariaDB's off-CPU
  // graph had 1,384 of 1,437 labels overflowing)
  std::string text;
  const std::string longname = "std::_Function_handler<void (), Query_cache::invalidate_table(THD*, TABLE*)::{lambda()#1}>::_M_invoke";
  for (int i = 0; i < 40; ++i)
    text += "app;" + longname + std::to_string(i) + ";inner_" + std::to_string(i) + " " + std::to_string(1 + i * i) + "\n";
  FlameOptions o;
  o.min_width_px = 0;  // every frame drawn, the narrowest 0.06 px
  std::string svg = render_flamegraph(folded(text), o);
  CHECK_MESSAGE(xml_problem(svg) == "", xml_problem(svg));
  std::regex frame(R"re(<title>([^<]*)</title><rect x="[^"]*" y="\d+" width="([0-9.]+)"[^>]*/><text[^>]*>([^<]*)</text>)re");
  int frames = 0, cut = 0, empty = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), frame); it != std::sregex_iterator(); ++it) {
    ++frames;
    const std::string title = (*it)[1], label = (*it)[3];
    const double w = std::stod((*it)[2]);
    CHECK_MESSAGE((label.empty() || label.size() * 7.0 + 6 <= w + 1e-9), label << " in " << w << " px");
    if (label.empty()) ++empty;
    else if (label.size() >= 2 && label.compare(label.size() - 2, 2, "..") == 0) {
      ++cut;
      CHECK(title.compare(0, label.size() - 2, label, 0, label.size() - 2) == 0);  // a prefix of the name
    }
  }
  CHECK(frames == 1 + 1 + 80);
  CHECK(cut > 0);
  CHECK(empty > 0);
  // the full name is kept (escaped)
  CHECK(svg.find("invalidate_table(THD*, TABLE*)::{lambda()#1}&gt;::_M_invoke39 (") != std::string::npos);
}

TEST_CASE("--svg flame graph: kernel frames are told apart by colour") {
  FlameOptions on;
  std::string svg = render_flamegraph(folded(kStacks), on);
  // on-CPU: user frames red-yellow with blue <= 55, kernel frames orange-brown (blue 40,
  // green 110-170)
  std::smatch m;
  std::string k = fill_of(svg, "pipe_write");
  REQUIRE(std::regex_match(k, m, std::regex(R"(rgb\((\d+),(\d+),(\d+)\))")));
  CHECK(std::stoi(m[3]) == 40);
  CHECK(std::stoi(m[2]) >= 110);
  FlameOptions off;
  off.palette = FlamePalette::OffCpu;
  std::string osvg = render_flamegraph(folded(kStacks), off);
  std::string ku = fill_of(osvg, "pipe_write"), uu = fill_of(osvg, "func_a");
  REQUIRE(std::regex_match(ku, m, std::regex(R"(rgb\((\d+),(\d+),(\d+)\))")));
  CHECK(std::stoi(m[1]) >= 140);  // purple: red high
  std::smatch mu;
  REQUIRE(std::regex_match(uu, mu, std::regex(R"(rgb\((\d+),(\d+),(\d+)\))")));
  CHECK(std::stoi(mu[1]) < 80);  // blue-aqua: red low
  CHECK(osvg.find("data-k=\"1\"") != std::string::npos);
}

TEST_CASE("flamegraph --diff: widths from after, red where it grew, blue where it shrank") {
  auto before = folded("app;main;func_a 100\napp;main;func_b 300\n");
  auto after = folded("app;main;func_a 300\napp;main;func_b 100\napp;main;func_c 10\n");
  std::string svg = render_flamegraph_diff(before, after, FlameOptions{});
  CHECK_MESSAGE(xml_problem(svg) == "", xml_problem(svg));
  CHECK(svg.find("data-total=\"410\"") != std::string::npos);  // the after profile's total
  std::smatch m;
  std::string a = fill_of(svg, "func_a"), b = fill_of(svg, "func_b"), c = fill_of(svg, "func_c");
  REQUIRE(std::regex_match(a, m, std::regex(R"(rgb\(255,(\d+),(\d+)\))")));  // grew: red
  CHECK(std::stoi(m[1]) < 100);
  CHECK(std::regex_match(b, std::regex(R"(rgb\((\d+),(\d+),255\))")));  // shrank: blue
  CHECK(std::regex_match(c, std::regex(R"(rgb\(255,(\d+),(\d+)\))")));   // new: grew
  // before is scaled to after's total (400 -> 410): main is unchanged within rounding
  CHECK(svg.find("<title>main (410 samples, 100.00%; +0 samples vs before)</title>") != std::string::npos);
  CHECK(svg.find("<title>func_a (300 samples, 73.17%; +198 samples vs before)</title>") != std::string::npos);
}

TEST_CASE("FoldedSet: offcputime's and profile's folding, merged in first-seen order") {
  Stack s;
  s.user = {"func_a", "main"};
  s.kernel = {"schedule", "do_nanosleep"};
  Stack t;
  t.user = {"func_b", "main"};
  t.want_kernel = false;
  FoldedSet set;
  set.add(folded_name("app", 10, 11, false), s, 3000);
  set.add(folded_name("app", 10, 11, true), t, 500);
  set.add(folded_name("app", 10, 12, false), s, 1000);  // same line as the first: merged
  auto lines = set.lines(1000);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "app;main;func_a;-;do_nanosleep;schedule 4");
  CHECK(lines[1] == "app-10/11;main;func_b 0");
  auto st = set.stacks();
  REQUIRE(st.size() == 2);
  CHECK(st[0].frames == std::vector<std::string>{"app", "main", "func_a", "-", "do_nanosleep", "schedule"});
  CHECK(st[0].value == 4000);
  CHECK(parse_folded(lines[0])->frames == st[0].frames);
}

TEST_CASE("merge_identical_stacks: same thread and frames become one entry") {
  struct E {
    uint32_t pid, tid;
    std::string comm;
    Stack stack;
    uint64_t v;
  };
  Stack s;
  s.user = {"f"};
  std::vector<E> es = {{1, 1, "a", s, 2}, {1, 2, "a", s, 3}, {1, 1, "a", s, 5}};
  merge_identical_stacks(es, [](E& into, const E& from) { into.v += from.v; });
  REQUIRE(es.size() == 2);
  CHECK(es[0].v == 7);
  CHECK(es[1].v == 3);
}
