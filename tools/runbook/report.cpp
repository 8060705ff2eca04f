// report.md, report.html (self-contained: inline CSS, flame graphs inlined as
// data: URLs, no network) and run.json.
#include <sys/utsname.h>

#include <sstream>

#include "tools/runbook/runbook.h"

#ifndef BPFDIAG_VERSION
#define BPFDIAG_VERSION "unknown"
#endif

namespace runbook {
using json = nlohmann::json;
using bpfdiag::Error;
using bpfdiag::Status;

std::string command_line(const std::vector<std::string>& argv);  // report_sections.cpp
std::string status_text(const ToolRun& t);

namespace {

const char kContextTitle[] = "Context (waiting for work, timed sleeps, condition waits: not findings)";

std::string md_cell(std::string s) {
  for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
  return s;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return out;
}

const char kCss[] =
    "body{font-family:system-ui,sans-serif;max-width:1260px;margin:2em auto;padding:0 1em;color:#222}"
    "h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em}"
    "ul.findings{list-style:none;padding-left:0}ul.findings li{margin:.3em 0;padding:.3em .5em;border-radius:4px}"
    "li.problem{background:#fdecea}li.fine{background:#eaf6ec}li.context{background:#f1f1f1}.box{font-family:monospace;margin-right:.5em}"
    ".num{font-weight:bold}.tool{color:#555;font-family:monospace}"
    "table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}"
    "pre{background:#f4f4f4;padding:.6em;overflow-x:auto}iframe{width:100%;height:520px;border:1px solid #ccc}";

}  // namespace

std::string render_markdown(const Report& r) {
  std::ostringstream os;
  os << "# " << r.title << "\n\n## Findings\n\n";
  if (r.findings.empty()) os << "- [x] nothing to report: no tool produced a finding\n";
  if (!r.findings.empty() && !r.ranked_by.empty()) os << r.ranked_by << "\n\n";
  bool context = false;
  for (auto& f : r.findings) {
    if (f.context && !context) os << "\n### " << kContextTitle << "\n\n";
    context = context || f.context;
    os << "- [" << (f.problem ? " " : "x") << "] " << f.text << " — **" << f.number << "** (" << f.tool << ")\n";
  }
  for (auto& s : r.sections) {
    os << "\n## " << s.title << "\n\n";
    for (auto& l : s.lines) os << "- " << l << "\n";
    if (!s.table_head.empty()) {
      os << "\n|";
      for (auto& h : s.table_head) os << " " << md_cell(h) << " |";
      os << "\n|";
      for (size_t i = 0; i < s.table_head.size(); ++i) os << "---|";
      os << "\n";
      for (auto& row : s.table) {
        os << "|";
        for (auto& c : row) os << " " << md_cell(c) << " |";
        os << "\n";
      }
    }
    for (auto& fig : s.figures) {
      os << "\n![" << fig.title << "](" << fig.file << ")\n";
      if (!fig.pprof.empty()) os << "\npprof profile: [" << fig.pprof << "](" << fig.pprof << ") (`go tool pprof -http=: " << fig.pprof << "`)\n";
    }
    if (!s.pre.empty()) os << "\n```sh\n" << s.pre << "```\n";
  }
  return os.str();
}

std::string render_html(const Report& r, int dir_fd) {
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << html_escape(r.title)
     << "</title><style>" << kCss << "</style></head><body>\n<h1>" << html_escape(r.title) << "</h1>\n"
     << "<h2 id=\"findings\">Findings</h2>\n";
  if (!r.findings.empty() && !r.ranked_by.empty()) os << "<p>" << html_escape(r.ranked_by) << "</p>\n";
  os << "<ul class=\"findings\">\n";
  if (r.findings.empty()) os << "<li class=\"fine\">nothing to report: no tool produced a finding</li>\n";
  bool context = false;
  for (auto& f : r.findings) {
    if (f.context && !context)
      os << "</ul>\n<h3 id=\"context\">" << html_escape(kContextTitle) << "</h3>\n<ul class=\"findings\">\n";
    context = context || f.context;
    os << "<li class=\"finding " << (f.context ? "context" : f.problem ? "problem" : "fine") << "\" data-tool=\""
       << html_escape(f.tool)
       << "\"><span class=\"box\">[" << (f.problem ? " " : "x") << "]</span>" << html_escape(f.text)
       << " — <span class=\"num\">" << html_escape(f.number) << "</span> <span class=\"tool\">(" << html_escape(f.tool)
       << ")</span></li>\n";
  }
  os << "</ul>\n";
  for (auto& s : r.sections) {
    os << "<h2>" << html_escape(s.title) << "</h2>\n";
    if (!s.lines.empty()) {
      os << "<ul>\n";
      for (auto& l : s.lines) os << "<li>" << html_escape(l) << "</li>\n";
      os << "</ul>\n";
    }
    if (!s.table_head.empty()) {
      os << "<table><tr>";
      for (auto& h : s.table_head) os << "<th>" << html_escape(h) << "</th>";
      os << "</tr>\n";
      for (auto& row : s.table) {
        os << "<tr>";
        for (auto& c : row) os << "<td>" << html_escape(c) << "</td>";
        os << "</tr>\n";
      }
      os << "</table>\n";
    }
    for (auto& fig : s.figures) {
      std::string svg = read_report_file(dir_fd, fig.file);
      os << "<h3>" << html_escape(fig.title) << " (<a href=\"" << html_escape(fig.file) << "\">" << html_escape(fig.file)
         << "</a>";
      if (!fig.pprof.empty())
        os << ", pprof: <a href=\"" << html_escape(fig.pprof) << "\">" << html_escape(fig.pprof) << "</a>";
      os << ")</h3>\n";
      if (!svg.empty())
        os << "<iframe class=\"flamegraph\" title=\"" << html_escape(fig.title) << "\" src=\"data:image/svg+xml;base64,"
           << base64(svg) << "\"></iframe>\n";
    }
    if (!s.pre.empty()) os << "<pre>" << html_escape(s.pre) << "</pre>\n";
  }
  os << "</body></html>\n";
  return os.str();
}

// The findings as report.md ranks them, for programs that read many reports (a fleet's
// index page).
json findings_json(const Report& rep) {
  json fs = json::array();
  for (auto& f : rep.findings)
    fs.push_back({{"tool", f.tool},
                  {"text", f.text},
                  {"number", f.number},
                  {"problem", f.problem},
                  {"failure", f.failure},
                  {"context", f.context},
                  {"one_off", f.one_off},
                  {"weakened", f.weakened},
                  {"impact_ns", f.impact_ns}});
  return fs;
}

json run_json(const Run& run) {
  utsname u{};
  uname(&u);
  json tools = json::array();
  for (auto& t : run.tools) {
    json dq = nullptr;
    for (auto& r : t.records)
      if (r.contains("data_quality")) dq = r["data_quality"];
    tools.push_back({{"name", t.name},
                     {"command", t.argv},
                     {"found", !t.exe.empty()},
                     {"started", t.started},
                     {"status", status_text(t)},
                     {"exit_code", t.error.empty() ? json(t.exit_code) : json(nullptr)},
                     {"signal", t.exit_signal},
                     {"records", t.records.size()},
                     {"data_quality", dq},
                     {"losses", losses_text(t)},
                     {"error", t.failed() ? json(t.stderr_last_line()) : json(nullptr)},
                     {"files", t.files}});
  }
  return {{"suite", "bpfdiag"},
          {"version", BPFDIAG_VERSION},
          {"runbook", run.book.name},
          {"runbook_file", run.book.path},
          {"command", run.command},
          {"rerun", command_line(run.command)},
          {"kernel", {{"release", u.release}, {"version", u.version}, {"machine", u.machine}}},
          {"host", u.nodename},
          {"options",
           {{"pid", run.cfg.pids},
            {"children", run.cfg.children},
            {"cgroup", cgroup_json(run.cfg.cgroup)},
            {"duration_ns", run.cfg.duration_ns ? run.cfg.duration_ns : run.book.duration_ns},
            {"output", run.dir}}},
          {"start_time", iso_time(run.start_ns)},
          {"window_start_time", iso_time(run.window_start_ns)},
          {"window_end_time", iso_time(run.window_end_ns)},
          {"end_time", iso_time(run.end_ns)},
          {"start_ns", run.start_ns},
          {"window_start_ns", run.window_start_ns},
          {"window_end_ns", run.window_end_ns},
          {"end_ns", run.end_ns},
          {"interrupted", run.interrupted},
          {"attach_timeout", run.attach_timeout},
          {"tools", tools}};
}

Status write_reports(Run& run) {
  write_stacks(run);
  Report rep = build_report(run);
  run.report_md = render_markdown(rep);
  if (auto st = write_report_file(run, "report.md", run.report_md)) return st;
  if (auto st = write_report_file(run, "report.html", render_html(rep, run.dir_fd))) return st;
  json rj = run_json(run);
  rj["findings"] = findings_json(rep);
  rj["ranked_by"] = rep.ranked_by;
  return write_report_file(run, "run.json", rj.dump(2) + "\n");
}

}  // namespace runbook
