#include <doctest/doctest.h>

#include <sstream>

#include "common/table.h"

using namespace bpfdiag;

namespace {
struct R {
  std::string name;
  uint64_t total;
  double ratio;
};

Table<R> make() {
  return Table<R>({
      {"name", "NAME", -6, [](const R& r) { return Cell(r.name); }},
      {"total", "TOTAL", 7, [](const R& r) { return Cell(r.total); },
       [](const R& r) { return fmt_ns(r.total); }},
      {"ratio", "RATIO", 6, [](const R& r) { return Cell(r.ratio); }, nullptr, false},
  });
}
std::vector<R> rows() { return {{"b", 1500, 0.5}, {"a, x", 2000000, 0.25}, {"c", 10, 2.0}}; }
}  // namespace

TEST_CASE("table: default fields, sort by number descending, text layout") {
  auto t = make();
  auto r = rows();
  REQUIRE(!t.set_sort("total"));
  t.sort(r);
  std::ostringstream os;
  t.print_text(os, r);
  CHECK(os.str() ==
        "NAME     TOTAL\n"
        "a, x    2.00ms\n"
        "b       1.50us\n"
        "c         10ns\n");
}

TEST_CASE("table: strings sort A-Z, '-' reverses, entries limit") {
  auto t = make();
  auto r = rows();
  REQUIRE(!t.set_sort("name"));
  t.sort(r);
  CHECK(r[0].name == "a, x");
  CHECK(r[2].name == "c");
  REQUIRE(!t.set_sort("-total"));
  t.sort(r);
  CHECK(r[0].name == "c");
  t.set_entries(1);
  std::ostringstream os;
  t.print_text(os, r);
  CHECK(os.str() == "NAME     TOTAL\nc         10ns\n");
}

TEST_CASE("table: --fields selects and orders, '+' appends, errors list valid names") {
  auto t = make();
  REQUIRE(!t.set_fields("ratio,name"));
  CHECK(t.header_line() == " RATIO NAME");
  auto t2 = make();
  REQUIRE(!t2.set_fields("+ratio"));
  CHECK(t2.header_line() == "NAME     TOTAL  RATIO");
  auto st = t.set_fields("bogus");
  REQUIRE(st);
  CHECK(st->message == "unknown field 'bogus' (valid fields: name, total, ratio)");
  auto st2 = t.set_sort("nope");
  REQUIRE(st2);
  CHECK(st2->message == "unknown sort key 'nope' (valid keys: name, total, ratio)");
  CHECK(t.set_fields(" , "));
}

TEST_CASE("table: CSV uses names and raw values, quotes per RFC 4180") {
  auto t = make();
  REQUIRE(!t.set_fields("name,total,ratio"));
  std::ostringstream os;
  auto r = rows();
  t.print_csv(os, r);
  CHECK(os.str() ==
        "name,total,ratio\n"
        "b,1500,0.500\n"
        "\"a, x\",2000000,0.250\n"
        "c,10,2.000\n");
  CHECK(csv_escape("say \"hi\"") == "\"say \"\"hi\"\"\"");
}

TEST_CASE("table: JSON has every column with raw types") {
  auto t = make();
  auto j = t.to_json(rows()[0]);
  CHECK(j["name"] == "b");
  CHECK(j["total"] == 1500);
  CHECK(j["ratio"] == 0.5);
}

TEST_CASE("fmt_ns: compact durations") {
  CHECK(fmt_ns(0) == "0ns");
  CHECK(fmt_ns(999) == "999ns");
  CHECK(fmt_ns(1000) == "1.00us");
  CHECK(fmt_ns(12345) == "12.3us");
  CHECK(fmt_ns(999499) == "999us");
  CHECK(fmt_ns(999500) == "1.00ms");
  CHECK(fmt_ns(4560000) == "4.56ms");
  CHECK(fmt_ns(1234567890) == "1.23s");
  CHECK(fmt_ns(95000000000ULL) == "95.0s");
}

TEST_CASE("split_list trims and drops empties") {
  CHECK(split_list(" a, b,,c ") == std::vector<std::string>{"a", "b", "c"});
  CHECK(split_list("").empty());
}
