// run_loop schedules: interval/count/duration combinations, how many interval reports
// and exactly one final report, when they happen (never early, late by at most a
// tolerance), stop signals and should_stop. Real clocks, no mocks. "Late" is measured
// net of the time the scheduler kept this thread waiting for a CPU (its run delay in
// /proc/thread-self/schedstat): on a loaded machine a report is late by exactly that,
// which is not the loop's doing; what is left must stay under kLate.
#include <doctest/doctest.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "common/runloop.h"
#include "tests/unit/stopwatch.h"

using namespace bpfdiag;
using bpfdiag_test::run_delay_ns;

namespace {

constexpr uint64_t kMs = 1000000ULL;
constexpr uint64_t kLate = 80 * kMs;  // how late a report may come, run-queue delay aside

uint64_t g_delay_mark = 0;  // run_delay_ns() when the case started (begin_case)

void begin_case() {
  install_stop_handlers();  // a clean state: no stop signal left from another case
  g_delay_mark = run_delay_ns();
}

struct Trace {
  uint64_t start = 0;
  std::vector<uint64_t> ticks;  // interval reports, ns after start
  std::vector<uint64_t> finals;  // final reports, ns after start
  std::vector<int> budgets;      // poll timeouts asked for
  int rc = -1;
};

Trace run(const Schedule& s, bool with_poll = true, std::function<bool()> should_stop = {}) {
  begin_case();
  Trace t;
  RunHooks h;
  if (with_poll) {
    h.poll = [&](int timeout_ms) {
      t.budgets.push_back(timeout_ms);
      // like poll(2): a signal ends the wait early (sleep_for would resume it)
      struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
      if (timeout_ms > 0) nanosleep(&ts, nullptr);
    };
  }
  h.report = [&](bool final) { (final ? t.finals : t.ticks).push_back(monotonic_ns() - t.start); };
  h.should_stop = std::move(should_stop);
  t.start = monotonic_ns();
  t.rc = run_loop(s, h);
  return t;
}

Schedule sched(std::optional<uint64_t> interval_ms, std::optional<uint64_t> count,
               std::optional<uint64_t> duration_ms) {
  Schedule s;
  if (interval_ms) s.interval_ns = *interval_ms * kMs;
  s.count = count;
  if (duration_ms) s.duration_ns = *duration_ms * kMs;
  return s;
}

// `at` happened no earlier than `want` and at most kLate after it, plus the time this
// thread waited for a CPU since the case began.
void check_at(uint64_t at, uint64_t want, const char* what) {
  const uint64_t waited = run_delay_ns() - g_delay_mark;
  INFO(std::string(what) << ": at " << at / 1e6 << " ms, want " << want / 1e6 << " ms, run-queue delay "
                         << waited / 1e6 << " ms");
  CHECK(at >= want);
  CHECK(at <= want + kLate + waited);
}

}  // namespace

TEST_CASE("run_loop: interval and count: count-1 interval reports, the last interval is the final one") {
  for (bool with_poll : {true, false}) {
    Trace t = run(sched(50, 4, std::nullopt), with_poll);
    CHECK(t.rc == 0);
    REQUIRE(t.ticks.size() == 3);
    REQUIRE(t.finals.size() == 1);
    for (size_t i = 0; i < 3; ++i) check_at(t.ticks[i], (i + 1) * 50 * kMs, "interval report");
    check_at(t.finals[0], 200 * kMs, "final report");
  }
}

TEST_CASE("run_loop: count 1 is one final report after one interval") {
  Trace t = run(sched(60, 1, std::nullopt));
  CHECK(t.ticks.empty());
  REQUIRE(t.finals.size() == 1);
  check_at(t.finals[0], 60 * kMs, "final report");
}

TEST_CASE("run_loop: duration only: no interval report, one final at the duration") {
  Trace t = run(sched(std::nullopt, std::nullopt, 150));
  CHECK(t.rc == 0);
  CHECK(t.ticks.empty());
  REQUIRE(t.finals.size() == 1);
  check_at(t.finals[0], 150 * kMs, "final report");
  for (int b : t.budgets) CHECK((b >= 0 && b <= 100));  // polls stay responsive
}

TEST_CASE("run_loop: interval and duration: the duration ends it between ticks") {
  Trace t = run(sched(50, std::nullopt, 175));
  REQUIRE(t.ticks.size() == 3);
  for (size_t i = 0; i < 3; ++i) check_at(t.ticks[i], (i + 1) * 50 * kMs, "interval report");
  REQUIRE(t.finals.size() == 1);
  check_at(t.finals[0], 175 * kMs, "final report at the duration");
}

