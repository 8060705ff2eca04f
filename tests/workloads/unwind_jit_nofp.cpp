// Built -O2 -fomit-frame-pointer (issue 11): a thread blocks in read() through a frame
// of "JIT" code, a stub generated at run time into an anonymous executable mapping
// (no file, no CFI), as a JVM's or V8's compiled code sits between native frames:
//   uw_jit  jit_loop -> jit_stage -> [stub: push rbp; mov rbp,rsp; call rdi]
//           -> block_in_jit_read -> read()
// The stub keeps a frame pointer, as HotSpot's interpreter and C1 frames do, so an
// unwinder that walks the tables' gaps by frame pointer (perf's way) gets past it;
// one that stops at code without CFI loses jit_stage, jit_loop and the thread start.
// A driver thread writes one byte every pipe_ms.
// Usage: unwind_jit_nofp [reads=6] [pipe_ms=100] [start_delay_ms=0; -1: start on stdin]
// Prints the JSON report described in unwind_truth.h.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "unwind_truth.h"

static int g_pipe[2];
using Blocker = uint64_t (*)();
using Stub = uint64_t (*)(Blocker);
static Stub g_stub;

UW_FN uint64_t block_in_jit_read() {
  uint64_t ns = uw::timed_read(g_pipe[0]);
  UW_KEEP;
  return ns;
}
UW_FN uint64_t jit_stage() {
  uint64_t ns = g_stub(block_in_jit_read);  // through the generated frame
  UW_KEEP;
  return ns;
}
UW_FN void jit_loop(uw::Result* r, int n) {
  for (int i = 0; i < n; ++i) r->blocked_ns += jit_stage(), r->calls++;
  UW_KEEP;
}

// x86-64: push rbp; mov rbp, rsp; call *rdi; pop rbp; ret (rax passes through).
static Stub make_stub() {
  static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::memcpy(p, code, sizeof code);
  if (mprotect(p, 4096, PROT_READ | PROT_EXEC) != 0) return nullptr;
  return reinterpret_cast<Stub>(p);
}

int main(int argc, char** argv) {
  int reads = argc > 1 ? std::atoi(argv[1]) : 6;
  long pipe_ms = argc > 2 ? std::atol(argv[2]) : 100;
  long start_delay = argc > 3 ? std::atol(argv[3]) : 0;
  if (reads < 1 || pipe_ms < 1 || start_delay < -1) {
    std::fprintf(stderr, "usage: unwind_jit_nofp [reads] [pipe_ms] [start_delay_ms]\n");
    return 2;
  }
  g_stub = make_stub();
  if (!g_stub || pipe(g_pipe) != 0) return 1;
  uw::start_gate(start_delay);
  std::vector<uw::Result> res = {{"uw_jit", "block_in_jit_read", {"jit_loop", "jit_stage"}}};
  std::thread tj([&] { uw::name_self(res[0]); jit_loop(&res[0], reads); uw::done(res[0]); });
  std::thread drv([&] {
    pthread_setname_np(pthread_self(), "uw_jit_drv");
    for (int i = 0; i < reads; ++i) {
      uw::sleep_ms(pipe_ms);
      if (write(g_pipe[1], "x", 1) != 1) std::abort();
    }
  });
  tj.join(), drv.join();
  uw::print_report(res);
  return 0;
}
