#include "common/cli.h"
#include "tools/doctor/doctor.h"

int main(int argc, char** argv) {
  return bpfdiag::tool_main<doctor::Config>("doctor", doctor::help_text(), argc, argv,
                                             doctor::parse_args, doctor::run);
}
