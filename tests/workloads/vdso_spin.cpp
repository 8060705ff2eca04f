// vdso_spin: one thread reads CLOCK_MONOTONIC in a loop for SECONDS, so most of its
// CPU time is in the vDSO's clock_gettime (ground truth for naming [vdso] frames).
// usage: vdso_spin SECONDS [START_DELAY_MS]
// Prints one JSON line at the end: {"pid":..,"calls":..}
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

extern "C" __attribute__((noinline)) uint64_t spin_on_clock(double seconds) {
  timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t calls = 0;
  do {
    clock_gettime(CLOCK_MONOTONIC, &now);
    ++calls;
  } while (static_cast<double>(now.tv_sec - t0.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec - t0.tv_nsec) <
           seconds);
  return calls;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: vdso_spin SECONDS [START_DELAY_MS]\n");
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  const int delay_ms = argc > 2 ? std::atoi(argv[2]) : 0;
  if (delay_ms > 0) usleep(static_cast<useconds_t>(delay_ms) * 1000);
  const uint64_t calls = spin_on_clock(seconds);
  std::printf("{\"pid\":%d,\"calls\":%llu}\n", getpid(), static_cast<unsigned long long>(calls));
  return 0;
}
