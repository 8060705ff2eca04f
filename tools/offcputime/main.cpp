#include "common/cli.h"
#include "common/options.h"
#include "tools/offcputime/offcputime.h"

int main(int argc, char** argv) {
  static const std::string help = bpfdiag::render_help(offcputime::tool_spec());
  return bpfdiag::tool_main<offcputime::Config>("offcputime", help.c_str(), argc, argv, offcputime::parse_args,
                                                offcputime::run);
}
