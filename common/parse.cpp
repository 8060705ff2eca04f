#include "common/parse.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_set>

namespace bpfdiag {
namespace {

constexpr uint64_t kPidMax = 4194304;  // PID_MAX_LIMIT on 64-bit kernels

Error range_error(const std::string& what, const std::string& s, const std::string& lo,
                  const std::string& hi) {
  return Error{"invalid " + what + " '" + s + "': must be between " + lo + " and " + hi};
}

}  // namespace

Result<uint64_t> parse_uint(const std::string& s, const std::string& what, uint64_t min,
                            uint64_t max) {
  if (s.empty()) return Error{"invalid " + what + " '': expected a number"};
  for (char c : s)
    if (c < '0' || c > '9')
      return Error{"invalid " + what + " '" + s + "': expected a whole number from " +
                   std::to_string(min) + " to " + std::to_string(max)};
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno == ERANGE || v < min || v > max)
    return range_error(what, s, std::to_string(min), std::to_string(max));
  return static_cast<uint64_t>(v);
}

Result<uint64_t> parse_duration_ns(const std::string& s, const std::string& what,
                                   uint64_t default_unit_ns, uint64_t min_ns, uint64_t max_ns) {
  std::string bad = "invalid " + what + " '" + s + "': expected a duration such as 5, 250ms or 1.5s";
  if (s.empty()) return Error{bad};
  size_t i = 0;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
  std::string num = s.substr(0, i), unit = s.substr(i);
  if (num.empty() || num == "." || num.find('.') != num.rfind('.')) return Error{bad};
  uint64_t scale;
  if (unit.empty()) scale = default_unit_ns;
  else if (unit == "ns") scale = 1;
  else if (unit == "us") scale = 1000;
  else if (unit == "ms") scale = 1000000;
  else if (unit == "s") scale = 1000000000ULL;
  else if (unit == "m") scale = 60ULL * 1000000000ULL;
  else if (unit == "h") scale = 3600ULL * 1000000000ULL;
  else return Error{bad};
  long double v = std::strtold(num.c_str(), nullptr) * static_cast<long double>(scale);
  if (!std::isfinite(v) || v > static_cast<long double>(max_ns) ||
      v < static_cast<long double>(min_ns))
    return range_error(what, s, format_duration(min_ns), format_duration(max_ns));
  return static_cast<uint64_t>(std::llround(v));
}

Result<std::vector<uint32_t>> parse_id_list(const std::string& s, const std::string& what) {
  std::vector<uint32_t> out;
  std::unordered_set<uint32_t> seen;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.size() > 24) item = item.substr(0, 20) + "...";  // keep the message short
    auto v = parse_uint(item, what, 1, kPidMax);
    if (!v) return Error{v.error()};
    if (seen.insert(static_cast<uint32_t>(*v)).second) {
      if (out.size() == kMaxIdList)
        return Error{"too many " + what + "s: more than " + std::to_string(kMaxIdList) + " distinct IDs in the list"};
      out.push_back(static_cast<uint32_t>(*v));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string format_hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string format_duration(uint64_t ns) {
  char buf[64];
  if (ns >= 1000000000ULL && ns % 1000000000ULL == 0)
    std::snprintf(buf, sizeof buf, "%llu s", static_cast<unsigned long long>(ns / 1000000000ULL));
  else if (ns >= 1000000000ULL)
    std::snprintf(buf, sizeof buf, "%.2f s", ns / 1e9);
  else if (ns >= 1000000ULL)
    std::snprintf(buf, sizeof buf, "%.2f ms", ns / 1e6);
  else if (ns >= 1000ULL)
    std::snprintf(buf, sizeof buf, "%.2f us", ns / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%llu ns", static_cast<unsigned long long>(ns));
  std::string r = buf;
  // trim ".00"
  auto dot = r.find(".00 ");
  if (dot != std::string::npos) r.erase(dot, 3);
  return r;
}

}  // namespace bpfdiag
