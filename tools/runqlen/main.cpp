#include "common/cli.h"
#include "tools/runqlen/runqlen.h"

int main(int argc, char** argv) {
  return bpfdiag::tool_main<runqlen::Config>("runqlen", runqlen::help_text(), argc, argv,
                                             runqlen::parse_args, runqlen::run);
}
