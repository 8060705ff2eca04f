// runbook: runs a runbook's tools together and writes a report directory (see
// runbook.h and man 8 runbook).
#include <cstdio>
#include <iostream>
#include <sstream>

#include "common/cli.h"
#include "tools/runbook/runbook.h"

using namespace bpfdiag;
using namespace runbook;

namespace {

int list() {
  std::vector<std::string> bad;
  auto all = list_runbooks(&bad);
  std::vector<RunbookFile> books;
  for (auto& b : all) {  // a runbook whose tools runbook would refuse is listed as refused
    Run probe;
    probe.book = b;
    if (auto st = plan_tools(probe))
      bad.push_back(st->message);
    else
      books.push_back(b);
  }
  for (auto& b : books) {
    std::string tools;
    for (auto& t : b.tools) tools += (tools.empty() ? "" : ", ") + t.name;
    std::printf("%-16s %s\n%-16s   tools: %s\n", b.name.c_str(), b.title.c_str(), "", tools.c_str());
  }
  for (auto& e : bad) std::fprintf(stderr, "runbook: warning: %s\n", e.c_str());
  if (books.empty()) {
    std::fprintf(stderr, "runbook: no runbooks found (looked in $BPFDIAG_RUNBOOKS, %s/../share/bpfdiag/runbooks and\n"
                 "%s/../../share/bpfdiag/runbooks)\n",
                 self_exe_dir().c_str(), self_exe_dir().c_str());
    return 1;
  }
  return flush_output("runbook") ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (version_requested(argc, argv)) return print_version("runbook");
  auto c = parse(argc, argv);
  if (!c) {
    std::fprintf(stderr, "runbook: %s (see runbook --help)\n", one_line(c.error()).c_str());
    return 2;
  }
  if (c->help) {
    std::fputs(render_help(kSpec).c_str(), stdout);
    return flush_output("runbook") ? 0 : 1;
  }
  if (c->list) return list();
  auto book = load_runbook(c->name);
  if (!book) {
    std::fprintf(stderr, "runbook: %s\n", one_line(book.error()).c_str());
    return 2;
  }
  Run run;
  run.cfg = *c;
  run.book = *book;
  run.command.assign(argv, argv + argc);
  if (auto st = plan_tools(run)) {  // FILE:LINE: what is refused
    std::fprintf(stderr, "runbook: %s\n", one_line(st->message, 400).c_str());
    return 2;
  }
  if (auto st = open_report_dir(run)) {
    std::fprintf(stderr, "runbook: %s\n", one_line(st->message).c_str());
    return 2;
  }
  execute(run);
  if (auto st = write_reports(run)) {
    std::fprintf(stderr, "runbook: %s\n", one_line(st->message).c_str());
    return 1;
  }
  // the findings on stdout, as in report.md
  std::istringstream md(run.report_md);
  std::string line;
  bool in = false;
  std::printf("runbook %s: findings\n", run.book.name.c_str());
  while (std::getline(md, line)) {
    if (line == "## Findings") {
      in = true;
      continue;
    }
    if (in && line.rfind("## ", 0) == 0) break;
    if (in && !line.empty()) std::printf("%s\n", line.c_str());
  }
  std::printf("report: %s/report.html (also report.md, run.json)\n", run.dir.c_str());
  return flush_output("runbook") ? 0 : 1;
}
