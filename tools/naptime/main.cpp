#include "common/cli.h"
#include "tools/naptime/naptime.h"

int main(int argc, char** argv) {
  return bpfdiag::tool_main<naptime::Config>("naptime", naptime::kHelp, argc, argv,
                                             naptime::parse_args, naptime::run);
}
