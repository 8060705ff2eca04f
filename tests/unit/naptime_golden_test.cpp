// Whole reports from fixed sleeps (no BPF), compared with tests/golden/: the per-sleep
// text lines, the --summary tables and histogram, and NDJSON. UPDATE_GOLDEN=1 rewrites.
#include <doctest/doctest.h>

#include <cstdlib>
#include <ctime>
#include <sstream>

#include "tests/unit/golden.h"
#include "tools/naptime/naptime.h"

using namespace naptime;

namespace {

// Sleeps of two processes: plain, absolute with EINTR, restarted, unknown request.
std::vector<Sleep> fixture() {
  setenv("TZ", "UTC", 1);  // TIME is local time
  tzset();
  const uint64_t t0 = 1700000000000000000ULL;
  auto sleep = [&](uint32_t pid, const char* comm, uint64_t at_ms, std::optional<uint64_t> req, uint64_t slept) {
    Sleep s;
    s.time_ns = t0 + at_ms * 1000000ULL;
    s.pid = pid;
    s.tid = pid + 1;
    s.ppid = 1;
    s.comm = comm;
    s.pcomm = "systemd";
    s.syscall = "clock_nanosleep";
    s.clock = NAPTIME_CLOCK_REALTIME;
    s.requested_ns = req;
    s.slept_ns = slept;
    return s;
  };
  std::vector<Sleep> v;
  v.push_back(sleep(1975, "iscsid", 0, 1000000000ULL, 1000061234ULL));
  Sleep intr = sleep(1975, "iscsid", 1500, 2000000000ULL, 400000000ULL);
  intr.abstime = true;
  intr.clock = NAPTIME_CLOCK_MONOTONIC;
  intr.ret = -4;
  intr.kernel_ret = -516;
  intr.interrupted = true;
  v.push_back(intr);
  Sleep restarted = sleep(2201, "poller", 2000, 50000000ULL, 150200000ULL);
  restarted.syscall = "nanosleep";
  restarted.clock = NAPTIME_CLOCK_MONOTONIC;
  restarted.restarted = true;
  v.push_back(restarted);
  Sleep unknown = sleep(2201, "poller", 2100, std::nullopt, 3000ULL);
  unknown.clock = NAPTIME_CLOCK_PROCESS_CPUTIME_ID;
  unknown.abstime = true;
  v.push_back(unknown);
  return v;
}

bpfdiag::DataQuality fixture_dq() {
  auto dq = bpfdiag::DataQuality::with_keys(dq_keys());
  dq.unmatched_begin = 1;
  dq.add("restarted_after_signal", 1);
  return dq;
}

// What run() writes: the header (text), each sleep, then the report.
std::string report(const Config& c) {
  std::ostringstream os;
  auto dq = fixture_dq();
  Summary sum;
  if (c.json)
    os << bpfdiag::make_record("naptime", "start", bpfdiag::Window{1700000000000000000ULL, 0, false},
                               start_fields(c, 8), bpfdiag::DataQuality::with_keys(dq_keys()))
              .dump()
       << "\n";
  if (!c.json && !c.summary) render_header(os);
  for (auto& s : fixture()) {
    sum.add(s);
    if (!c.summary) render_sleep(os, c, s, bpfdiag::DataQuality::with_keys(dq_keys()));
  }
  if (!c.json && !c.summary) os << "\n";
  render_report(os, c, sum, dq, bpfdiag::Window{1700000003000000000ULL, 3000000000ULL, true});
  return os.str();
}

}  // namespace

TEST_CASE("naptime golden: a line per sleep") {
  bpfdiag_test::check_golden("naptime_sleeps.txt", report(Config{}));
}

TEST_CASE("naptime golden: --summary tables and histogram") {
  Config c;
  c.summary = true;
  bpfdiag_test::check_golden("naptime_summary.txt", report(c));
}

TEST_CASE("naptime golden: NDJSON") {
  Config c;
  c.json = true;
  bpfdiag_test::check_golden("naptime_report.ndjson", report(c));
}
