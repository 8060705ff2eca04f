// bpfdiag's command line and help (see bpfdiag.h).
#include <cstdio>
#include <sstream>

#include "tools/bpfdiag/bpfdiag.h"

namespace bpfdiag_cmd {

namespace {

const Command* find(const std::vector<Command>& cmds, const std::string& name) {
  for (auto& c : cmds)
    if (c.name == name) return &c;
  return nullptr;
}

std::string names(const std::vector<Command>& cmds) {
  std::string s;
  for (auto& c : cmds) s += (s.empty() ? "" : ", ") + c.name;
  return s;
}

// A name as echoed in an error: printable ASCII only, long ones cut.
std::string echo(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (out.size() >= 60) return out + "...";
    out += (ch >= 0x20 && ch < 0x7f) ? static_cast<char>(ch) : '?';
  }
  return out;
}

}  // namespace

bpfdiag::Result<Request> parse_request(const std::vector<std::string>& argv, const std::vector<Command>& cmds) {
  Request r;
  if (argv.size() < 2) return r;  // no arguments: the list
  const std::string& first = argv[1];
  if (first == "-h" || first == "--help") return r;
  if (first == "--version") {
    if (argv.size() > 2) return bpfdiag::Error{"unexpected argument '" + echo(argv[2]) + "' after --version"};
    r.kind = Request::Version;
    return r;
  }
  if (first == "help") {
    if (argv.size() == 2) return r;
    if (argv.size() > 3) return bpfdiag::Error{"unexpected argument '" + echo(argv[3]) + "' (help takes one NAME)"};
    if (!find(cmds, argv[2]))
      return bpfdiag::Error{"unknown command '" + echo(argv[2]) + "' (commands: " + names(cmds) + ")"};
    r.kind = Request::Run;
    r.tool = argv[2];
    r.args = {argv[2], "--help"};
    return r;
  }
  if (!first.empty() && first[0] == '-')
    return bpfdiag::Error{"unknown option '" + echo(first) + "' (bpfdiag's options come before the command: -h, --version)"};
  if (!find(cmds, first))
    return bpfdiag::Error{"unknown command '" + echo(first) + "' (commands: " + names(cmds) + ")"};
  r.kind = Request::Run;
  r.tool = first;
  r.args.assign(argv.begin() + 1, argv.end());
  return r;
}

std::string help_text(const std::vector<Command>& cmds) {
  std::ostringstream os;
  os << "bpfdiag - run one of the suite's tools: bpfdiag TOOL [its options].\n\n"
        "USAGE: bpfdiag [-h] [--version] COMMAND [ARGS...]\n\n"
        "Runs COMMAND from bpfdiag's own directory (never from PATH) with ARGS,\n"
        "as the same process: its output, exit status and signals are the tool's.\n"
        "Installed, the tools live in /usr/libexec/bpfdiag; offcputime, lockstat,\n"
        "pmheld, naptime, runqlen and threadpool are in /usr/sbin under their own\n"
        "names too. `bpfdiag help COMMAND` is `COMMAND --help`.\n\n"
        "OPTIONS:\n"
        " Output:\n"
        "  -h, --help            show this help (also: bpfdiag help, bpfdiag alone)\n"
        "      --version         print the version and exit\n"
        "\nCOMMANDS:\n";
  size_t w = 0;
  for (auto& c : cmds) w = std::max(w, c.name.size());
  const size_t col = w + 4;  // summaries wrapped at 80 columns, continued at col
  for (auto& c : cmds) {
    std::string line = "  " + c.name + std::string(w + 2 - c.name.size(), ' ');
    std::istringstream words(c.summary);
    bool first = true;
    for (std::string word; words >> word; first = false) {
      if (!first && line.size() + 1 + word.size() > 80) {
        os << line << "\n";
        line = std::string(col - 1, ' ');
      }
      line += (first ? "" : " ") + word;
    }
    os << line << "\n";
  }
  os << "\nEXAMPLES:\n"
        "  bpfdiag runqlen 1 5        # run queue length, 1 s reports, 5 times\n"
        "  bpfdiag offcputime -p 181 -f 5 > off.folded\n"
        "                             # off-CPU stacks of PID 181 for 5 s, folded\n"
        "  bpfdiag runbook slow-service -p 181\n"
        "                             # several tools over one window, one report\n"
        "  bpfdiag doctor             # can this machine be traced?\n"
        "  bpfdiag help lockstat      # lockstat --help\n";
  return os.str();
}

}  // namespace bpfdiag_cmd
