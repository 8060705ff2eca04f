#include "common/cli.h"
#include "common/options.h"
#include "tools/naptime/naptime.h"

int main(int argc, char** argv) {
  static const std::string help = bpfdiag::render_help(naptime::tool_spec());
  return bpfdiag::tool_main<naptime::Config>("naptime", help.c_str(), argc, argv, naptime::parse_args,
                                             naptime::run);
}
