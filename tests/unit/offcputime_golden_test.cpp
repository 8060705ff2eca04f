// Whole reports from a fixed model fixture (no BPF), compared with tests/golden/:
// BCC's multi-line text (with -d), folded (-f -P) and NDJSON. UPDATE_GOLDEN=1 rewrites.
#include <doctest/doctest.h>

#include <sstream>

#include "tests/unit/golden.h"
#include "tools/offcputime/offcputime.h"

using namespace offcputime;

static Entry entry(uint32_t pid, uint32_t tid, const std::string& comm, uint64_t ns, uint64_t count,
                   std::vector<std::string> user, std::vector<std::string> kernel) {
  Entry e;
  e.pid = pid;
  e.tid = tid;
  e.comm = comm;
  e.total_ns = ns;
  e.count = count;
  e.max_ns = ns / count;
  e.stack.user = std::move(user);
  e.stack.kernel = std::move(kernel);
  return e;
}

// Also used by offcputime_test.cpp.
Report sample_report() {
  Report r;
  r.entries.push_back(entry(10, 11, "app", 5000000, 2, {"read", "reader"}, {"schedule", "anon_pipe_read"}));
  r.entries.push_back(entry(10, 12, "app", 3000000, 2, {"read", "reader"}, {"schedule", "anon_pipe_read"}));
  r.entries.push_back(entry(10, 13, "app", 1500, 1, {"nanosleep", "sleeper"}, {"schedule", "do_nanosleep"}));
  Entry missed = entry(10, 13, "app", 700000, 1, {}, {"schedule", "futex_wait"});
  missed.stack.user_missing = true;
  r.entries.push_back(missed);
  classify_waits(r.entries);  // as run() does before rendering
  r.dq = bpfdiag::DataQuality::with_keys(dq_keys());
  r.dq.lost_stacks = 3;
  r.dq.add("overflow_stacks", 2);
  r.window = bpfdiag::Window{1700000000123456789ULL, 1000000000, true};
  return r;
}

TEST_CASE("offcputime golden: text report (-d)") {
  Config c;
  c.delimiter = true;
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  bpfdiag_test::check_golden("offcputime_report.txt", os.str());
  CHECK(err.str().empty());
}

TEST_CASE("offcputime golden: folded (-f -P)") {
  Config c;
  c.folded = true;
  c.per_thread = true;
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  bpfdiag_test::check_golden("offcputime_report.folded", os.str());
  bpfdiag_test::check_golden("offcputime_report.folded.stderr", err.str());
}

TEST_CASE("offcputime golden: NDJSON (-j)") {
  Config c;
  c.json = true;
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  auto start = bpfdiag::make_record("offcputime", "start", bpfdiag::Window{1700000000000000000ULL, 0, false},
                                    start_fields(c, 3), bpfdiag::DataQuality::with_keys(dq_keys()));
  bpfdiag_test::check_golden("offcputime_report.ndjson", start.dump() + "\n" + os.str());
}
