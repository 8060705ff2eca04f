// libunwind_blk.so: a shared library of our own, built -O2 -fomit-frame-pointer and
// stripped after the build (CMakeLists.txt) -- no .symtab, no debug info; only .dynsym
// and .eh_frame are left, as in a distribution library. Used by unwind_solib_nofp.
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#define UBLK_FN extern "C" __attribute__((noipa, visibility("default")))
#define UBLK_KEEP asm volatile("" ::: "memory")

static uint64_t ublk_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// read() one byte from fd; returns the ns spent in read()
UBLK_FN uint64_t ublk_block_in_read(int fd) {
  char c;
  uint64_t t0 = ublk_now();
  if (read(fd, &c, 1) != 1) return 0;
  uint64_t t1 = ublk_now();
  UBLK_KEEP;
  return t1 - t0;
}
UBLK_FN uint64_t ublk_read_stage(int fd) {
  uint64_t ns = ublk_block_in_read(fd);
  UBLK_KEEP;
  return ns;
}

// waits until *gen >= want; returns the ns spent in pthread_cond_wait()
UBLK_FN uint64_t ublk_block_in_cond_wait(pthread_mutex_t* mu, pthread_cond_t* cv, const int* gen, int want) {
  pthread_mutex_lock(mu);
  uint64_t ns = 0;
  while (*(volatile const int*)gen < want) {
    uint64_t t0 = ublk_now();
    pthread_cond_wait(cv, mu);
    ns += ublk_now() - t0;
  }
  pthread_mutex_unlock(mu);
  UBLK_KEEP;
  return ns;
}
UBLK_FN uint64_t ublk_cond_stage(pthread_mutex_t* mu, pthread_cond_t* cv, const int* gen, int want) {
  uint64_t ns = ublk_block_in_cond_wait(mu, cv, gen, want);
  UBLK_KEEP;
  return ns;
}
