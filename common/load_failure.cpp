#include "common/load_failure.h"

#include <cctype>
#include <sstream>
#include <vector>

#include "common/bcc_stderr.h"

namespace bpfdiag {

// One line for a program the kernel refused to load, from what libbcc printed while
// loading it (the verifier log, or its E2BIG note): a verifier rejection is named as
// such, with the instructions the verifier processed when the log says.
std::string load_failure_line(const std::string& fn, const std::string& printed, const std::string& bcc) {
  if (printed.find("Argument list too long") != std::string::npos)  // E2BIG: the complexity limit
    return "the kernel verifier rejected " + fn +
           ": over 1000000 instructions processed (its complexity limit; the program is too complex to verify)";
  std::istringstream in(printed);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && !is_libbcc_noise(l)) lines.push_back(first_line(l));
  std::string processed, reason;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("processed ", 0) != 0) continue;
    auto n = lines[i].find(" insns");
    processed = lines[i].substr(10, n == std::string::npos ? std::string::npos : n - 10);
    for (size_t j = i; j-- > 0;) {  // the verifier's message: the last line that is no instruction dump
      const std::string& l = lines[j];
      size_t d = 0;
      while (d < l.size() && std::isdigit(static_cast<unsigned char>(l[d]))) ++d;
      if ((d && d < l.size() && l[d] == ':') || l.rfind("bpf: ", 0) == 0 || l[0] == ';' || l[0] == '\t' ||
          l.rfind("func#", 0) == 0 || l.find("safe") == 0)
        continue;
      reason = l;
      break;
    }
    break;
  }
  if (processed.empty())  // no verifier log: not a verifier rejection we can name
    return "cannot load " + fn + ": " + bcc;
  return "the kernel verifier rejected " + fn + ": " + (reason.empty() ? bcc : reason) + " (processed " + processed +
         " insns)";
}

}  // namespace bpfdiag
