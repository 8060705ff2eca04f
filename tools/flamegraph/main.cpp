// flamegraph: folded stacks (from any stack tool's -f, or perf/bpftrace folded
// output) to an interactive SVG. No BPF: a converter.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/flamegraph.h"
#include "common/options.h"

using namespace bpfdiag;

namespace {

const ToolSpec kSpec{
    "flamegraph",
    "turn folded stacks into an interactive flame graph (SVG).",
    "Reads folded stacks (\"comm;outer;...;inner VALUE\", one per line: what\n"
    "offcputime -f and profile -f print, as do stackcollapse scripts and bpftrace)\n"
    "from FILE or standard input and writes one self-contained SVG: hover for\n"
    "details, click to zoom, Search (or Ctrl-F) highlights a regular expression and\n"
    "shows its share. Frames after a \"-\" frame are kernel frames (own colours).",
    {OptionSpec{"o,output", "FILE", "write the SVG to FILE (default: standard output)"},
     OptionSpec{"title", "TEXT", "title (default: \"Flame Graph\")"},
     OptionSpec{"subtitle", "TEXT", "second line under the title"},
     OptionSpec{"unit", "NAME", "what a value counts (default: samples; offcputime: us)"},
     OptionSpec{"palette", "NAME", "oncpu (warm, default) or offcpu (cool)"},
     OptionSpec{"width", "PX", "image width in pixels (200-10000, default 1200)"},
     OptionSpec{"diff", "BEFORE",
                "differential graph: FILE (after) against BEFORE, both\n"
                "folded; widths from FILE, red where a frame grew, blue\n"
                "where it shrank (BEFORE scaled to FILE's total)"},
     opt::help()},
    "  flamegraph out.folded > out.svg     # on-CPU colours, values as samples\n"
    "  flamegraph --palette offcpu --unit us off.folded -o off.svg\n"
    "                                      # offcputime -f output, times in us\n"
    "  offcputime -f 5 | flamegraph --palette offcpu --unit us > off.svg\n"
    "                                      # straight from a 5 s trace\n"
    "  flamegraph --diff a.folded b.folded > diff.svg\n"
    "                                      # what changed from a to b\n",
    Positional::File};

struct Config {
  bool help = false;
  FlameOptions flame;
  std::string input, output;
  std::string before;  // --diff BEFORE
};

Result<Config> parse(int argc, char** argv) {
  auto r = parse_tool_cli(kSpec, argc, argv);
  if (!r) return Error{r.error()};
  Config c;
  c.help = r->common.help;
  c.input = r->common.file;
  if (auto v = opt_str(r->raw, "output")) c.output = *v;
  if (auto v = opt_str(r->raw, "title")) c.flame.title = *v;
  if (auto v = opt_str(r->raw, "diff")) {
    c.before = *v;
    if (c.input.empty() || c.input == "-") return Error{"--diff BEFORE needs the after FILE too"};
    if (!opt_str(r->raw, "title")) c.flame.title = "Differential Flame Graph";
  }
  if (auto v = opt_str(r->raw, "subtitle")) c.flame.subtitle = *v;
  if (auto v = opt_str(r->raw, "unit")) c.flame.unit = *v;
  if (auto v = opt_str(r->raw, "palette")) {
    if (*v == "oncpu")
      c.flame.palette = FlamePalette::OnCpu;
    else if (*v == "offcpu")
      c.flame.palette = FlamePalette::OffCpu;
    else
      return Error{"unknown palette '" + *v + "' (oncpu, offcpu)"};
  }
  if (auto v = opt_str(r->raw, "width")) {
    auto w = parse_uint(*v, "width", 200, 10000);
    if (!w) return Error{w.error()};
    c.flame.width = static_cast<int>(*w);
  }
  return c;
}

// Folded stacks within the suite's bounds (FoldedLimits); what was skipped gets one
// warning line.
Result<std::vector<FoldedLine>> read_input(const std::string& path) {
  const std::string name = path.empty() || path == "-" ? std::string("stdin") : path;
  FoldedLimits lim;
  FoldedReadStats st;
  Result<std::vector<FoldedLine>> stacks = Error{""};
  if (name == "stdin") {
    stacks = read_folded_stream(std::cin, lim, st);
  } else {
    std::ifstream in(path);
    if (!in) return Error{"cannot read " + path};
    stacks = read_folded_stream(in, lim, st);
  }
  if (!stacks) return Error{name + ": " + stacks.error()};
  auto w = st.warning(lim);
  if (!w.empty()) std::fprintf(stderr, "flamegraph: warning: %s: %s\n", name.c_str(), w.c_str());
  return stacks;
}

Status run(const Config& c) {
  auto stacks = read_input(c.input);
  if (!stacks) return Error{stacks.error()};
  std::string svg;
  if (c.before.empty()) {
    svg = render_flamegraph(*stacks, c.flame);
  } else {
    auto before = read_input(c.before);
    if (!before) return Error{before.error()};
    svg = render_flamegraph_diff(*before, *stacks, c.flame);
  }
  if (c.output.empty()) {
    std::cout << svg;
    return std::nullopt;
  }
  std::ofstream out(c.output, std::ios::trunc);
  out << svg;
  out.flush();
  if (!out) return Error{"cannot write " + c.output};
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  if (version_requested(argc, argv)) return print_version("flamegraph");
  auto c = parse(argc, argv);
  if (!c) {
    std::fprintf(stderr, "flamegraph: %s (see flamegraph --help)\n", one_line(c.error()).c_str());
    return 2;
  }
  if (c->help) {
    std::fputs(render_help(kSpec).c_str(), stdout);
    return flush_output("flamegraph") ? 0 : 1;
  }
  if (auto st = run(*c)) {
    std::fprintf(stderr, "flamegraph: %s\n", one_line(st->message).c_str());
    return 1;
  }
  return flush_output("flamegraph") ? 0 : 1;
}
