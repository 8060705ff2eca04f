// Go runtime probe placement (common/go_runtime): the x86-64 length decoder, gopark's
// two probe points found on the bytes of a real Go 1.19.8 gopark, refusals of shapes
// that are not it, and the go: wait-site rules.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/go_runtime.h"
#include "common/wait_sites.h"

using namespace bpfdiag;

namespace {

// runtime.gopark of tests/workloads/go_waits (go build, Debian's Go 1.19.8), at
// 0x438160; runtime.mcall at 0x460600.
const std::vector<uint8_t> kGopark119 = {
    0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0xe9, 0x00, 0x00, 0x00, 0x48, 0x83, 0xec, 0x18, 0x48, 0x89, 0x6c, 0x24,
    0x10, 0x48, 0x8d, 0x6c, 0x24, 0x10, 0x49, 0x8b, 0x56, 0x30, 0x90, 0xff, 0x82, 0x08, 0x01, 0x00, 0x00, 0x49,
    0x8b, 0x56, 0x30, 0x4d, 0x89, 0xf0, 0x41, 0x84, 0x00, 0x4c, 0x8b, 0x82, 0xc0, 0x00, 0x00, 0x00, 0x90, 0x45,
    0x8b, 0x88, 0x90, 0x00, 0x00, 0x00, 0x0f, 0x1f, 0x40, 0x00, 0x41, 0x83, 0xf9, 0x02, 0x74, 0x0d, 0x41, 0x81,
    0xf9, 0x02, 0x10, 0x00, 0x00, 0x0f, 0x85, 0x8e, 0x00, 0x00, 0x00, 0x83, 0x3d, 0x96, 0x13, 0x1e, 0x00, 0x00,
    0x75, 0x10, 0x48, 0x89, 0x9a, 0x80, 0x02, 0x00, 0x00, 0x48, 0x89, 0x82, 0x78, 0x02, 0x00, 0x00, 0xeb, 0x21,
    0x4c, 0x8d, 0x8a, 0x80, 0x02, 0x00, 0x00, 0x41, 0x89, 0xfa, 0x4c, 0x89, 0xcf, 0xe8, 0xe2, 0xa6, 0x02, 0x00,
    0x48, 0x8d, 0xba, 0x78, 0x02, 0x00, 0x00, 0xe8, 0x96, 0xa5, 0x02, 0x00, 0x44, 0x89, 0xd7, 0x41, 0x88, 0x88,
    0xb0, 0x00, 0x00, 0x00, 0x40, 0x88, 0xba, 0x88, 0x02, 0x00, 0x00, 0x48, 0x89, 0xb2, 0x90, 0x02, 0x00, 0x00,
    0x90, 0x8b, 0x8a, 0x08, 0x01, 0x00, 0x00, 0x8d, 0x59, 0xff, 0x89, 0x9a, 0x08, 0x01, 0x00, 0x00, 0x83, 0xf9,
    0x01, 0x75, 0x13, 0x41, 0x80, 0xbe, 0xb1, 0x00, 0x00, 0x00, 0x00, 0x90, 0x74, 0x08, 0x49, 0xc7, 0x46, 0x10,
    0xde, 0xfa, 0xff, 0xff, 0x48, 0x8d, 0x05, 0x77, 0x48, 0x0e, 0x00, 0xe8, 0xca, 0x83, 0x02, 0x00, 0x48, 0x8b,
    0x6c, 0x24, 0x10, 0x48, 0x83, 0xc4, 0x18, 0x90, 0xc3, 0x48, 0x8d, 0x05, 0x90, 0xd5, 0x0d, 0x00, 0xbb, 0x14,
    0x00, 0x00, 0x00, 0xe8, 0x6e, 0xd3, 0xff, 0xff, 0x90, 0x48, 0x89, 0x44, 0x24, 0x08, 0x48, 0x89, 0x5c, 0x24,
    0x10, 0x88, 0x4c, 0x24, 0x18, 0x40, 0x88, 0x7c, 0x24, 0x19, 0x48, 0x89, 0x74, 0x24, 0x20, 0xe8, 0x50, 0x85,
    0x02, 0x00};
constexpr uint64_t kGoparkAddr = 0x438160, kMcallAddr = 0x460600;

}  // namespace

