// BPF program text as libbcc must see it. libbcc rewrites map calls (map.lookup(...))
// only in the main file: a helper defined in an #included header keeps the raw call
// and fails to load ("unknown opcode 8d"), and a macro is refused ("cannot use map
// function inside a macro"). So bpf_sources/common.h (dq_count and its map) is pasted
// into the program text in place of its #include line; every other header stays an
// #include.
#pragma once
#include <string>

namespace bpfdiag {

// `text` with its `#include "common.h"` line replaced by the embedded common.h.
std::string with_common_header(const std::string& text);

}  // namespace bpfdiag
