// declared_waits: software that declares its own waits with USDT probes, as PostgreSQL
// does, but of a design nobody described to the suite: two "gates" (a flag under a
// mutex, waited for on a condition variable) that worker threads take in turn. Each
// wait for a busy gate is bracketed by the probes demo_gate:gate__wait__start(kind)
// and demo_gate:gate__wait__done(kind) (kind 0 "alpha", 1 "beta"), each with a
// semaphore the workload reads first (the probes fire only while a tracer enabled
// them). The SDT notes are written here with the assembler, as <sys/sdt.h> does.
//
// USAGE: declared_waits [--threads N] [--seconds S] [--abandon-every K] [--go-file PATH]
//   --threads N      workers (2-64, default 4)
//   --seconds S      how long the workers run once started (1-60, default 3)
//   --abandon-every K  every K-th contended wait first fires a start probe in a
//                    function that returns without the done probe (a wait left by a
//                    longjmp, as PostgreSQL's errors leave one): not a wait to count
//   --go-file PATH   print "ready <pid>" on stderr, wait until PATH exists, then start
//
// Worker i loops on gate i % 2: take it, hold it (alpha 2 ms, beta 1 ms, sleeping),
// give it back. A gate found free is taken without waiting (no probe), like
// PostgreSQL's uncontended lock.
//
// Output: one JSON line on stdout (durations in ns), the workload's own timing of the
// waits between the probes: {"type":"declared_waits","pid":P,"threads":N,
//  "alpha_waits":n,"alpha_wait_ns":t,"beta_waits":n,"beta_wait_ns":t,
//  "enabled_waits":waits made while the start probe's semaphore was set,
//  "abandoned":start probes left without their done}
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// The semaphores tracers count up (the kernel, given their file offset as
// ref_ctr_offset): in .probes, as sdt.h puts them.
extern "C" {
__attribute__((section(".probes"), used)) volatile unsigned short demo_gate_gate__wait__start_semaphore;
__attribute__((section(".probes"), used)) volatile unsigned short demo_gate_gate__wait__done_semaphore;
}

// One SDT probe with one 4-byte unsigned argument: a nop at the probe point and a
// note naming it, its semaphore and where the argument is ("4@%eax", "4@-20(%rbp)").
#define DEMO_SDT(name, arg)                                                   \
  __asm__ __volatile__(                                                       \
      "990: nop\n"                                                            \
      ".pushsection .note.stapsdt,\"?\",\"note\"\n"                           \
      ".balign 4\n"                                                           \
      ".4byte 992f-991f, 994f-993f, 3\n"                                      \
      "991: .asciz \"stapsdt\"\n"                                             \
      "992: .balign 4\n"                                                      \
      "993: .8byte 990b\n"                                                    \
      ".8byte _.stapsdt.base\n"                                               \
      ".8byte demo_gate_" #name                                               \
      "_semaphore\n"                                                          \
      ".asciz \"demo_gate\"\n"                                                \
      ".asciz \"" #name                                                       \
      "\"\n"                                                                  \
      ".asciz \"4@%0\"\n"                                                     \
      "994: .balign 4\n"                                                      \
      ".popsection\n"                                                         \
      ".ifndef _.stapsdt.base\n"                                              \
      ".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n" \
      ".weak _.stapsdt.base\n"                                                \
      ".hidden _.stapsdt.base\n"                                              \
      "_.stapsdt.base: .space 1\n"                                            \
      ".size _.stapsdt.base, 1\n"                                             \
      ".popsection\n"                                                         \
      ".endif\n" ::"nor"(static_cast<unsigned>(arg)))