TEST_CASE("decode_x86_length: lengths of the instructions Go's compiler emits") {
  struct Case {
    std::vector<uint8_t> b;
    unsigned len;
  };
  std::vector<Case> cases = {
      {{0x49, 0x3b, 0x66, 0x10}, 4},                          // cmp 0x10(%r14),%rsp
      {{0x0f, 0x86, 0xe9, 0x00, 0x00, 0x00}, 6},              // jbe rel32
      {{0x76, 0x10}, 2},                                      // jbe rel8
      {{0x48, 0x83, 0xec, 0x18}, 4},                          // sub $0x18,%rsp
      {{0xff, 0x82, 0x08, 0x01, 0x00, 0x00}, 6},              // incl 0x108(%rdx)
      {{0x83, 0x3d, 0x96, 0x13, 0x1e, 0x00, 0x00}, 7},        // cmpl $0,rip+disp32
      {{0x49, 0xc7, 0x46, 0x10, 0xde, 0xfa, 0xff, 0xff}, 8},  // movq $imm32,0x10(%r14)
      {{0x41, 0x80, 0xbe, 0xb1, 0x00, 0x00, 0x00, 0x00}, 8},  // cmpb $0,0xb1(%r14)
      {{0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8}, 10},             // movabs $imm64,%rax
      {{0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00}, 6},              // nopw 0(%rax,%rax,1)
      {{0x0f, 0xb6, 0x4c, 0x24, 0x18}, 5},                    // movzbl 0x18(%rsp),%ecx
      {{0xc5, 0xfe, 0x6f, 0x06}, 4},                          // vmovdqu (%rsi),%ymm0
      {{0xc4, 0xe3, 0x7d, 0x39, 0xc1, 0x01}, 6},              // vextracti128 $1,%ymm0,%xmm1
      {{0xf7, 0x04, 0x24, 1, 0, 0, 0}, 7},                    // testl $1,(%rsp)
      {{0xc3}, 1},
  };
  for (const auto& c : cases) {
    X86Length l = decode_x86_length(c.b.data(), c.b.size());
    CHECK(l.ok);
    CHECK(l.len == c.len);
  }
  // what the kernel emulates (no single step) and what it does not
  uint8_t nop[] = {0x90}, xchg[] = {0x41, 0x90}, push[] = {0x55}, call[] = {0xe8, 0, 0, 0, 0};
  CHECK(decode_x86_length(nop, 1).emulated);
  CHECK_FALSE(decode_x86_length(xchg, 2).emulated);  // REX.B 90: xchg %r8,%rax
  CHECK(decode_x86_length(push, 1).emulated);
  CHECK(decode_x86_length(call, 5).call_rel);
  // truncated, invalid in 64-bit mode, EVEX: refused, never a guessed length
  uint8_t trunc[] = {0x48, 0x8b}, inval[] = {0x06}, evex[] = {0x62, 0xf1, 0x7c, 0x48, 0x10, 0x06};
  CHECK_FALSE(decode_x86_length(trunc, 2).ok);
  CHECK_FALSE(decode_x86_length(inval, 1).ok);
  CHECK_FALSE(decode_x86_length(evex, sizeof evex).ok);
  CHECK_FALSE(decode_x86_length(nullptr, 0).ok);
}

TEST_CASE("find_gopark_points: Go 1.19's gopark, park at the stack check's jbe, resume at the nop after mcall") {
  auto p = find_gopark_points(kGopark119.data(), kGopark119.size(), kGoparkAddr, kMcallAddr);
  REQUIRE(p);
  CHECK(p->park == 4);
  CHECK(p->resume == 0xdf);  // call mcall at +0xd1; mov, add, then the 1-byte nop
  CHECK(p->resume_emulated);
}

