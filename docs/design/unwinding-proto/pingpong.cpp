// pingpong RATE SECONDS: two threads bounce a byte through two pipes, about RATE
// context switches per second (0 = as fast as possible), from named functions three
// calls deep; built -O2 -fomit-frame-pointer like the *_nofp workloads.
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#define FN extern "C" __attribute__((noipa))
#define KEEP asm volatile("" ::: "memory")
static int a2b[2], b2a[2];

FN void pp_wait(int fd) { char c; if (read(fd, &c, 1) != 1) std::exit(1); KEEP; }
FN void pp_send(int fd) { char c = 'x'; if (write(fd, &c, 1) != 1) std::exit(1); KEEP; }
FN void pp_stage(int in, int out, bool first) { if (first) pp_send(out), pp_wait(in); else pp_wait(in), pp_send(out); KEEP; }
FN long pp_loop(int in, int out, bool first, long rate, double secs) {
  timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  long n = 0;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    double el = (now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
    if (el >= secs) break;
    if (first && rate > 0 && n >= el * rate / 2) {  // 2 switches per round trip
      timespec d{0, 200000};
      nanosleep(&d, nullptr);
      continue;
    }
    pp_stage(in, out, first);
    n++;
  }
  if (first) pp_send(out);  // release the peer
  KEEP;
  return n;
}

int main(int argc, char** argv) {
  long rate = argc > 1 ? std::atol(argv[1]) : 10000;
  double secs = argc > 2 ? std::atof(argv[2]) : 5;
  if (pipe(a2b) || pipe(b2a)) return 1;
  long na = 0;
  std::thread b([&] { pp_loop(a2b[0], b2a[1], false, rate, secs + 0.05); });
  na = pp_loop(b2a[0], a2b[1], true, rate, secs);
  b.detach();
  std::printf("{\"pid\":%d,\"round_trips\":%ld,\"seconds\":%.1f}\n", getpid(), na, secs);
  std::fflush(stdout);
  std::_Exit(0);
}
