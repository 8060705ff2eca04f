// An option renamed by the suite's vocabulary whose older name stays accepted as a
// hidden alias (runqlen -F/-f, threadpool --map-entries/--max-threads).
#pragma once
#include <string>

#include "common/cli.h"

namespace bpfdiag {

// The value given for `name` or for its older name `old`, nullptr when neither was
// given; both given is a usage error naming `display` (e.g. "-F/--frequency").
Result<const std::string*> opt_str_or_alias(const cxxopts::ParseResult& r, const std::string& name,
                                            const std::string& old, const std::string& display);

}  // namespace bpfdiag