TEST_CASE("run_loop: interval, count and duration: whichever comes first") {
  Trace by_count = run(sched(40, 3, 1000));
  CHECK(by_count.ticks.size() == 2);
  REQUIRE(by_count.finals.size() == 1);
  check_at(by_count.finals[0], 120 * kMs, "count first");
  Trace by_duration = run(sched(40, 100, 130));
  CHECK(by_duration.ticks.size() == 3);
  REQUIRE(by_duration.finals.size() == 1);
  check_at(by_duration.finals[0], 130 * kMs, "duration first");
}

TEST_CASE("run_loop: ticks keep their phase instead of drifting by the report time") {
  begin_case();
  std::vector<uint64_t> ticks;
  uint64_t start = 0;
  RunHooks h;
  h.report = [&](bool final) {
    if (final) return;
    ticks.push_back(monotonic_ns() - start);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a slow report
  };
  start = monotonic_ns();
  run_loop(sched(50, 6, std::nullopt), h);
  REQUIRE(ticks.size() == 5);
  // tick k is due at k*50 ms from the start, not k*(50+20)
  for (size_t i = 0; i < ticks.size(); ++i) check_at(ticks[i], (i + 1) * 50 * kMs, "phase-locked tick");
}

TEST_CASE("run_loop: should_stop ends the run with one final report and rc 0") {
  int calls = 0;
  Trace t = run(sched(30, std::nullopt, 5000), true, [&] { return ++calls == 5; });
  CHECK(t.rc == 0);
  CHECK(calls == 5);
  REQUIRE(t.finals.size() == 1);
  CHECK(t.finals[0] < 1000 * kMs);
}

TEST_CASE("run_loop: a stop signal ends a long run at once, with one final report") {
  for (int sig : {SIGINT, SIGTERM}) {
    for (bool with_poll : {true, false}) {
      INFO("signal " << sig << (with_poll ? " during poll" : " during the loop's own sleep"));
      const pthread_t main_thread = pthread_self();
      std::atomic<uint64_t> sent_at{0};  // the sender may itself wait for a CPU: time the send
      std::thread killer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(120));
        sent_at = monotonic_ns();
        pthread_kill(main_thread, sig);
      });
      Trace t = run(sched(std::nullopt, std::nullopt, 10000), with_poll);
      killer.join();
      CHECK(t.rc == sig);
      CHECK(t.ticks.empty());
      REQUIRE(t.finals.size() == 1);
      check_at(t.finals[0], sent_at > t.start ? sent_at - t.start : 0, "final report after the signal");
    }
  }
  install_stop_handlers();  // forget the signal
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &dfl, nullptr);
}

TEST_CASE("run_loop: SIGUSR1 is a report boundary: one interval report at once, -c unchanged") {
  const pthread_t main_thread = pthread_self();
  std::atomic<uint64_t> sent_at{0};
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    sent_at = monotonic_ns();
    pthread_kill(main_thread, SIGUSR1);
  });
  Trace t = run(sched(std::nullopt, std::nullopt, 300));
  sender.join();
  CHECK(t.rc == 0);  // not a stop signal
  REQUIRE(t.ticks.size() == 1);
  check_at(t.ticks[0], sent_at > t.start ? sent_at - t.start : 0, "boundary report after the signal");
  REQUIRE(t.finals.size() == 1);
  check_at(t.finals[0], 300 * kMs, "final report at the duration");
  // sent before the loop starts (runbook signals once a tool's start record is out):
  // kept for the loop; ticks still count to -c
  begin_case();
  raise(SIGUSR1);
  int ticks = 0, finals = 0;
  RunHooks h;
  h.report = [&](bool final) { ++(final ? finals : ticks); };
  const uint64_t start = monotonic_ns();
  CHECK(run_loop(sched(40, 3, std::nullopt), h) == 0);
  CHECK(ticks == 3);  // the boundary + 2 interval ticks
  CHECK(finals == 1);
  check_at(monotonic_ns() - start, 120 * kMs, "count 3 still ends after 3 intervals");
}

TEST_CASE("run_loop: interval alone reports until something stops it") {
  begin_case();
  int ticks = 0, finals = 0;
  RunHooks h;
  h.report = [&](bool final) { ++(final ? finals : ticks); };
  h.should_stop = [&] { return ticks == 4; };
  const uint64_t start = monotonic_ns();
  CHECK(run_loop(sched(25, std::nullopt, std::nullopt), h) == 0);
  CHECK(ticks == 4);
  CHECK(finals == 1);
  check_at(monotonic_ns() - start, 100 * kMs, "stopped after the 4th interval");
}

TEST_CASE("banner_until names how the run ends") {
  CHECK(banner_until(sched(std::nullopt, std::nullopt, 5000)) == " for 5 s.");
  CHECK(banner_until(sched(1000, 10, std::nullopt)) == " for 10 intervals.");
  CHECK(banner_until(sched(1000, std::nullopt, std::nullopt)) == "... Hit Ctrl-C to end.");
  CHECK(banner_until(Schedule{}) == "... Hit Ctrl-C to end.");
}
