#include "common/cli.h"
#include "tools/pmheld/pmheld.h"

int main(int argc, char** argv) {
  return bpfdiag::tool_main<pmheld::Config>("pmheld", pmheld::help_text(), argc, argv, pmheld::parse_args,
                                            pmheld::run);
}
