// Table-driven report columns (perf lock's design): one definition per column
// {name, header, width, value, print} gives text tables, --sort, --fields, --entries,
// CSV and JSON from the same source, so they can never disagree.
//
//   std::vector<Column<Row>> cols = {
//     {"total", "TOTAL", 9, [](const Row& r) { return Cell(r.total_ns); }, fmt_ns_cell},
//     ...};
//   Table<Row> t(cols);
//   if (auto st = t.set_fields("total,max,name")) ...   // errors name the valid fields
//   if (auto st = t.set_sort("max")) ...
//   t.set_entries(10);
//   t.sort(rows); t.print_text(std::cout, rows);  or  t.print_csv(std::cout, rows);
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace bpfdiag {

// A column's raw value: what --sort compares, CSV and JSON print. Numbers sort
// descending (largest first, like perf lock), strings ascending.
using Cell = std::variant<uint64_t, int64_t, double, std::string>;

// Cell helpers shared by every table.
std::string cell_to_string(const Cell& c);  // raw: integers in full, doubles %.3f
nlohmann::json cell_to_json(const Cell& c);
// -1 if a sorts before b under the column's natural order, 1 after, 0 equal.
int cell_compare(const Cell& a, const Cell& b);
// Compact duration for tables: "812ns", "12.3us", "4.56ms", "1.23s", "95.0s" (<= 7 chars).
std::string fmt_ns(uint64_t ns);
// An address as the suite writes it: "0x7f12a0" (lower case, no padding).
inline std::string hex_addr(uint64_t v) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  do {
    out.insert(out.begin(), kDigits[v & 0xf]);
    v >>= 4;
  } while (v);
  return "0x" + out;
}
// RFC 4180 quoting: fields with ',', '"' or a newline are quoted, '"' doubled.
std::string csv_escape(const std::string& s);
// Splits "a,b,,c" into {"a","b","c"}, trimming spaces.
std::vector<std::string> split_list(const std::string& s);

template <typename Row>
struct Column {
  std::string name;    // key used by --sort/--fields, CSV header and JSON
  std::string header;  // text header
  int width;           // text width; negative = left-aligned
  std::function<Cell(const Row&)> value;
  // Text rendering of the cell; empty: cell_to_string(value(row)).
  std::function<std::string(const Row&)> print;
  bool shown_by_default = true;
  // Other names --sort/--fields accept for this column (e.g. "total" for
  // "wait_total_ns"); `name` is the one CSV and JSON use.
  std::vector<std::string> aliases;

  Column(std::string n, std::string h, int w, std::function<Cell(const Row&)> v,
         std::function<std::string(const Row&)> p = {}, bool shown = true,
         std::vector<std::string> a = {})
      : name(std::move(n)), header(std::move(h)), width(w), value(std::move(v)),
        print(std::move(p)), shown_by_default(shown), aliases(std::move(a)) {}
};

// A duration column: the raw nanoseconds for CSV, JSON and --sort, fmt_ns() in text.
//   ns_column<Row>("wait_total_ns", "TOTAL", [](const Row& r) { return r.total_ns; }, true, {"total"})
template <typename Row, typename Get>
Column<Row> ns_column(std::string name, std::string header, Get get, bool shown = true,
                      std::vector<std::string> aliases = {}, int width = 7) {
  return Column<Row>(
      std::move(name), std::move(header), width, [get](const Row& r) { return Cell(uint64_t(get(r))); },
      [get](const Row& r) { return fmt_ns(uint64_t(get(r))); }, shown, std::move(aliases));
}

template <typename Row>
class Table {
 public:
  explicit Table(std::vector<Column<Row>> cols) : cols_(std::move(cols)) {
    for (size_t i = 0; i < cols_.size(); ++i)
      if (cols_[i].shown_by_default) shown_.push_back(i);
  }

  // Comma-separated column names, in display order. Unknown names are an error that
  // lists the valid ones. "+name" entries append to the default set.
  Status set_fields(const std::string& list) {
    auto names = split_list(list);
    if (names.empty()) return Error{"empty field list (valid fields: " + names_list() + ")"};
    std::vector<size_t> out;
    bool append = names[0].size() > 1 && names[0][0] == '+';
    if (append) out = shown_;
    for (auto n : names) {
      if (!n.empty() && n[0] == '+') n = n.substr(1);
      auto i = find(n);
      if (i < 0) return Error{"unknown field '" + n + "' (valid fields: " + names_list() + ")"};
      out.push_back(static_cast<size_t>(i));
    }
    shown_ = out;
    return std::nullopt;
  }

