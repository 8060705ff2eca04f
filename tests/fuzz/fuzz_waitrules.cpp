// Wait-site rule files (/etc/bpfdiag/wait-sites.d, common/wait_sites): the parser and,
// for what it accepts, classification of frames taken from the same input (patterns
// against hostile names: the glob must stay linear).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/wait_sites.h"

using namespace bpfdiag;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> errors;
  WaitRules r = WaitRules::parse(text, "fuzz", &errors);
  std::vector<std::string> frames;
  size_t b = 0;
  while (b < text.size() && frames.size() < 32) {
    size_t e = text.find('\n', b);
    frames.push_back(text.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  (void)r.classify(frames);
  for (const auto& f : frames) (void)r.is_wrapper(f);
  return 0;
}
