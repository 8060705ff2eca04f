// bpfdiag: the suite's one command (see bpfdiag.h and man 8 bpfdiag).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/cli.h"
#include "common/runbook_file.h"
#include "tools/bpfdiag/bpfdiag.h"

using namespace bpfdiag_cmd;

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  auto req = parse_request(args, commands());
  if (!req) {
    std::fprintf(stderr, "bpfdiag: %s (see bpfdiag --help)\n", bpfdiag::one_line(req.error()).c_str());
    return 2;
  }
  if (req->kind == Request::Version) return bpfdiag::print_version("bpfdiag");
  if (req->kind == Request::Help) {
    std::fputs(help_text(commands()).c_str(), stdout);
    return bpfdiag::flush_output("bpfdiag") ? 0 : 1;
  }
  const std::string dir = bpfdiag::self_exe_dir();  // /proc/self/exe, symbolic links resolved
  if (dir.empty()) {
    std::fprintf(stderr, "bpfdiag: cannot find its own directory (/proc/self/exe); is /proc mounted?\n");
    return 1;
  }
  const std::string exe = dir + "/" + req->tool;
  auto fd = bpfdiag::open_trusted(exe);
  if (!fd) {
    std::fprintf(stderr, "bpfdiag: cannot run %s: %s\n", req->tool.c_str(), bpfdiag::one_line(fd.error()).c_str());
    return 1;
  }
  std::vector<std::string> targs = req->args;
  std::vector<char*> av;
  for (auto& a : targs) av.push_back(a.data());
  av.push_back(nullptr);
  fexecve(*fd, av.data(), environ);
  std::fprintf(stderr, "bpfdiag: cannot run %s: %s\n", exe.c_str(), std::strerror(errno));
  return 1;
}
