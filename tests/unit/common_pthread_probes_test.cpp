#include <dlfcn.h>
#include <doctest/doctest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/pthread_probes.h"
#include "tests/unit/test_env.h"

using bpfdiag_test::require_env;

using namespace bpfdiag;

TEST_CASE("decode_x86: lengths and register effects of prologue instructions") {
  struct Case {
    std::vector<uint8_t> bytes;
    unsigned len;
    uint16_t writes;
    bool emulated;
  };
  const Case cases[] = {
      {{0x8b, 0x47, 0x10}, 3, 1u << 0, false},                    // mov 0x10(%rdi),%eax
      {{0x89, 0xc2}, 2, 1u << 2, false},                          // mov %eax,%edx
      {{0x81, 0xe2, 0x7f, 0x01, 0x00, 0x00}, 6, 1u << 2, false},  // and $0x17f,%edx
      {{0x83, 0xe0, 0x7c}, 3, 1u << 0, false},                    // and $0x7c,%eax
      {{0x0f, 0x85, 0xac, 0, 0, 0}, 6, 0, true},                  // jne rel32
      {{0x75, 0x10}, 2, 0, true},                                 // jne rel8
      {{0xbe, 0x01, 0, 0, 0}, 5, 1u << 6, false},                 // mov $1,%esi
      {{0xe9, 0xf6, 0xfe, 0xff, 0xff}, 5, 0, true},               // jmp rel32
      {{0x41, 0x56}, 2, kRegRsp, true},                           // push %r14
      {{0x53}, 1, kRegRsp, true},                                 // push %rbx
      {{0x48, 0x89, 0xfb}, 3, 1u << 3, false},                    // mov %rdi,%rbx
      {{0x48, 0x89, 0xf2}, 3, 1u << 2, false},                    // mov %rsi,%rdx
      {{0x31, 0xf6}, 2, 1u << 6, false},                          // xor %esi,%esi
      {{0x83, 0xfe, 0x01}, 3, 0, false},                          // cmp $0x1,%esi
      {{0x64, 0x8b, 0x2c, 0x25, 0xd0, 0x02, 0, 0}, 8, 1u << 5, false},  // mov %fs:0x2d0,%ebp
      {{0x48, 0x81, 0xec, 0x88, 0, 0, 0}, 7, kRegRsp, false},     // sub $0x88,%rsp
      {{0x48, 0x89, 0x44, 0x24, 0x78}, 5, 0, false},              // mov %rax,0x78(%rsp)
      {{0xf3, 0x0f, 0x1e, 0xfa}, 4, 0, false},                    // endbr64
      {{0x8b, 0x05, 1, 2, 3, 4}, 6, 1u << 0, false},              // mov rip-rel,%eax
      {{0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8}, 10, 1u << 0, false}, // movabs
  };
  for (const auto& c : cases) {
    auto d = decode_x86(c.bytes.data(), c.bytes.size());
    CAPTURE(c.bytes[0]);
    CHECK(d.ok);
    CHECK(d.len == c.len);
    CHECK(d.writes == c.writes);
    CHECK(d.emulated == c.emulated);
  }
  // unknown or truncated instructions stop the walk
  const uint8_t syscall_insn[] = {0x0f, 0x05};
  CHECK_FALSE(decode_x86(syscall_insn, 2).ok);
  const uint8_t truncated[] = {0xe9, 0x00};
  CHECK_FALSE(decode_x86(truncated, 2).ok);
  const uint8_t push_with_opsize[] = {0x66, 0x50};
  CHECK_FALSE(decode_x86(push_with_opsize, 2).emulated);
}