  // Sort key: a column name. Numbers sort largest first, strings A-Z; a leading '-'
  // reverses the order ("-avg": smallest average first).
  Status set_sort(const std::string& key) {
    std::string k = key;
    reverse_ = !k.empty() && k[0] == '-';
    if (reverse_) k = k.substr(1);
    auto i = find(k);
    if (i < 0) return Error{"unknown sort key '" + k + "' (valid keys: " + names_list() + ")"};
    sort_col_ = i;
    return std::nullopt;
  }
  // 0 = no limit.
  void set_entries(size_t n) { entries_ = n; }
  size_t entries() const { return entries_; }
  bool has_column(const std::string& name) const { return find(name) >= 0; }
  std::string names_list() const {
    std::string s;
    for (auto& c : cols_) {
      s += (s.empty() ? "" : ", ") + c.name;
      for (auto& a : c.aliases) s += " (" + a + ")";
    }
    return s;
  }
  const std::vector<Column<Row>>& columns() const { return cols_; }

  // Stable sort by the sort key (ties keep the caller's order).
  void sort(std::vector<Row>& rows) const {
    if (sort_col_ < 0) return;
    const auto& col = cols_[static_cast<size_t>(sort_col_)];
    std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
      int c = cell_compare(col.value(a), col.value(b));
      return reverse_ ? c > 0 : c < 0;
    });
  }

  // Rows shown under --entries.
  size_t shown_rows(const std::vector<Row>& rows) const {
    return entries_ && entries_ < rows.size() ? entries_ : rows.size();
  }

  std::string header_line(const std::string& indent = "") const {
    std::string s = indent;
    for (size_t k = 0; k < shown_.size(); ++k) s += pad(cols_[shown_[k]].header, cols_[shown_[k]].width, k);
    return rtrim(s);
  }
  std::string row_line(const Row& r, const std::string& indent = "") const {
    std::string s = indent;
    for (size_t k = 0; k < shown_.size(); ++k) {
      const auto& c = cols_[shown_[k]];
      s += pad(c.print ? c.print(r) : cell_to_string(c.value(r)), c.width, k);
    }
    return rtrim(s);
  }

  // Header plus the first --entries rows (rows must already be sorted).
  void print_text(std::ostream& os, const std::vector<Row>& rows) const {
    os << header_line() << '\n';
    for (size_t i = 0; i < shown_rows(rows); ++i) os << row_line(rows[i]) << '\n';
  }

  // CSV: a header of column names, then raw values (nanoseconds, not "1.2ms").
  void print_csv(std::ostream& os, const std::vector<Row>& rows) const {
    for (size_t k = 0; k < shown_.size(); ++k) os << (k ? "," : "") << csv_escape(cols_[shown_[k]].name);
    os << '\n';
    for (size_t i = 0; i < shown_rows(rows); ++i) {
      for (size_t k = 0; k < shown_.size(); ++k)
        os << (k ? "," : "") << csv_escape(cell_to_string(cols_[shown_[k]].value(rows[i])));
      os << '\n';
    }
  }

  // Every column (not only the shown ones) as name -> raw value.
  nlohmann::json to_json(const Row& r) const {
    nlohmann::json j = nlohmann::json::object();
    for (auto& c : cols_) j[c.name] = cell_to_json(c.value(r));
    return j;
  }

 private:
  long find(const std::string& name) const {
    for (size_t i = 0; i < cols_.size(); ++i) {
      if (cols_[i].name == name) return static_cast<long>(i);
      for (auto& a : cols_[i].aliases)
        if (a == name) return static_cast<long>(i);
    }
    return -1;
  }
  static std::string pad(const std::string& s, int width, size_t k) {
    std::string sep = k ? " " : "";
    size_t w = static_cast<size_t>(width < 0 ? -width : width);
    if (s.size() >= w) return sep + s;
    std::string fill(w - s.size(), ' ');
    return sep + (width < 0 ? s + fill : fill + s);
  }
  static std::string rtrim(std::string s) {
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
  }

  std::vector<Column<Row>> cols_;
  std::vector<size_t> shown_;
  long sort_col_ = -1;
  bool reverse_ = false;
  size_t entries_ = 0;
};

}  // namespace bpfdiag
