// Whole reports from a fixed model fixture (no BPF), compared with tests/golden/:
// BCC's multi-line text, folded (offcputime's folding) and NDJSON. UPDATE_GOLDEN=1 rewrites.
#include <doctest/doctest.h>

#include <sstream>

#include "tests/unit/golden.h"
#include "tools/profile/profile.h"

using namespace profile;

static Entry entry(uint32_t pid, uint32_t tid, const std::string& comm, uint64_t samples,
                   std::vector<std::string> user, std::vector<std::string> kernel) {
  Entry e;
  e.pid = pid;
  e.tid = tid;
  e.comm = comm;
  e.samples = samples;
  e.stack.user = std::move(user);
  e.stack.kernel = std::move(kernel);
  return e;
}

static Report sample_report() {
  Report r;
  r.freq_hz = 49;
  r.entries.push_back(entry(10, 11, "app", 147, {"func_a", "main"}, {}));
  r.entries.push_back(entry(10, 11, "app", 49, {"func_b", "main"}, {}));
  r.entries.push_back(entry(10, 12, "app", 3, {"write", "logger"}, {"copy_page", "pipe_write", "ksys_write"}));
  r.entries.push_back(entry(20, 20, "kworker/0:1", 2, {}, {"process_one_work", "worker_thread"}));
  Entry missed = entry(10, 11, "app", 1, {}, {"asm_sysvec_apic_timer_interrupt"});
  missed.stack.user_missing = true;
  r.entries.push_back(missed);
  r.dq = bpfdiag::DataQuality::with_keys(dq_keys());
  r.dq.lost_stacks = 1;
  r.dq.add("user_stack_missing", 1);
  r.dq.add("stack_storage_full", 1);
  r.dq.add("idle_samples", 90);
  r.window = bpfdiag::Window{1700000000123456789ULL, 5000000000ULL, true};
  return r;
}

TEST_CASE("profile golden: text report (--delimited)") {
  Config c;
  c.delimiter = true;
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  bpfdiag_test::check_golden("profile_report.txt", os.str());
  CHECK(err.str().empty());
}

TEST_CASE("profile golden: folded (-f), same folding as offcputime") {
  Config c;
  c.folded = true;
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  bpfdiag_test::check_golden("profile_report.folded", os.str());
  CHECK(err.str().rfind("data quality:", 0) == 0);
  // every line parses as "frames value"; the totals are kept
  std::istringstream in(os.str());
  std::string line;
  uint64_t total = 0;
  while (std::getline(in, line)) {
    auto f = bpfdiag::parse_folded(line);
    REQUIRE(f);
    total += f->value;
  }
  CHECK(total == 147 + 49 + 3 + 2 + 1);
}

TEST_CASE("profile golden: NDJSON (-j)") {
  Config c;
  c.json = true;
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  auto start = bpfdiag::make_record("profile", "start", bpfdiag::Window{1700000000000000000ULL, 0, false},
                                    start_fields(c, 2), bpfdiag::DataQuality::with_keys(dq_keys()));
  bpfdiag_test::check_golden("profile_report.ndjson", start.dump() + "\n" + os.str());
}

TEST_CASE("profile: warnings name the option that fixes them") {
  Config c;
  auto w = warnings(c, sample_report().dq);
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("--stack-storage-size 65536") != std::string::npos);
}
