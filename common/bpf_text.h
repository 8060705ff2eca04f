// BPF program text as libbcc must see it. libbcc rewrites map calls (map.lookup(...))
// only in the main file: a helper defined in an #included header keeps the raw call
// and fails to load ("unknown opcode 8d"), and a macro is refused ("cannot use map
// function inside a macro"). So the headers that define maps or call them
// (pasted_headers(): common.h, stacks.h, unwind.h, announce.h, ...) are pasted into the program text
// in place of their #include line; every other header stays an #include.
#pragma once
#include <string>
#include <vector>

namespace bpfdiag {

// Names of the bpf_sources headers pasted in place of their #include line.
const std::vector<std::string>& pasted_headers();

// `text` with its `#include "NAME"` line replaced by the embedded header NAME.
std::string with_pasted_header(const std::string& text, const std::string& name);

// `text` with every pasted_headers() #include line replaced by the embedded header.
std::string with_common_header(const std::string& text);

}  // namespace bpfdiag
