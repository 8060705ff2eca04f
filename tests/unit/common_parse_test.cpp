#include <doctest/doctest.h>

#include "common/cli.h"
#include "common/parse.h"

using namespace bpfdiag;

TEST_CASE("parse_uint accepts in-range numbers and rejects junk") {
  CHECK(*parse_uint("0", "n", 0, 10) == 0);
  CHECK(*parse_uint("10", "n", 0, 10) == 10);
  CHECK_FALSE(parse_uint("11", "n", 0, 10).ok());
  CHECK(parse_uint("11", "count", 0, 10).error() == "invalid count '11': must be between 0 and 10");
  CHECK_FALSE(parse_uint("", "n", 0, 10).ok());
  CHECK_FALSE(parse_uint("-1", "n", 0, 10).ok());
  CHECK_FALSE(parse_uint("+1", "n", 0, 10).ok());
  CHECK_FALSE(parse_uint("1x", "n", 0, 10).ok());
  CHECK_FALSE(parse_uint(" 1", "n", 0, 10).ok());
  CHECK_FALSE(parse_uint("99999999999999999999999", "n", 0, UINT64_MAX).ok());  // overflow
  CHECK(*parse_uint("18446744073709551615", "n", 0, UINT64_MAX) == UINT64_MAX);
}

TEST_CASE("parse_duration_ns handles units, default unit and range") {
  const uint64_t s = 1000000000ULL;
  CHECK(*parse_duration_ns("5", "d", s, 1, 100 * s) == 5 * s);
  CHECK(*parse_duration_ns("1.5", "d", s, 1, 100 * s) == 1500000000ULL);
  CHECK(*parse_duration_ns("250ms", "d", s, 1, 100 * s) == 250000000ULL);
  CHECK(*parse_duration_ns("10us", "d", s, 1, 100 * s) == 10000ULL);
  CHECK(*parse_duration_ns("7ns", "d", s, 1, 100 * s) == 7ULL);
  CHECK(*parse_duration_ns("1m", "d", s, 1, 100 * s) == 60 * s);
  CHECK(*parse_duration_ns("10", "min", 1000, 0, s) == 10000ULL);  // default unit us
  CHECK_FALSE(parse_duration_ns("0", "interval", s, 1000000, 100 * s).ok());
  CHECK(parse_duration_ns("0", "interval", s, 1000000, 100 * s).error() ==
        "invalid interval '0': must be between 1 ms and 100 s");
  CHECK_FALSE(parse_duration_ns("-1", "d", s, 0, 100 * s).ok());
  CHECK_FALSE(parse_duration_ns("1.2.3", "d", s, 0, 100 * s).ok());
  CHECK_FALSE(parse_duration_ns("5 s", "d", s, 0, 100 * s).ok());
  CHECK_FALSE(parse_duration_ns("5parsecs", "d", s, 0, 100 * s).ok());
  CHECK_FALSE(parse_duration_ns("", "d", s, 0, 100 * s).ok());
  CHECK_FALSE(parse_duration_ns("1e99", "d", s, 0, 100 * s).ok());
  CHECK_FALSE(parse_duration_ns("99999999999999999999", "d", s, 0, 100 * s).ok());
}

TEST_CASE("parse_id_list") {
  auto r = parse_id_list("1,22,333", "PID");
  REQUIRE(r.ok());
  CHECK(r->size() == 3);
  CHECK((*r)[2] == 333);
  CHECK_FALSE(parse_id_list("1,,2", "PID").ok());
  CHECK_FALSE(parse_id_list("0", "PID").ok());
  CHECK_FALSE(parse_id_list("abc", "PID").ok());
  CHECK_FALSE(parse_id_list("5000000", "PID").ok());
  CHECK_FALSE(parse_id_list("1,", "PID").ok());
}

TEST_CASE("format_duration") {
  CHECK(format_duration(1000000000ULL) == "1 s");
  CHECK(format_duration(1500000000ULL) == "1.50 s");
  CHECK(format_duration(1000000ULL) == "1 ms");
  CHECK(format_duration(250ULL) == "250 ns");
}

TEST_CASE("interval/count and duration positionals") {
  Schedule s;
  CHECK_FALSE(parse_interval_count({"1", "5"}, s).has_value());
  CHECK(*s.interval_ns == 1000000000ULL);
  CHECK(*s.count == 5);
  Schedule t;
  CHECK(parse_interval_count({"0"}, t).has_value());
  CHECK(parse_interval_count({"1", "0"}, t).has_value());
  CHECK(parse_interval_count({"1", "2", "3"}, t).has_value());
  CHECK(parse_interval_count({"x"}, t).has_value());
  Schedule u;
  CHECK_FALSE(parse_interval_count({}, u).has_value());
  CHECK_FALSE(u.interval_ns.has_value());
  Schedule d;
  CHECK_FALSE(parse_duration_positional({"500ms"}, d).has_value());
  CHECK(*d.duration_ns == 500000000ULL);
  CHECK(parse_duration_positional({"1", "2"}, d).has_value());
}

TEST_CASE("parse_cli turns cxxopts exceptions into one-line errors") {
  cxxopts::Options opts("t");
  opts.add_options()("p,pid", "", cxxopts::value<std::string>());
  add_positionals(opts);
  const char* argv1[] = {"t", "--bogus"};
  auto r = parse_cli(opts, 2, const_cast<char**>(argv1));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().find("bogus") != std::string::npos);
  CHECK(r.error().find('\n') == std::string::npos);
  const char* argv2[] = {"t", "-p", "12", "3", "4"};
  auto r2 = parse_cli(opts, 5, const_cast<char**>(argv2));
  REQUIRE(r2.ok());
  CHECK(positionals(*r2).size() == 2);
  CHECK(*opt_str(*r2, "pid") == "12");
}

TEST_CASE("check_pids_exist") {
  CHECK_FALSE(check_pids_exist({1}).has_value());
  CHECK(check_pids_exist({4194303}).has_value());
}
