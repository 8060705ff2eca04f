// Go programs: where goroutines park and resume, read from the binary (issue 20;
// docs/design/go-waits.md).
//
// A goroutine blocked on a sync.Mutex, a channel or a sync.Cond does not wait in the
// kernel: the Go runtime parks it (runtime.gopark) and runs another. The wait is the
// time between two instructions of gopark:
//   park    the conditional jump of gopark's stack check (`cmp 0x10(%r14),%rsp; jbe`):
//           the arguments are still in their registers (ABIInternal, Go >= 1.17 amd64):
//           g = R14, the lock = RBX, the waitReason = CL; the kernel emulates a jcc (no
//           single step)
//   resume  the first instruction after `call runtime.mcall` in gopark, where a parked
//           goroutine continues (on its own stack, R14 = g); the first one the kernel
//           emulates (nop, jmp, jcc, push) up to the `ret` if there is one
// Both are found per binary by decoding gopark's instructions from its first byte
// (decode_x86_length: a bounded x86-64 length decoder), never by fixed offsets; a shape
// not recognised is refused, never guessed (a probe in the middle of an instruction
// would corrupt the target).
// The waitReason strings (runtime.waitReasonStrings: the numbers move between Go
// versions) are read from the binary, so waits are named as the runtime names them.
//
// The binary is another user's file: opened through untrusted_file.h and the suite's
// ELF reader, every read bounded (kMaxGoFunctionBytes, kMaxGoWaitReasons).
//
// PUBLIC API:
//   auto g = inspect_go_binary("/proc/PID/exe");   // Result<GoBinary>; error: why not
//   bool go = is_go_binary(path);                  // .go.buildinfo or .gopclntab present
//   g->park_offset, g->resume_offset               // file offsets for uprobes
//   g->reason(i)                                   // "semacquire", "chan receive", ...
//   X86Length l = decode_x86_length(code, n);      // one instruction's length or !ok
//   GoWaits w; w.find(pids); w.attach(session, probes);   // a tool's go_park/go_resume
//   w.check_rate(session);                          // the rate guard, every poll
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

constexpr size_t kMaxGoFunctionBytes = 4096;  // gopark is ~240 bytes (1.19), ~300 (1.23)
constexpr size_t kMaxGoWaitReasons = 64;      // 27 in Go 1.19, 40 in 1.23
constexpr size_t kMaxGoReasonLen = 64;
constexpr unsigned kMinGoMinor = 17;          // register ABI (ABIInternal) on amd64

// One x86-64 instruction's length and what a uprobe there costs.
struct X86Length {
  bool ok = false;        // decoded (false: unknown or truncated: stop)
  unsigned len = 0;
  bool emulated = false;  // the kernel emulates it when probed (nop, jmp, jcc, call, push reg)
  bool jcc = false;       // conditional jump (rel8 or rel32)
  bool call_rel = false;  // call rel32
  bool ret = false;       // ret
  bool jmp = false;       // unconditional jmp rel8/rel32 or indirect jmp
  int64_t rel = 0;        // jcc/jmp/call: displacement from the next instruction
};
// Decodes one instruction of p[0..n): legacy prefixes, REX, VEX, the one-byte, 0F,
// 0F38 and 0F3A opcode maps, ModRM/SIB/displacement and immediates. EVEX, 3DNow! and
// opcodes invalid in 64-bit mode are !ok.
X86Length decode_x86_length(const uint8_t* p, size_t n);

struct GoBinary {
  std::string version;          // "go1.19.8" (from .go.buildinfo)
  unsigned minor = 0;           // 19
  uint64_t gopark = 0;          // runtime.gopark's address
  uint64_t park_offset = 0;     // file offsets of the two probe points
  uint64_t resume_offset = 0;
  bool resume_emulated = false;
  std::vector<std::string> reasons;  // waitReason strings by value
  std::string reasons_source;        // "runtime.waitReasonStrings", or "" when not found
  // The runtime's name of waitReason `v`, "reason N" when unknown.
  std::string reason(uint32_t v) const;
};

