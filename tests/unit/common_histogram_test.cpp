#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "common/histogram.h"
extern "C" {
#include "hist.h"
}

using namespace bpfdiag;

TEST_CASE("log2 slot matches libbcc's bpf_log2l convention") {
  CHECK(hist_log2_slot(0) == 1);
  CHECK(hist_log2_slot(1) == 1);
  CHECK(hist_log2_slot(2) == 2);
  CHECK(hist_log2_slot(3) == 2);
  CHECK(hist_log2_slot(4) == 3);
  CHECK(hist_log2_slot(1023) == 10);
  CHECK(hist_log2_slot(1024) == 11);
  CHECK(hist_log2_slot(UINT64_MAX) == 64);
}

TEST_CASE("fine buckets contain their values and nest in log2 slots") {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200000; ++i) {
    uint64_t v = rng() >> (rng() % 64);
    unsigned idx = hist_fine_index(v);
    REQUIRE(idx < HIST_FINE_BUCKETS);
    auto r = fine_bucket_range(idx);
    REQUIRE(r.lo <= v);
    REQUIRE(v <= r.hi);
    REQUIRE(hist_log2_slot(r.lo) == hist_log2_slot(r.hi));
    if (v >= HIST_SUB) REQUIRE((r.hi - r.lo + 1) * HIST_SUB <= r.lo);  // width <= lo/16
  }
  for (uint64_t v = 0; v < 16; ++v) CHECK(hist_fine_index(v) == v);
  CHECK(fine_bucket_range(hist_fine_index(UINT64_MAX)).hi == UINT64_MAX);
}

TEST_CASE("percentile error bound: within 1/16 of the true value") {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(10.0, 1.5);
  std::vector<uint64_t> vals;
  Histogram h;
  for (int i = 0; i < 50000; ++i) {
    uint64_t v = static_cast<uint64_t>(dist(rng)) + 1;
    vals.push_back(v);
    h.record(v);
  }
  std::sort(vals.begin(), vals.end());
  for (double p : {1.0, 50.0, 90.0, 95.0, 99.0, 99.9}) {
    uint64_t truth = vals[static_cast<size_t>(std::ceil(p / 100 * vals.size())) - 1];
    uint64_t est = h.percentile(p);
    CHECK(std::llabs(static_cast<long long>(est) - static_cast<long long>(truth)) <=
          static_cast<long long>(truth / 16 + 1));
  }
  CHECK(h.percentile(100) == vals.back());
  CHECK(h.count() == 50000);
  CHECK(h.max() == vals.back());
}

TEST_CASE("histogram from buckets only estimates sum and max") {
  Histogram h;
  h.add_bucket(hist_fine_index(1000), 10);
  CHECK(h.count() == 10);
  auto r = fine_bucket_range(hist_fine_index(1000));
  CHECK(h.max() == r.hi);
  CHECK(h.sum() >= 10 * r.lo);
  CHECK(h.sum() <= 10 * r.hi);
  h.set_exact_sum(12345);
  CHECK(h.sum() == 12345);
  CHECK(h.mean() == 1234);
  Histogram e;
  CHECK(e.percentile(50) == 0);
  CHECK(e.empty());
}

TEST_CASE("BCC log2 histogram text is byte-identical") {
  // Reference produced by BCC's print_log2_hist for usecs with vals[1..4] = 3,0,10,1
  std::vector<uint64_t> slots = {0, 3, 0, 10, 1};
  std::ostringstream os;
  print_log2_hist(os, slots, "usecs");
  CHECK(os.str() ==
        "     usecs               : count     distribution\n"
        "         0 -> 1          : 3        |************                            |\n"
        "         2 -> 3          : 0        |                                        |\n"
        "         4 -> 7          : 10       |****************************************|\n"
        "         8 -> 15         : 1        |****                                    |\n");
  std::ostringstream empty;
  print_log2_hist(empty, {}, "usecs");
  CHECK(empty.str().empty());
}

TEST_CASE("wide log2 histogram switches to BCC's 64-bit layout") {
  std::vector<uint64_t> slots(35, 0);
  slots[34] = 2;
  slots[1] = 1;
  std::ostringstream os;
  print_log2_hist(os, slots, "nsecs");
  std::string s = os.str();
  CHECK(s.rfind("               nsecs                         : count     distribution\n", 0) == 0);
  CHECK(s.find("          8589934592 -> 17179869183          : 2        |********************|\n") !=
        std::string::npos);
}

TEST_CASE("BCC linear histogram text is byte-identical") {
  std::ostringstream os;
  print_linear_hist(os, {{0, 5}, {2, 10}}, "runqlen");
  CHECK(os.str() ==
        "     runqlen       : count     distribution\n"
        "        0          : 5        |********************                    |\n"
        "        1          : 0        |                                        |\n"
        "        2          : 10       |****************************************|\n");
  CHECK(linear_mean({{0, 1}, {2, 1}}) == doctest::Approx(1.0));
  CHECK(linear_percentile({{0, 90}, {5, 10}}, 50) == 0);
  CHECK(linear_percentile({{0, 90}, {5, 10}}, 95) == 5);
}

TEST_CASE("stars follow BCC's rule") {
  CHECK(hist_stars(0, 10, 40) == "");
  CHECK(hist_stars(10, 10, 40) == std::string(40, '*'));
  CHECK(hist_stars(1, 3, 40) == std::string(13, '*'));
  CHECK(hist_stars(11, 10, 40) == std::string(39, '*') + "+");
}

TEST_CASE("histogram JSON buckets are log2 ranges") {
  Histogram h;
  h.record(0);
  h.record(5, 2);
  auto j = h.to_json();
  REQUIRE(j["buckets"].size() == 2);
  CHECK(j["buckets"][0]["min"] == 0);
  CHECK(j["buckets"][0]["max"] == 1);
  CHECK(j["buckets"][1]["min"] == 4);
  CHECK(j["buckets"][1]["max"] == 7);
  CHECK(j["buckets"][1]["count"] == 2);
}

TEST_CASE("merge keeps exact sums exact and estimates estimated") {
  Histogram a, b, est;
  a.record(10);
  b.record(30);
  a.merge(b);
  CHECK(a.sum() == 40);
  CHECK(a.max() == 30);
  est.add_bucket(hist_fine_index(1000), 2);  // only bucket data: sum is an estimate
  Histogram c;
  c.record(10);
  c.merge(est);
  CHECK(c.count() == 3);
  CHECK(c.sum() >= 10 + 2 * fine_bucket_range(hist_fine_index(1000)).lo);
  Histogram empty;
  empty.merge(b);
  CHECK(empty.sum() == 30);
  CHECK(empty.max() == 30);
}

TEST_CASE("log2 histogram reaching slot 64 prints the top range without overflow") {
  std::vector<uint64_t> slots(65, 0);
  slots[64] = 1;
  std::ostringstream os;
  print_log2_hist(os, slots, "ns");
  CHECK(os.str().find("9223372036854775808 -> 18446744073709551615") != std::string::npos);
}
