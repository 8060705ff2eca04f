// A runbook file's text (common/runbook_file parse_runbook): runbooks come from
// $BPFDIAG_RUNBOOKS too, so the parser meets whatever a user wrote.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/runbook_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = bpfdiag::parse_runbook("fuzz", text);
  if (r) (void)r.value().tools.size();
  return 0;
}
