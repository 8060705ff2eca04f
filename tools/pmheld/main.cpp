#include "common/cli.h"
#include "tools/pmheld/pmheld.h"

int main(int argc, char** argv) {
  return bpfdiag::tool_main<pmheld::Config>("pmheld", pmheld::kHelp, argc, argv, pmheld::parse_args,
                                            pmheld::run);
}