TEST_CASE("find_gopark_points: shapes that are not gopark's are refused") {
  // another mcall address: no call to it
  CHECK_FALSE(find_gopark_points(kGopark119.data(), kGopark119.size(), kGoparkAddr, kMcallAddr + 16));
  // no register-ABI stack check (Go < 1.17 loads g from TLS)
  std::vector<uint8_t> old = kGopark119;
  old[0] = 0x64;
  CHECK_FALSE(find_gopark_points(old.data(), old.size(), kGoparkAddr, kMcallAddr));
  // the stack check's branch leaves the function (cut short)
  CHECK_FALSE(find_gopark_points(kGopark119.data(), 0x40, kGoparkAddr, kMcallAddr));
  // garbage
  std::vector<uint8_t> junk(64, 0x06);
  CHECK_FALSE(find_gopark_points(junk.data(), junk.size(), kGoparkAddr, kMcallAddr));
  // without the epilogue's nop: the instruction right after the call (single-stepped)
  std::vector<uint8_t> nonop = kGopark119;
  nonop[0xdf] = 0xc3;  // ret where the nop was
  auto p = find_gopark_points(nonop.data(), nonop.size(), kGoparkAddr, kMcallAddr);
  REQUIRE(p);
  CHECK(p->resume == 0xd6);
  CHECK_FALSE(p->resume_emulated);
}

TEST_CASE("inspect_go_binary: a C program and a missing file are refused with a reason") {
  auto r = inspect_go_binary("/proc/self/exe");
  REQUIRE_FALSE(r);
  CHECK(r.error() == "not a Go program");
  CHECK_FALSE(is_go_binary("/proc/self/exe"));
  CHECK_FALSE(inspect_go_binary("/nonexistent/go-binary"));
}

TEST_CASE("go: rules: the runtime's wait reason, with a frame when the reason is shared") {
  const WaitRules& rules = WaitRules::suite();
  std::vector<std::string> mutex = {"runtime.gopark", "runtime.semacquire1", "sync.runtime_SemacquireMutex",
                                    "sync.(*Mutex).lockSlow", "main.lockedWork", "main.main.func1", "runtime.goexit"};
  auto v = rules.classify_go("semacquire", mutex);
  CHECK(v.decided);
  CHECK(v.kind == WaitKind::Lock);
  CHECK(v.what.find("sync.Mutex.Lock") != std::string::npos);
  CHECK(v.frame == 3);
  std::vector<std::string> wg = {"runtime.gopark", "runtime.semacquire1", "sync.runtime_Semacquire",
                                 "sync.(*WaitGroup).Wait", "main.main"};
  CHECK(rules.classify_go("semacquire", wg).kind == WaitKind::Condition);
  CHECK(rules.classify_go("sync.Mutex.Lock", {}).kind == WaitKind::Lock);  // Go >= 1.20 says it
  CHECK(rules.classify_go("chan receive", {}).kind == WaitKind::Idle);
  CHECK(rules.classify_go("chan receive (nil chan)", {}).what.find("nil channel") != std::string::npos);
  CHECK(rules.classify_go("sleep", {}).kind == WaitKind::Sleep);
  // semacquire from any other stack, an unknown reason: unclassified, never a guess
  CHECK_FALSE(rules.classify_go("semacquire", {"runtime.gopark", "main.custom"}).decided);
  CHECK_FALSE(rules.classify_go("reason 99", {}).decided);
  CHECK_FALSE(rules.classify_go("GC assist wait", {}).decided);
  // the rule format
  std::vector<std::string> errors;
  auto t = WaitRules::parse("lock go:my_reason@pkg.F  mine\nvia go:x y\nlock go:@f z\n", "t.rules", &errors);
  REQUIRE(t.go_rules().size() == 1);
  CHECK(errors.size() == 2);
  CHECK(t.classify_go("my reason", {"pkg.F"}).what == "mine");
  CHECK_FALSE(t.classify_go("my reason", {"pkg.G"}).decided);
}

TEST_CASE("is_go_runtime_frame: the runtime and sync are never a goroutine wait's site") {
  CHECK(is_go_runtime_frame("runtime.chanrecv1"));
  CHECK(is_go_runtime_frame("sync.(*Mutex).lockSlow"));
  CHECK(is_go_runtime_frame("internal/poll.(*FD).Read"));
  CHECK(is_go_runtime_frame("time.Sleep"));
  CHECK_FALSE(is_go_runtime_frame("main.lockedWork"));
  CHECK_FALSE(is_go_runtime_frame("syncutil.Do"));
}
