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

// --waker: BCC offwaketime's multi-line layout, folded lines and the waker_* JSON fields.
static Report waker_report() {
  Report r;
  Entry a = entry(10, 11, "A", 4000000, 2, {"waiter_block_fn", "main"}, {"schedule", "futex_wait"});
  a.waker.kind = WakerKind::Task;
  a.waker.pid = 10;
  a.waker.tid = 12;
  a.waker.comm = "B";
  a.waker.stack.kernel = {"try_to_wake_up", "futex_wake", "do_futex"};
  a.waker.stack.user = {"waker_signal_fn", "signaler", "main"};
  r.entries.push_back(a);
  Entry t = entry(10, 13, "C", 3000000, 3, {"timer_sleep_fn", "main"}, {"schedule", "do_nanosleep"});
  t.waker.kind = WakerKind::Interrupt;
  t.waker.stack.kernel = {"try_to_wake_up", "hrtimer_wakeup", "asm_sysvec_apic_timer_interrupt"};
  r.entries.push_back(t);
  Entry p = entry(10, 12, "B", 20000, 1, {"signaler", "main"}, {"schedule", "irqentry_exit_to_user_mode"});
  p.runnable = true;
  p.waker.kind = WakerKind::Preempted;
  r.entries.push_back(p);
  Entry u = entry(10, 11, "A", 5000, 1, {"waiter_block_fn", "main"}, {"schedule", "futex_wait"});
  u.waker.kind = WakerKind::Unseen;
  u.waker.stack.user_missing = false;
  r.entries.push_back(u);
  classify_waits(r.entries);
  r.dq = bpfdiag::DataQuality::with_keys(dq_keys());
  r.dq.add("waker_unseen", 1);
  r.window = bpfdiag::Window{1700000000123456789ULL, 1000000000, true};
  return r;
}

TEST_CASE("offcputime golden: --waker text (-d), folded and NDJSON") {
  Config c;
  c.waker = true;
  c.delimiter = true;
  std::ostringstream os, err;
  render(os, err, c, waker_report());
  bpfdiag_test::check_golden("offcputime_waker.txt", os.str());
  c.delimiter = false;
  c.folded = true;
  std::ostringstream fo, ferr;
  render(fo, ferr, c, waker_report());
  bpfdiag_test::check_golden("offcputime_waker.folded", fo.str());
  c.folded = false;
  c.json = true;
  std::ostringstream jo, jerr;
  render(jo, jerr, c, waker_report());
  bpfdiag_test::check_golden("offcputime_waker.ndjson", jo.str());
}
