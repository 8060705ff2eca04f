// BPF-side ID filters passed as cflags: the one way every tool turns -p/-t lists
// into code the verifier sees as constants (no map lookup per event).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace bpfdiag {

// "-DNAME(x)=((x)==1||(x)==2)"; with no IDs, "-DNAME(x)=(1)" (everything passes).
// BPF code uses it as `if (!NAME(tgid)) return 0;`.
std::string id_filter_cflag(const std::string& macro, const std::vector<uint32_t>& ids);

}  // namespace bpfdiag