TEST_CASE("cheap_probe_offset: glibc 2.36 prologues") {
  // pthread_mutex_lock: mov/mov/and/and then jne at +0xe; rdi untouched, no stack change
  const uint8_t lock[] = {0x8b, 0x47, 0x10, 0x89, 0xc2, 0x81, 0xe2, 0x7f, 0x01, 0x00, 0x00,
                          0x83, 0xe0, 0x7c, 0x0f, 0x85, 0xac, 0x00, 0x00, 0x00, 0x53};
  CHECK(cheap_probe_offset(lock, sizeof lock, kRegRdi, true) == 0xe);
  // pthread_mutex_unlock: mov $1,%esi; jmp -> +5 for the mutex in rdi ...
  const uint8_t unlock[] = {0xbe, 0x01, 0x00, 0x00, 0x00, 0xe9, 0xf6, 0xfe, 0xff, 0xff};
  CHECK(cheap_probe_offset(unlock, sizeof unlock, kRegRdi, false) == 5);
  // ... but not when the handler needs rsi, which the skipped mov overwrites
  CHECK(cheap_probe_offset(unlock, sizeof unlock, kRegRsi, false) == 0);
  // a push before the emulated instruction moves *sp: no return probe there
  const uint8_t pushed[] = {0x48, 0x89, 0xf2, 0x53, 0x75, 0x02};
  CHECK(cheap_probe_offset(pushed, sizeof pushed, kRegRdi, true) == 3);  // the push itself
  const uint8_t sub_then_jcc[] = {0x48, 0x83, 0xec, 0x08, 0x75, 0x02};
  CHECK(cheap_probe_offset(sub_then_jcc, sizeof sub_then_jcc, kRegRdi, true) == 0);
  CHECK(cheap_probe_offset(sub_then_jcc, sizeof sub_then_jcc, kRegRdi, false) == 4);
  // an undecodable instruction before any emulated one: stay on the symbol
  const uint8_t unknown[] = {0x0f, 0x05, 0x75, 0x02};
  CHECK(cheap_probe_offset(unknown, sizeof unknown, kRegRdi, true) == 0);
}

TEST_CASE("branch_targets_range finds direct branches into skipped bytes") {
  // text at 0x1000: function at 0x1000 (probe moved to +5); a jmp rel8 at 0x1010
  std::vector<uint8_t> text(0x40, 0xcc);
  text[0x10] = 0xeb;
  text[0x11] = static_cast<uint8_t>(static_cast<int8_t>(0x1003 - 0x1012));
  CHECK(branch_targets_range(text.data(), text.size(), 0x1000, 0x1000, 0x1005));
  // a jump to the symbol itself is fine (the probe moves, the symbol's first bytes run)
  text[0x11] = static_cast<uint8_t>(static_cast<int8_t>(0x1000 - 0x1012));
  CHECK_FALSE(branch_targets_range(text.data(), text.size(), 0x1000, 0x1000, 0x1005));
  // rel32 forms
  std::vector<uint8_t> t2(0x40, 0xcc);
  t2[0x20] = 0x0f;
  t2[0x21] = 0x84;
  int32_t rel = 0x1005 - 0x1026;
  memcpy(&t2[0x22], &rel, 4);
  CHECK(branch_targets_range(t2.data(), t2.size(), 0x1000, 0x1000, 0x1005));
  CHECK_FALSE(branch_targets_range(t2.data(), t2.size(), 0x1000, 0x1000, 0x1004));
  // immediates inside the decoded prologue are not branches: "and $0x17f,%edx" holds
  // 7f 01, which reads as "jg .+1" into the prologue
  std::vector<uint8_t> t3 = {0x8b, 0x47, 0x10, 0x89, 0xc2, 0x81, 0xe2, 0x7f, 0x01, 0x00,
                             0x00, 0x83, 0xe0, 0x7c, 0x0f, 0x85, 0x10, 0x00, 0x00, 0x00};
  CHECK_FALSE(branch_targets_range(t3.data(), t3.size(), 0x1000, 0x1000, 0x100e));
}

TEST_CASE("pthread_lib_from_maps prefers libpthread and prefixes the root") {
  const char* modern =
      "55d0-55d1 r-xp 00000000 08:01 1 /usr/bin/app\n"
      "7f00-7f01 r-xp 00028000 08:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6\n";
  auto a = pthread_lib_from_maps(modern, "/proc/42/root");
  REQUIRE(a);
  CHECK(a->path == "/proc/42/root/usr/lib/x86_64-linux-gnu/libc.so.6");
  CHECK(a->display == "/usr/lib/x86_64-linux-gnu/libc.so.6");
  const char* old =
      "7f00-7f01 r-xp 00000000 08:01 2 /lib/x86_64-linux-gnu/libc-2.31.so\n"
      "7f02-7f03 r-xp 00000000 08:01 3 /lib/x86_64-linux-gnu/libpthread.so.0\n";
  auto b = pthread_lib_from_maps(old, "");
  REQUIRE(b);
  CHECK(b->path == "/lib/x86_64-linux-gnu/libpthread.so.0");
  auto c = pthread_lib_from_maps("55d0-55d1 r-xp 00000000 08:01 1 /usr/bin/static\n", "");
  CHECK_FALSE(c);
}

