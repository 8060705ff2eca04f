#include "common/filters.h"

namespace bpfdiag {

// No spaces: libbcc splits cflags on white space, so "(x) == 1" would silently
// become a broken macro (BpfSession::load rejects such flags).
std::string id_filter_cflag(const std::string& macro, const std::vector<uint32_t>& ids) {
  std::string e;
  for (auto id : ids) e += (e.empty() ? "" : "||") + std::string("(x)==") + std::to_string(id);
  return "-D" + macro + "(x)=(" + (e.empty() ? "1" : e) + ")";
}

}  // namespace bpfdiag
