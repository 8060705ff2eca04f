#include "common/bpf_text.h"

#include <cstring>

#include "common/embedded.h"

namespace bpfdiag {

std::string with_common_header(const std::string& text) {
  static const char kInclude[] = "#include \"common.h\"\n";
  auto at = text.find(kInclude);
  if (at == std::string::npos) return text;
  for (const EmbeddedFile* e = kEmbeddedBpfHeaders; e->name; ++e)
    if (std::strcmp(e->name, "common.h") == 0)
      return text.substr(0, at) + e->text + "\n" + text.substr(at + sizeof kInclude - 1);
  return text;
}

}  // namespace bpfdiag
