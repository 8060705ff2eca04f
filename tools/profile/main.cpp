#include "common/cli.h"
#include "common/options.h"
#include "tools/profile/profile.h"

int main(int argc, char** argv) {
  static const std::string help = bpfdiag::render_help(profile::tool_spec());
  return bpfdiag::tool_main<profile::Config>("profile", help.c_str(), argc, argv, profile::parse_args,
                                             profile::run);
}
