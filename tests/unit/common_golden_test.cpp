// The golden-file helper itself, and whole rendered histograms from fixed input
// compared with tests/golden/ (UPDATE_GOLDEN=1 rewrites them).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/histogram.h"
#include "tests/unit/golden.h"

using namespace bpfdiag;
using bpfdiag_test::check_golden;
using bpfdiag_test::golden_diff_file;

TEST_CASE("golden: the comparison finds a changed line, a missing line and a missing file") {
  char path[] = "/tmp/golden-selftest-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream o(path);
    o << "alpha\nbeta\ngamma\n";
  }
  CHECK_FALSE(golden_diff_file(path, "alpha\nbeta\ngamma\n"));
  auto d = golden_diff_file(path, "alpha\nBETA\ngamma\n");
  REQUIRE(d);
  CHECK(d->find(":2 differs") != std::string::npos);
  CHECK(d->find("golden: beta") != std::string::npos);
  CHECK(d->find("actual: BETA") != std::string::npos);
  d = golden_diff_file(path, "alpha\nbeta\n");
  REQUIRE(d);
  CHECK(d->find(":3 differs") != std::string::npos);
  CHECK(d->find("<end of output>") != std::string::npos);
  CHECK(golden_diff_file(path, "alpha\nbeta\ngamma"));  // only the last newline differs
  std::remove(path);
  d = golden_diff_file(path, "x");
  REQUIRE(d);
  CHECK(d->find("missing") != std::string::npos);
}

TEST_CASE("golden: BCC-layout log2 and linear histograms from fixed buckets") {
  std::ostringstream os;
  // slots as bpf_log2l indexes them: slot i holds [2^(i-1), 2^i - 1]
  print_log2_hist(os, {0, 3, 0, 17, 120, 64, 5, 0, 1}, "usecs");
  os << "\n";
  print_linear_hist(os, {{0, 40}, {1, 12}, {2, 3}, {5, 1}}, "queue length");
  check_golden("histogram_bcc.txt", os.str());
}

TEST_CASE("golden: histogram JSON buckets and percentiles from fixed samples") {
  Histogram h;
  for (uint64_t v = 1; v <= 1000; ++v) h.record(v * 1000);  // 1 us .. 1 ms, uniform
  h.record(50000000);                                       // one 50 ms outlier
  std::ostringstream os;
  os << h.to_json().dump() << "\n";
  os << "count " << h.count() << " sum " << h.sum() << " max " << h.max() << "\n";
  for (double p : {50.0, 90.0, 99.0, 99.9})
    os << "p" << p << " " << h.percentile(p) << "\n";
  check_golden("histogram_json.txt", os.str());
}
