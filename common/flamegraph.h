// Interactive flame graphs as one self-contained SVG (no network, no external script):
// hover a frame for its name, value and share; click to zoom into it (its ancestors
// stay as full-width context), "Reset zoom" or Escape to go back; "Search" (or Ctrl-F)
// takes a regular expression, highlights the matching frames and shows the share of
// the total they cover. Input is folded stacks ("comm;outer;...;inner value"), as every
// stack tool of the suite prints with -f. Frames after a "-" frame are kernel frames
// (the suite's folded convention) and get a palette of their own; "[unknown]" and
// "[Missed ... Stack]" frames are grey.
#pragma once
#include <cstdint>
#include <istream>
#include <string>
#include <utility>
#include <vector>

#include "common/stacks.h"

namespace bpfdiag {

enum class FlamePalette {
  OnCpu,   // warm (red/orange/yellow), kernel frames in orange-brown
  OffCpu,  // cool (blue/aqua), kernel frames in purple
};

struct FlameOptions {
  std::string title = "Flame Graph";
  std::string subtitle;        // e.g. "offcputime -p 181, 10 s"
  std::string unit = "samples";  // what a value counts: "samples", "us", "ns"
  FlamePalette palette = FlamePalette::OnCpu;
  int width = 1200;          // pixels
  int frame_height = 16;     // pixels
  double min_width_px = 0.1;  // frames narrower than this are left out (counted)
};

// Renders the folded lines. Lines are merged by frame path (same path: values added).
std::string render_flamegraph(const std::vector<FoldedLine>& stacks, const FlameOptions& opts);

// Differential flame graph (flamegraph.pl's difffolded): frames, widths and values
// from `after`; colour from each frame's change against `before`, whose values are
// first scaled to after's total (runs of different lengths compare as shares): red
// where a frame grew, blue where it shrank, white where unchanged, deeper for larger
// changes. Frames only in `before` are not drawn (they have no width in `after`).
std::string render_flamegraph_diff(const std::vector<FoldedLine>& before, const std::vector<FoldedLine>& after,
                                   const FlameOptions& opts);

// --svg FILE of the stack tools: renders `stacks` and writes them to `path` (replacing
// it); an error names the file and the reason.
Status write_flamegraph_svg(const std::string& path, const std::vector<FoldedLine>& stacks,
                            const FlameOptions& opts);

// --svg FILE over a whole run: each report adds its stacks to stacks() (when a file
// was given: enabled()); write() at the end renders them all as one flame graph, the
// summed values divided by `divisor` (offcputime: ns -> us).
//
//   RunFlameGraph flame(c.svg, {"Off-CPU Flame Graph", banner(c), "us", FlamePalette::OffCpu});
//   if (flame.enabled()) add_folded_holds(locks, flame.stacks());   // every report
//   Status st = flame.write();                                      // final report
class RunFlameGraph {
 public:
  RunFlameGraph(std::string path, FlameOptions opts, uint64_t divisor = 1);
  bool enabled() const { return !path_.empty(); }
  // Where each report adds its stacks: the run's, since the last report boundary
  // (SIGUSR1, common/runloop), so the graph covers what the final report covers.
  FoldedSet& stacks();
  // Writes the file (nothing without one); an error names the file and the reason.
  // The subtitle ends with the time the graph covers.
  Status write() const;

 private:
  std::string path_;
  FlameOptions opts_;
  uint64_t divisor_;
  FoldedSet stacks_;
  uint64_t boundaries_ = 0;  // report_boundaries() when stacks_ was started
  uint64_t start_ns_;        // monotonic_ns() then
};

// Reads folded text (one stack per line; blank lines skipped). A malformed line is an
// error naming its line number.
Result<std::vector<FoldedLine>> read_folded(const std::string& text);

// Bounds on folded input from a stream (flamegraph's FILE or stdin: anyone's file).
// The largest folded files seen here: offcputime -f of MariaDB under sysbench for 30 s,
// 23,748 stacks, 9.6 MB, longest line 2.9 KB, deepest stack 127 frames (64 user + 63
// kernel with --unwind=dwarf); perf script | stackcollapse of a JVM: lines up to ~40 KB.
struct FoldedLimits {
  uint64_t max_bytes = 1ULL << 30;  // input read at most (the rest ignored, said so)
  size_t max_line = 1 << 20;        // longer lines are skipped without being held
  size_t max_frames = 4096;         // deeper stacks are skipped
};
struct FoldedReadStats {
  uint64_t lines = 0;           // stacks read
  uint64_t long_lines = 0;      // skipped: over max_line
  uint64_t deep_stacks = 0;     // skipped: over max_frames
  bool cut = false;             // input over max_bytes: the rest was not read
  // "" or one warning sentence naming what was skipped and the limits.
  std::string warning(const FoldedLimits& lim) const;
};
// Reads folded stacks from `in` within `lim`, holding at most one line (<= max_line)
// besides the stacks kept. A malformed line is an error naming its line number.
Result<std::vector<FoldedLine>> read_folded_stream(std::istream& in, const FoldedLimits& lim, FoldedReadStats& st);

}  // namespace bpfdiag
