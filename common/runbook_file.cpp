#include "common/runbook_file.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "common/parse.h"

namespace bpfdiag {

namespace {

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

bool is_dir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Result<std::string> read_small_file(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return Error{"no runbook file " + path};
  if (st.st_size > 65536) return Error{path + ": larger than 64 KiB"};
  std::ifstream in(path);
  if (!in) return Error{"cannot read " + path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

Result<RunbookFile> parse_runbook(const std::string& name, const std::string& text) {
  RunbookFile rb;
  rb.name = name;
  std::istringstream is(text);
  std::string line;
  int n = 0;
  while (std::getline(is, line)) {
    ++n;
    std::string l = trim(line);
    if (l.empty() || l[0] == '#') continue;
    auto colon = l.find(':');
    if (colon == std::string::npos) return Error{"line " + std::to_string(n) + ": expected 'key: value'"};
    std::string key = trim(l.substr(0, colon)), value = trim(l.substr(colon + 1));
    auto at = "line " + std::to_string(n) + ": ";
    if (value.empty()) return Error{at + "empty value for '" + key + "'"};
    if (key == "title") {
      rb.title = value;
    } else if (key == "summary") {
      rb.summary = value;
    } else if (key == "wait") {
      if (value != "window" && value != "exit") return Error{at + "wait is 'window' or 'exit', not '" + value + "'"};
      rb.wait_exit = value == "exit";
    } else if (key == "duration") {
      auto d = parse_duration_ns(value, "duration", 1'000'000'000ULL, 100'000'000ULL, 86400'000'000'000ULL);
      if (!d) return Error{at + d.error()};
      rb.duration_ns = *d;
    } else if (key == "tool") {
      RunbookTool t;
      std::istringstream ws(value);
      ws >> t.name;
      if (!valid_name(t.name)) return Error{at + "tool name '" + t.name + "' (a-z, 0-9, '-', '_')"};
      for (std::string a; ws >> a;) t.args.push_back(a);
      for (auto& a : t.args)
        if (a == "-j" || a == "--json" || a == "-p" || a == "--pid" || a == "-f" || a == "--folded")
          return Error{at + "'" + a + "' is added by runbook itself"};
      rb.tools.push_back(std::move(t));
    } else {
      return Error{at + "unknown key '" + key + "' (title, summary, tool, wait, duration)"};
    }
  }
  if (rb.tools.empty()) return Error{"no 'tool:' line"};
  if (rb.title.empty()) rb.title = name;
  return rb;
}

std::string self_exe_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string p(buf, static_cast<size_t>(n));
  auto slash = p.rfind('/');
  return slash == std::string::npos ? "" : p.substr(0, slash);
}

std::vector<std::string> runbook_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("BPFDIAG_RUNBOOKS")) {
    std::stringstream ss(env);
    for (std::string d; std::getline(ss, d, ':');)
      if (!d.empty() && is_dir(d)) dirs.push_back(d);
  }
  std::string exe = self_exe_dir();
  if (!exe.empty() && is_dir(exe + "/../share/bpfdiag/runbooks")) dirs.push_back(exe + "/../share/bpfdiag/runbooks");
  return dirs;
}

Result<RunbookFile> load_runbook(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    auto text = read_small_file(name);
    if (!text) return Error{text.error()};
    std::string base = name.substr(name.rfind('/') + 1);
    if (base.size() > 8 && base.compare(base.size() - 8, 8, ".runbook") == 0) base.resize(base.size() - 8);
    auto rb = parse_runbook(base, *text);
    if (!rb) return Error{name + ": " + rb.error()};
    RunbookFile f = *rb;
    f.path = name;
    return f;
  }
  if (!valid_name(name)) return Error{"no runbook '" + name + "' (runbook --list names them)"};
  for (auto& d : runbook_dirs()) {
    std::string path = d + "/" + name + ".runbook";
    if (access(path.c_str(), R_OK) != 0) continue;
    return load_runbook(path);
  }
  return Error{"no runbook '" + name + "' (runbook --list names them)"};
}

std::vector<RunbookFile> list_runbooks(std::vector<std::string>* bad) {
  std::map<std::string, RunbookFile> found;
  for (auto& d : runbook_dirs()) {
    DIR* dir = opendir(d.c_str());
    if (!dir) continue;
    std::vector<std::string> names;
    while (dirent* e = readdir(dir)) {
      std::string f = e->d_name;
      if (f.size() > 8 && f.compare(f.size() - 8, 8, ".runbook") == 0) names.push_back(f.substr(0, f.size() - 8));
    }
    closedir(dir);
    for (auto& n : names) {
      if (found.count(n) || !valid_name(n)) continue;
      auto rb = load_runbook(d + "/" + n + ".runbook");
      if (rb)
        found.emplace(n, *rb);
      else if (bad)
        bad->push_back(rb.error());
    }
  }
  std::vector<RunbookFile> out;
  for (auto& [n, rb] : found) out.push_back(rb);
  return out;
}

}  // namespace bpfdiag
