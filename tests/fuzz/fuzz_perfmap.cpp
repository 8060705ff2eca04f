// A JIT's /tmp/perf-PID.map, which the traced process writes: every line through the
// symbolizer's parser (common/symbolize.cpp parse_perfmap_line), and the whole file
// through the capped line reader the symbolizer uses (common/untrusted_file).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/symbolize.h"
#include "common/untrusted_file.h"
#include "tests/fuzz/fuzz_input.h"

using namespace bpfdiag;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = bpfdiag_fuzz::untrusted_with(data, size);
  if (!f) return 0;
  size_t parsed = 0;
  // small caps so the long-line path is reached by small inputs
  (void)read_capped_lines(*f, 1 << 16, 256, [&](std::string_view l) {
    if (auto e = parse_perfmap_line(l)) parsed += e->name.size();
  });
  (void)parse_perfmap_line(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
