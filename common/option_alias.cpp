#include "common/option_alias.h"

namespace bpfdiag {

Result<const std::string*> opt_str_or_alias(const cxxopts::ParseResult& r, const std::string& name,
                                            const std::string& old, const std::string& display) {
  const std::string* v = opt_str(r, name);
  const std::string* o = opt_str(r, old);
  if (v && o) return Error{"give " + display + " once (" + std::string(old.size() == 1 ? "-" : "--") + old + " is its older name)"};
  return v ? v : o;
}

}  // namespace bpfdiag
