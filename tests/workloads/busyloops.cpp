// busyloops: N threads spinning on the CPU for a fixed time (ground truth for runqlen).
// usage: busyloops THREADS SECONDS [SPIN_US SLEEP_US]
// With SPIN_US and SLEEP_US each thread spins SPIN_US, then sleeps SLEEP_US
// (nanosleep, default timer slack), over and over: short sleepers, which on 6.12+ kernels
// often go to sleep owing CPU time and stay queued, delayed (EEVDF delayed dequeue).
// On exit prints one JSON line: {"pid":..,"threads":N,"seconds":S,"cpus":C,
//  "expected_runq_per_cpu":max(0, N/C - 1)} - the queue each CPU holds when N runnable
// threads share C CPUs evenly.
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: busyloops THREADS SECONDS [SPIN_US SLEEP_US]\n");
    return 2;
  }
  int n = std::atoi(argv[1]);
  double secs = std::atof(argv[2]);
  auto spin = std::chrono::microseconds(argc == 5 ? std::atol(argv[3]) : 0);
  long sleep_us = argc == 5 ? std::atol(argv[4]) : 0;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
  std::atomic<unsigned long> sink{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&] {
      unsigned long x = 0;
      for (auto now = std::chrono::steady_clock::now(); now < end; now = std::chrono::steady_clock::now()) {
        if (sleep_us <= 0) {
          for (int k = 0; k < 10000; ++k) x += k;
          continue;
        }
        for (auto stop = now + spin; std::chrono::steady_clock::now() < stop;) x += 1;
        struct timespec ts = {sleep_us / 1000000, (sleep_us % 1000000) * 1000};
        nanosleep(&ts, nullptr);
      }
      sink += x;
    });
  if (n == 0) std::this_thread::sleep_until(end);
  for (auto& t : ts) t.join();
  double expected = static_cast<double>(n) / cpus - 1.0;
  std::printf("{\"pid\":%d,\"threads\":%d,\"seconds\":%.3f,\"cpus\":%ld,\"expected_runq_per_cpu\":%.3f}\n",
              getpid(), n, secs, cpus, expected < 0 ? 0.0 : expected);
  return sink.load() == 42 ? 1 : 0;
}
