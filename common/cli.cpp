#include "common/cli.h"

#include "common/proc.h"

namespace bpfdiag {

constexpr uint64_t kMs = 1000000ULL, kSec = 1000000000ULL, kDay = 86400ULL * kSec;

void add_positionals(cxxopts::Options& opts) {
  opts.add_options()("args", "", cxxopts::value<std::vector<std::string>>());
  opts.parse_positional({"args"});
}

Result<cxxopts::ParseResult> parse_cli(cxxopts::Options& opts, int argc, char** argv) {
  try {
    return opts.parse(argc, argv);
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
    if (!pid_exists(p)) return Error{"no process with PID " + std::to_string(p)};
  return std::nullopt;
}

}  // namespace bpfdiag
