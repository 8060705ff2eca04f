// Folded stacks, flamegraph's input (anyone's file): the line parser (common/stacks
// parse_folded), the bounded stream reader (common/flamegraph read_folded_stream) and,
// for what it accepts, the SVG renderer.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/flamegraph.h"
#include "common/stacks.h"

using namespace bpfdiag;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)parse_folded(text);
  std::istringstream in(text);
  FoldedLimits lim;
  lim.max_bytes = 1 << 16;
  lim.max_line = 512;
  lim.max_frames = 64;
  FoldedReadStats st;
  auto r = read_folded_stream(in, lim, st);
  (void)st.warning(lim);
  if (r && r.value().size() <= 64) (void)render_flamegraph(r.value(), FlameOptions{});
  return 0;
}
