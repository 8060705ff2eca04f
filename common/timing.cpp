#include "common/timing.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace bpfdiag {
namespace {

uint64_t now_ns(clockid_t clk) {
  timespec ts;
  clock_gettime(clk, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

struct Mark {
  std::string name;
  uint64_t ns;
};

struct Timing {
  bool on = std::getenv("BPFDIAG_TIMING") != nullptr;
  // static initialisation: after the dynamic loader has mapped and relocated libbcc
  uint64_t init_ns = now_ns(CLOCK_MONOTONIC);
  std::vector<Mark> marks;
};

Timing& timing() {
  static Timing t;
  return t;
}

// Process start (exec) on the CLOCK_BOOTTIME scale, from /proc/self/stat: clock ticks,
// so only to 1/CLK_TCK s (10 ms) precision.
double exec_to_init_ms(const Timing& t) {
  std::ifstream f("/proc/self/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto close = s.rfind(')');
  if (close == std::string::npos) return -1;
  unsigned long long start = 0;
  // fields after "comm)": state is field 3; starttime is field 22
  const char* p = s.c_str() + close + 2;
  for (int field = 3; field < 22 && *p; ++p)
    if (*p == ' ') ++field;
  if (std::sscanf(p, "%llu", &start) != 1) return -1;
  double start_ms = 1000.0 * static_cast<double>(start) / static_cast<double>(sysconf(_SC_CLK_TCK));
  double boot_now_ms = static_cast<double>(now_ns(CLOCK_BOOTTIME)) / 1e6;
  double since_init_ms = static_cast<double>(now_ns(CLOCK_MONOTONIC) - t.init_ns) / 1e6;
  return boot_now_ms - since_init_ms - start_ms;
}

// Taken while the program's static objects are constructed.
const bool g_started = (timing(), true);

}  // namespace

bool timing_on() { return timing().on; }

void timing_mark(const std::string& name) {
  Timing& t = timing();
  if (t.on) t.marks.push_back({name, now_ns(CLOCK_MONOTONIC)});
}

void timing_mark_at(const std::string& name, uint64_t monotonic_ns) {
  Timing& t = timing();
  if (t.on && monotonic_ns) t.marks.push_back({name, monotonic_ns});
}

void timing_report() {
  Timing& t = timing();
  if (!t.on) return;
  (void)g_started;
  std::fprintf(stderr, "bpfdiag-timing: %-26s %7.1f ms (clock-tick precision)\n", "exec..static-init",
               exec_to_init_ms(t));
  uint64_t prev = t.init_ns;
  for (const auto& m : t.marks) {
    std::fprintf(stderr, "bpfdiag-timing: %-26s %7.1f ms  (at %7.1f ms)\n", m.name.c_str(),
                 static_cast<double>(m.ns - prev) / 1e6, static_cast<double>(m.ns - t.init_ns) / 1e6);
    prev = m.ns;
  }
  t.marks.clear();
  std::fflush(stderr);
}

}  // namespace bpfdiag