namespace {

struct Gate {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  bool busy = false;
  std::atomic<uint64_t> waits{0}, wait_ns{0};
};
Gate gates[2];
std::atomic<uint64_t> enabled_waits{0}, abandoned{0}, contended{0};
long abandon_every = 0;

// A start probe whose wait is left without its done: the frame returns.
__attribute__((noinline)) void left_wait(unsigned kind) {
  DEMO_SDT(gate__wait__start, kind);
  abandoned.fetch_add(1);
  __asm__ __volatile__("" ::: "memory");
}
std::atomic<bool> stop{false};

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

__attribute__((noinline)) void take_gate(unsigned kind) {
  Gate& g = gates[kind];
  pthread_mutex_lock(&g.m);
  if (g.busy) {
    uint64_t t0 = now_ns();
    if (demo_gate_gate__wait__start_semaphore) {
      enabled_waits.fetch_add(1);
      if (abandon_every && contended.fetch_add(1) % uint64_t(abandon_every) == uint64_t(abandon_every) - 1)
        left_wait(kind);
      DEMO_SDT(gate__wait__start, kind);
    }
    while (g.busy) pthread_cond_wait(&g.cv, &g.m);
    if (demo_gate_gate__wait__done_semaphore) DEMO_SDT(gate__wait__done, kind);
    g.wait_ns.fetch_add(now_ns() - t0);
    g.waits.fetch_add(1);
  }
  g.busy = true;
  pthread_mutex_unlock(&g.m);
}

void give_gate(unsigned kind) {
  Gate& g = gates[kind];
  pthread_mutex_lock(&g.m);
  g.busy = false;
  pthread_cond_signal(&g.cv);
  pthread_mutex_unlock(&g.m);
}

void* worker(void* arg) {
  unsigned kind = static_cast<unsigned>(reinterpret_cast<uintptr_t>(arg) % 2);
  while (!stop.load()) {
    take_gate(kind);
    usleep(kind ? 1000 : 2000);
    give_gate(kind);
  }
  return nullptr;
}

long arg_value(const char* s, long lo, long hi, const char* what) {
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (!end || *end || v < lo || v > hi) {
    std::fprintf(stderr, "declared_waits: %s must be %ld-%ld\n", what, lo, hi);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  long threads = 4, seconds = 3;
  std::string go_file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = arg_value(argv[++i], 2, 64, "--threads");
    else if (a == "--seconds" && i + 1 < argc) seconds = arg_value(argv[++i], 1, 60, "--seconds");
    else if (a == "--abandon-every" && i + 1 < argc) abandon_every = arg_value(argv[++i], 1, 1000, "--abandon-every");
    else if (a == "--go-file" && i + 1 < argc) go_file = argv[++i];
    else {
      std::fprintf(stderr, "usage: declared_waits [--threads N] [--seconds S] [--abandon-every K] [--go-file PATH]\n");
      return 2;
    }
  }
  if (!go_file.empty()) {
    std::fprintf(stderr, "ready %d\n", getpid());
    struct stat st;
    while (stat(go_file.c_str(), &st) != 0) usleep(10000);
  }
  std::vector<pthread_t> tids(static_cast<size_t>(threads));
  for (size_t i = 0; i < tids.size(); ++i)
    pthread_create(&tids[i], nullptr, worker, reinterpret_cast<void*>(static_cast<uintptr_t>(i)));
  usleep(static_cast<useconds_t>(seconds) * 1000000);
  stop = true;
  for (auto& t : tids) pthread_join(t, nullptr);
  std::printf(
      "{\"type\":\"declared_waits\",\"pid\":%d,\"threads\":%ld,\"alpha_waits\":%llu,\"alpha_wait_ns\":%llu,"
      "\"beta_waits\":%llu,\"beta_wait_ns\":%llu,\"enabled_waits\":%llu,\"abandoned\":%llu}\n",
      getpid(), threads, (unsigned long long)gates[0].waits.load(), (unsigned long long)gates[0].wait_ns.load(),
      (unsigned long long)gates[1].waits.load(), (unsigned long long)gates[1].wait_ns.load(),
      (unsigned long long)enabled_waits.load(), (unsigned long long)abandoned.load());
  return 0;
}