TEST_CASE("resolve_pthread_probes on this machine's libc") {
  auto lib = find_pthread_lib(0);
  REQUIRE(lib);
  std::vector<PthreadFn> fns = {PthreadFn::MutexLock, PthreadFn::MutexTrylock,
                                PthreadFn::MutexTimedlock, PthreadFn::MutexUnlock,
                                PthreadFn::CondWait, PthreadFn::CondTimedwait};
  auto pts = resolve_pthread_probes(*lib, fns, {});
  REQUIRE(pts);
  REQUIRE(pts->size() == fns.size());
  for (const auto& p : *pts) {
    MESSAGE(describe_probe_point(p));
    CHECK(p.sym_vaddr != 0);
    CHECK(p.offset < 64);
  }
  // symbols resolve to what the dynamic linker binds: the default (@@) version, e.g.
  // pthread_cond_wait@@GLIBC_2.3.2, not the GLIBC_2.2.5 compat one. Looked up in the
  // library itself: &pthread_mutex_lock is ASan's interceptor in a sanitizer build.
  void* handle = dlopen(lib->path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle);
  const char* names[] = {"pthread_mutex_lock", "pthread_mutex_trylock", "pthread_mutex_timedlock",
                         "pthread_mutex_unlock", "pthread_cond_wait", "pthread_cond_timedwait"};
  for (size_t i = 0; i < fns.size(); ++i) {
    void* addr = dlsym(handle, names[i]);
    REQUIRE(addr);
    Dl_info info;
    REQUIRE(dladdr(addr, &info));
    CHECK((*pts)[i].sym_vaddr == (uintptr_t)addr - (uintptr_t)info.dli_fbase);
  }
  dlclose(handle);
  auto at_sym = resolve_pthread_probes(*lib, fns, {true});
  REQUIRE(at_sym);
  for (const auto& p : *at_sym) CHECK(p.offset == 0);
}

TEST_CASE("find_pthread_lib errors are one clear line") {
  auto gone = find_pthread_lib(4194303);
  REQUIRE_FALSE(gone);
  CHECK(gone.error().find("no process with PID") != std::string::npos);
}

TEST_CASE("find_pthread_lib: a kernel thread is named as such, not 'statically linked'") {
  auto k = find_pthread_lib(2);  // kthreadd
  REQUIRE_FALSE(k);
  CHECK(k.error().find("is a kernel thread") != std::string::npos);
  CHECK(k.error().find("statically linked") == std::string::npos);
  CHECK(k.error().find('\n') == std::string::npos);
}

TEST_CASE("find_pthread_lib: permission denied gives no 'still running?' hint") {
  if (!require_env(geteuid() == 0, "not root: cannot drop to nobody")) return;
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[0]);
    std::string msg = "setuid failed";
    if (setgid(65534) == 0 && setuid(65534) == 0) {
      auto r = bpfdiag::find_pthread_lib(1);
      msg = r ? "ok" : r.error();
    }
    (void)!write(fds[1], msg.data(), msg.size());
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status;
  waitpid(child, &status, 0);
  MESSAGE(msg);
  CHECK(msg.find("Permission denied") != std::string::npos);
  CHECK(msg.find("still running") == std::string::npos);
}

TEST_CASE("find_pthread_lib: the library is held open and probed through its fd") {
  auto lib = find_pthread_lib(0);
  REQUIRE(lib);
  REQUIRE(lib->file.get() != nullptr);
  CHECK(lib->probe_path().rfind("/proc/self/fd/", 0) == 0);
  CHECK(lib->display.find("libc.so") != std::string::npos);
}
