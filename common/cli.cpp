#include "common/cli.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "common/proc.h"

namespace bpfdiag {

constexpr uint64_t kMs = 1000000ULL, kSec = 1000000000ULL, kDay = 86400ULL * kSec;

void add_positionals(cxxopts::Options& opts) {
  opts.add_options()("args", "", cxxopts::value<std::vector<std::string>>());
  opts.parse_positional({"args"});
}

namespace {

struct OptInfo {
  std::string display;  // "-p/--pid"
  bool takes_value = false;
};

// Every declared option by the name cxxopts reports it under (its first long name, or
// its short one), plus the short options that take a value.
std::map<std::string, OptInfo> option_table(const cxxopts::Options& opts, std::set<char>& short_with_value) {
  std::map<std::string, OptInfo> t;
  for (const auto& g : opts.groups())
    for (const auto& o : opts.group_help(g).options) {
      OptInfo info;
      info.takes_value = !o.is_boolean && !o.has_implicit && !o.is_container;
      std::string key = o.l.empty() ? o.s : o.l.front();
      info.display = o.s.empty() ? "--" + key : "-" + o.s + (o.l.empty() ? "" : "/--" + o.l.front());
      if (info.takes_value && o.s.size() == 1) short_with_value.insert(o.s[0]);
      t[key] = info;
    }
  return t;
}

bool is_alnum(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

// "-p123,456" -> "-p", "123,456" (and "-jp1,2" -> "-jp", "1,2"): cxxopts' own matcher
// takes an attached value only when it is all letters and digits.
void split_attached(const std::string& a, const std::set<char>& with_value, std::vector<std::string>& out) {
  if (a.size() > 2 && a[0] == '-' && a[1] != '-') {
    for (size_t i = 1; i < a.size() && is_alnum(a[i]); ++i)
      if (with_value.count(a[i])) {
        if (i + 1 < a.size()) {
          out.push_back(a.substr(0, i + 1));
          out.push_back(a.substr(i + 1));
          return;
        }
        break;
      }
  }
  out.push_back(a);
}

}  // namespace

std::string one_line(const std::string& msg, size_t max_len) {
  std::string m = msg;
  for (auto& ch : m)
    if (ch == '\n' || ch == '\r') ch = ' ';
  if (m.size() <= max_len) return m;
  const size_t keep = (max_len - 5) / 2;
  return m.substr(0, keep) + " ... " + m.substr(m.size() - keep);
}

Result<cxxopts::ParseResult> parse_cli(cxxopts::Options& opts, int argc, char** argv) {
  std::set<char> short_with_value;
  std::map<std::string, OptInfo> table;
  try {
    table = option_table(opts, short_with_value);
  } catch (const std::exception& e) {
    return Error{std::string("internal error: ") + e.what()};
  }
  std::vector<std::string> args;
  bool options_done = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i] ? argv[i] : "";
    if (a.size() > kMaxArgLength)
      return Error{"argument " + std::to_string(i) + " is too long (" + std::to_string(a.size()) +
                   " characters; at most " + std::to_string(kMaxArgLength) + ")"};
    if (i == 0 || options_done) {
      args.push_back(a);
      continue;
    }
    if (a == "--") options_done = true;
    split_attached(a, short_with_value, args);
  }
  std::vector<const char*> av;
  for (const auto& a : args) av.push_back(a.c_str());
  try {
    auto r = opts.parse(static_cast<int>(av.size()), av.data());
    std::map<std::string, int> seen;
    for (const auto& kv : r.arguments()) {
      auto it = table.find(kv.key());
      if (it == table.end() || !it->second.takes_value) continue;
      if (++seen[kv.key()] == 2)
        return Error{"option " + it->second.display + " given more than once" +
                     (kv.key() == "pid" || kv.key() == "tid" ? "; give one comma-separated list" : "")};
      if (kv.value().empty()) return Error{"option " + it->second.display + " needs a non-empty value"};
    }
    return r;
  } catch (const std::exception& e) {
    std::string m = e.what();
    // cxxopts quotes with typographic quotes; keep messages plain ASCII
    for (const char* q : {"\xe2\x80\x98", "\xe2\x80\x99"})
      for (size_t p; (p = m.find(q)) != std::string::npos;) m.replace(p, 3, "'");
    return Error{m};
  }
}

