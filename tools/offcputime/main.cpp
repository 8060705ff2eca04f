#include "common/cli.h"
#include "tools/offcputime/offcputime.h"

int main(int argc, char** argv) {
  return bpfdiag::tool_main<offcputime::Config>("offcputime", offcputime::kHelp, argc, argv,
                                                offcputime::parse_args, offcputime::run);
}
