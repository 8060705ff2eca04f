#include "common/bpf_text.h"

#include <cstring>

#include "common/embedded.h"

namespace bpfdiag {

const std::vector<std::string>& pasted_headers() {
  static const std::vector<std::string> names = {"common.h", "stacks.h", "unwind.h", "declared.h", "jvm.h", "announce.h"};
  return names;
}

std::string with_pasted_header(const std::string& text, const std::string& name) {
  const std::string include = "#include \"" + name + "\"\n";
  auto at = text.find(include);
  if (at == std::string::npos) return text;
  for (const EmbeddedFile* e = kEmbeddedBpfHeaders; e->name; ++e)
    if (name == e->name) return text.substr(0, at) + e->text + "\n" + text.substr(at + include.size());
  return text;
}

std::string with_common_header(const std::string& text) {
  std::string out = text;
  for (const auto& name : pasted_headers()) out = with_pasted_header(out, name);
  return out;
}

}  // namespace bpfdiag