std::vector<std::string> positionals(const cxxopts::ParseResult& r) {
  return r.count("args") ? r["args"].as<std::vector<std::string>>() : std::vector<std::string>{};
}

Status parse_interval_count(const std::vector<std::string>& pos, Schedule& s) {
  if (pos.size() > 2) return Error{"unexpected argument '" + pos[2] + "'"};
  if (!pos.empty()) {
    auto iv = parse_duration_ns(pos[0], "interval", kSec, kMs, kDay);
    if (!iv) return Error{iv.error()};
    s.interval_ns = *iv;
  }
  if (pos.size() == 2) {
    auto c = parse_uint(pos[1], "count", 1, 1000000000ULL);
    if (!c) return Error{c.error()};
    s.count = *c;
  }
  return std::nullopt;
}

Status parse_duration_positional(const std::vector<std::string>& pos, Schedule& s) {
  if (pos.size() > 1) return Error{"unexpected argument '" + pos[1] + "'"};
  if (!pos.empty()) {
    auto d = parse_duration_ns(pos[0], "duration", kSec, kMs, kDay);
    if (!d) return Error{d.error()};
    s.duration_ns = *d;
  }
  return std::nullopt;
}

Status check_pids_exist(const std::vector<uint32_t>& pids) {
  for (auto p : pids)
    if (proc_running(p)) return std::nullopt;
  if (pids.empty()) return std::nullopt;
  return Error{gone_pids_message(pids)};
}

Status check_targets(const std::vector<uint32_t>& pids, const std::vector<uint32_t>& tids) {
  if (auto st = check_pids_exist(pids)) return st;
  for (auto t : tids) {
    if (!pid_exists(t)) return Error{"no thread with TID " + std::to_string(t)};
    if (pids.empty()) continue;
    bool ok = false;
    for (auto p : pids) ok = ok || is_thread_of(t, p);
    if (!ok) {
      std::string list;
      for (auto p : pids) list += (list.empty() ? "" : ",") + std::to_string(p);
      return Error{"TID " + std::to_string(t) + " is not a thread of PID " + list};
    }
  }
  return std::nullopt;
}

std::string gone_pids_message(const std::vector<uint32_t>& gone) {
  if (gone.size() == 1) return "no process with PID " + std::to_string(gone[0]);
  std::string list;
  for (size_t i = 0; i < gone.size() && i < 8; ++i) list += (i ? ", " : "") + std::to_string(gone[i]);
  if (gone.size() > 8) list += ", ... (" + std::to_string(gone.size()) + " in all)";
  return "no process with any of PIDs " + list;
}

std::vector<uint32_t> drop_gone_pids(std::vector<uint32_t>& pids) {
  std::vector<uint32_t> gone, kept;
  for (auto p : pids) (proc_running(p) ? kept : gone).push_back(p);
  pids = std::move(kept);
  return gone;
}

#ifndef BPFDIAG_VERSION
#error "BPFDIAG_VERSION is set for this file by CMakeLists.txt"
#endif

const char* suite_version() { return BPFDIAG_VERSION; }

bool version_requested(int argc, char** argv) {
  for (int i = 1; i < argc && argv[i]; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return false;
    if (std::strcmp(argv[i], "--version") == 0) return true;
  }
  return false;
}

int print_version(const char* tool) {
  std::printf("%s (bpfdiag) %s\n", tool, suite_version());
  return flush_output(tool) ? 0 : 1;
}

void full_output_buffer() {
  if (!isatty(STDOUT_FILENO)) std::setvbuf(stdout, nullptr, _IOFBF, 1 << 16);
}

bool flush_output(const char* tool) {
  errno = 0;
  std::cout.flush();
  int err = std::fflush(stdout) != 0 ? errno : 0;
  if (!err && !std::ferror(stdout) && std::cout.good()) return true;
  if (!err) {
    // A write failed earlier and stdio dropped what it could not write, with the
    // reason long gone from errno: ask the descriptor once more for it. The output is
    // already incomplete, a stray newline cannot make it worse.
    err = write(STDOUT_FILENO, "\n", 1) < 0 ? errno : EIO;
  }
  std::fprintf(stderr, "%s: cannot write output: %s\n", tool, std::strerror(err));
  return false;
}

}  // namespace bpfdiag
