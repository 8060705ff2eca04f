#include "common/cli.h"
#include "tools/lockstat/lockstat.h"

int main(int argc, char** argv) {
  return bpfdiag::tool_main<lockstat::Config>("lockstat", lockstat::help_text(), argc, argv,
                                              lockstat::parse_args, lockstat::run);
}