// True when `path` (opened as untrusted input) is a Go binary: a .go.buildinfo or
// .gopclntab section.
bool is_go_binary(const std::string& path);

// The probe points of the Go binary at `path` (follow_links: /proc/PID/exe). Errors
// name what is not supported: not Go, Go < 1.17, not amd64, no symbol table and no
// readable .gopclntab, gopark's shape not recognised. Stripped binaries: functions from
// .gopclntab (go_pclntab.h), runtime.waitReasonStrings found by its shape.
Result<GoBinary> inspect_go_binary(const std::string& path, bool follow_links = true);

// The gopark shape check alone (tests): code = gopark's bytes at `addr`, `mcall`
// runtime.mcall's address. Sets park/resume as offsets from the function's start.
struct GoparkPoints {
  uint64_t park = 0, resume = 0;
  bool resume_emulated = false;
};
Result<GoparkPoints> find_gopark_points(const uint8_t* code, size_t n, uint64_t addr, uint64_t mcall);

// Frames of the Go runtime and the standard library's synchronisation (runtime.*,
// sync.*, internal/*, time.Sleep): never a goroutine wait's call site.
bool is_go_runtime_frame(const std::string& frame);

class BpfSession;

// Parks per second (all traced Go processes) above which goroutine wait tracing stops:
// each park and resume traps into the kernel (5-7 us of CPU each under load, measured
// in docs/design/go-waits.md), and a channel ping-pong parks millions of times a
// second (130x slower under the probes). 10,000 parks/s (20,000 traps) is ~5-15% of a
// CPU; a lock-bound program (20 goroutines on one sync.Mutex held 200 us) parks ~3,000
// times a second, a ping-pong under the probes still 24,000 (load average 70 on 2 CPUs).
constexpr uint64_t kGoParkBudget = 10000;
constexpr uint64_t kGoRateWindowNs = 250000000ULL;  // measured over at least this

// The Go programs a tool traces: go_park/go_resume (a BPF program's handlers, keyed
// by go_key, counting parks in the per-CPU array go_parks) attached per process.
class GoWaits {
 public:
  // Inspects the executables of `pids`; a Go program that cannot be traced is one line
  // on stderr ("lockstat: PID 12 (/usr/bin/app): ...: goroutine waits are not traced")
  // and stays untraced (its OS threads' waits are still seen).
  void find(const std::vector<uint32_t>& pids, const char* tool);
  bool empty() const { return procs_.empty(); }
  // Attaches both probes of every Go program found (the resume first: a park traced
  // always has its resume traced); adds the probes attached to `probes`.
  Status attach(BpfSession& s, uint64_t& probes, bool verbose);
  // The rate guard: when the parks per second over the last kGoRateWindowNs exceed
  // kGoParkBudget, detaches every Go probe (once; a warning on stderr) and drops the
  // waits in flight. Cheap when called more often.
  void check_rate(BpfSession& s, uint64_t now_ns);
  bool stopped() const { return stopped_; }
  uint64_t take_dropped() { uint64_t d = dropped_; dropped_ = 0; return d; }
  // The runtime's word for waitReason `v` in process `pid`.
  std::string reason(uint32_t pid, uint32_t v) const;
  nlohmann::json start_fields() const;

 private:
  struct Proc {
    std::string module;  // /proc/PID/exe
    GoBinary bin;
  };
  void detach_all(BpfSession& s);
  std::map<uint32_t, Proc> procs_;
  std::map<uint32_t, std::string> refused_;
  const char* tool_ = "bpfdiag";
  bool attached_ = false, stopped_ = false;
  uint64_t last_ns_ = 0, last_parks_ = 0, dropped_ = 0, peak_rate_ = 0;
};

}  // namespace bpfdiag
