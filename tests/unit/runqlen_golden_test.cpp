// Whole-report golden files: runqlen's text and NDJSON output from a fixed fixture
// (no BPF), compared with tests/golden/runqlen_*; UPDATE_GOLDEN=1 rewrites them.
#include <doctest/doctest.h>

#include <sstream>

#include "tools/runqlen/runqlen.h"
#include "tests/unit/golden.h"

using namespace runqlen;

using bpfdiag_test::check_golden;

namespace {


// Two CPUs over 1 s at 99 Hz: CPU 0 loaded (queues 1-3), CPU 1 mostly idle.
PerCpu fixture() {
  PerCpu busy;
  busy[0] = {{1, 60}, {2, 30}, {3, 9}};
  busy[1] = {{0, 4}, {1, 1}};
  return weigh(busy, {{0, 0}, {1, 900000000ULL}}, 1000000000ULL, 99);
}

std::string render_with(Config c) {
  bpfdiag::DataQuality dq = empty_quality();
  dq.add("read_errors", 2);
  std::ostringstream os;
  render(os, c, fixture(), dq, bpfdiag::Window{1700000000000000000ULL, 1000000000ULL, true});
  return os.str();
}

}  // namespace

TEST_CASE("runqlen golden: text report, all CPUs and per CPU") {
  Config c;
  check_golden("runqlen_text.txt", render_with(c));
  c.per_cpu = true;
  check_golden("runqlen_cpus.txt", render_with(c));
  c.occupancy = true;
  check_golden("runqlen_runqocc.txt", render_with(c));
}

TEST_CASE("runqlen golden: NDJSON report") {
  Config c;
  c.json = true;
  check_golden("runqlen_all.ndjson", render_with(c));
  c.per_cpu = true;
  c.cfs_only = true;
  check_golden("runqlen_cpus.ndjson", render_with(c));
}
