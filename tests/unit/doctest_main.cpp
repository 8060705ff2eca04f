// doctest's main, plus skips that count: a case that called bpfdiag_test::require_env
// and returned early is listed at the end, and when any was skipped (and none failed)
// the binary exits 77, ctest's SKIP_RETURN_CODE for unit tests, so ctest reports it
// as skipped instead of passed. Under CI=true require_env fails instead (test_env.h).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>

#include "tests/unit/test_env.h"

namespace {

// Knows which case is running, so require_env can name the case it skips.
struct SkipListener : doctest::IReporter {
  explicit SkipListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override { bpfdiag_test::current_case() = tc.m_name; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("bpfdiag_skips", 1, SkipListener);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  int rc = ctx.run();
  if (ctx.shouldExit()) return rc;  // --help, --list-test-cases, ...
  const auto& skipped = bpfdiag_test::skipped_cases();
  if (skipped.empty()) return rc;
  std::cout << "[doctest] " << skipped.size() << " test case(s) skipped:\n";
  for (const auto& s : skipped) std::cout << "[doctest]   " << s << "\n";
  return rc != 0 ? rc : bpfdiag_test::kSkipExitCode;
}
