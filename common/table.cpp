#include "common/table.h"

#include <cmath>
#include <cstdio>

namespace bpfdiag {

std::string cell_to_string(const Cell& c) {
  if (auto u = std::get_if<uint64_t>(&c)) return std::to_string(*u);
  if (auto i = std::get_if<int64_t>(&c)) return std::to_string(*i);
  if (auto d = std::get_if<double>(&c)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f", *d);
    return buf;
  }
  return std::get<std::string>(c);
}

nlohmann::json cell_to_json(const Cell& c) {
  if (auto u = std::get_if<uint64_t>(&c)) return *u;
  if (auto i = std::get_if<int64_t>(&c)) return *i;
  if (auto d = std::get_if<double>(&c)) return *d;
  return std::get<std::string>(c);
}

namespace {
bool numeric(const Cell& c, long double& out) {
  if (auto u = std::get_if<uint64_t>(&c)) return out = static_cast<long double>(*u), true;
  if (auto i = std::get_if<int64_t>(&c)) return out = static_cast<long double>(*i), true;
  if (auto d = std::get_if<double>(&c)) return out = *d, true;
  return false;
}
}  // namespace

int cell_compare(const Cell& a, const Cell& b) {
  long double x, y;
  bool na = numeric(a, x), nb = numeric(b, y);
  if (na && nb) return x > y ? -1 : x < y ? 1 : 0;  // numbers: largest first
  if (na != nb) return na ? -1 : 1;                 // numbers before strings
  const auto& s = std::get<std::string>(a);
  const auto& t = std::get<std::string>(b);
  return s < t ? -1 : s > t ? 1 : 0;
}

std::string fmt_ns(uint64_t ns) {
  char buf[32];
  auto fmt = [&](double v, const char* unit) {
    // 3 significant digits: 1.23, 12.3, 123
    const char* f = v < 9.995 ? "%.2f%s" : v < 99.95 ? "%.1f%s" : "%.0f%s";
    std::snprintf(buf, sizeof buf, f, v, unit);
  };
  if (ns < 1000) std::snprintf(buf, sizeof buf, "%lluns", static_cast<unsigned long long>(ns));
  else if (ns < 999500ULL) fmt(ns / 1e3, "us");
  else if (ns < 999500000ULL) fmt(ns / 1e6, "ms");
  else fmt(ns / 1e9, "s");
  return buf;
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    size_t a = item.find_first_not_of(' '), b = item.find_last_not_of(' ');
    if (a != std::string::npos) out.push_back(item.substr(a, b - a + 1));
    start = end + 1;
  }
  return out;
}

}  // namespace bpfdiag
