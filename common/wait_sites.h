// What a wait is, read from where it waits: a rule table per runtime, kept as data.
//
// A wait's stack (symbolized frames, innermost first) is matched against rules, each
// `CLASS[/own] PATTERN WHAT`, one per line (common/wait_sites.rules is built in; more
// come from /etc/bpfdiag/wait-sites.d/*.rules, or the directory $BPFDIAG_WAIT_RULES
// names, without rebuilding):
//   lock | condition | idle | sleep | io | gil   the frame decides what the wait is
//   unclassified  the frame decides that the wait is none of the classes above (a
//                 runtime's internal lock, e.g. Go's runtime.lock2): shown apart with the
//                 rule's words, never ranked
//   tracer        a tracing tool's own attach/detach (perf_trace_destroy, uprobe
//                 registration): decides wherever it is in the stack, before all else
//   via[:CLASS]   the frame says how it waits (a condition variable, a park); the
//                 reason lies further out. When nothing further out decides, the
//                 outermost via's CLASS is the verdict (unclassified without one)
//   wrapper       an instrumentation or portability shim: never a wait's call site
//   /own          the futex word belongs to the waiting thread (HotSpot's ParkEvent,
//                 PostgreSQL's PGPROC semaphore), not to the lock: waits are grouped
//                 by the rule and call site, not by the word
// A PATTERN of the form `usdt:PROVIDER:START:DONE` is not a frame but a pair of USDT
// probes the software fires around its own waits (PostgreSQL's lock__wait__start and
// lock__wait__done): the time between them is a wait of CLASS, named by WHAT, where
// one `{argN}` (a string argument) or `{argN=a,b,...}` (an enumeration, by value)
// puts the software's own name of the wait into the words ("PostgreSQL Lock:{arg5=
// relation,extend,...}" reads "PostgreSQL Lock:tuple"). CLASS must decide (no via,
// wrapper or /own). Tools that trace these probes (lockstat) take them before the
// stack's rules: it is the software saying what it waits for.
// A PATTERN of the form `java:CLASS` is not a frame but the class of the Java object a
// JVM thread waits for, as jstack names it ("parking to wait for <0x...> (a
// java.util.concurrent.locks.ReentrantLock$NonfairSync)"; common/jvm_state): the
// class, then its superclasses, nearest first, against the java: rules in order. CLASS
// must decide. A parked thread whose blocker no rule names is unclassified, named.
// A PATTERN of the form `go:REASON[@FRAME]` is not a frame but a goroutine's wait as the
// Go runtime names it (the waitReason string gopark was given, what a goroutine dump
// prints: "semacquire", "chan receive", "sync.Mutex.Lock"; a space written `_`),
// optionally only when a frame of the goroutine's stack matches the glob FRAME
// ("semacquire" is sync.Mutex's wait in Go < 1.20, and WaitGroup's): the go: rules in
// order, the first that matches decides. CLASS must decide. A reason no rule names is
// unclassified, named by the runtime's words and its call site.
// PATTERN is a glob (`*` = any characters) on the function name (a frame's "+0x..."
// offset is ignored; a C++ name matches with or without its parameter list). The
// innermost deciding frame wins. Nothing matched: unclassified, never a guess.
//
// Rule files are input the suite does not trust: read only when regular, owned by
// root and not writable by group or others, never through a symbolic link, at most
// kMaxRuleFileBytes each and kMaxRuleFiles files; a malformed line is reported with
// its file and line number and skipped.
//
// PUBLIC API:
//   const WaitRules& r = WaitRules::suite();          // built-in + the rule directory
//   WaitVerdict v = r.classify(frames);               // v.kind, v.what, v.frame
//   r.is_wrapper("psi_mutex_lock");                   // true
//   auto t = WaitRules::parse(text, "file.rules");    // for tests and tools
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

// Cpu: runnable, waiting for a CPU (preempted or yielded). No stack rule needs to say
// it: offcputime reads it from the task's state at the switch-out.
enum class WaitKind { Lock, Condition, Idle, Sleep, Io, Gil, Tracer, Cpu, Unclassified };  // Unclassified last
const char* wait_kind_name(WaitKind k);  // "lock", ..., "unclassified"

constexpr size_t kMaxRuleFileBytes = 1 << 20;
constexpr size_t kMaxRuleFiles = 64;
constexpr size_t kMaxRules = 20000;
constexpr size_t kMaxRulePattern = 512;

struct WaitRule {
  enum class Role { Decides, Via, Wrapper };
  Role role = Role::Decides;
  WaitKind kind = WaitKind::Unclassified;  // Decides: the verdict; Via: its fallback
  bool own_word = false;                   // /own
  std::string pattern, what;
  std::string origin;  // "file:line"
};

// A wait the software declares with a pair of USDT probes (`usdt:` rules).
struct DeclaredWait {
  WaitKind kind = WaitKind::Unclassified;
  std::string provider, start, done;
  std::string prefix, suffix;     // WHAT around its {argN...} (all of it in prefix without one)
  int name_arg = 0;               // 1-based argument that names the wait (0: none)
  bool name_is_string = false;    // {argN}: a char * argument
  std::vector<std::string> names; // {argN=a,b}: the names by value
  std::string origin;             // "file:line"
  // The words for one wait: the string argument, the value's name, or "#VALUE" when
  // the value is past the list (a newer version of the software).
  std::string what(const std::string& str, uint64_t value) const;
};

struct WaitVerdict {
  WaitKind kind = WaitKind::Unclassified;
  std::string what;                    // the rule's words ("" when no rule matched)
  size_t frame = std::string::npos;    // index of the frame that decided (or the via's)
  bool decided = false;                // a deciding rule matched (not only a via)
  bool own_word = false;
  const WaitRule* rule = nullptr;      // the rule behind `what`
};

class WaitRules {
 public:
  // Rules from `text`; malformed lines go to `errors` ("origin:line: why") and are skipped.
  static WaitRules parse(std::string_view text, const std::string& origin, std::vector<std::string>* errors = nullptr);
  // The built-in table plus every *.rules file of the rule directory (sorted by name;
  // refused files and bad lines are warned about once on stderr). Loaded at first use.
  static const WaitRules& suite();
  // The *.rules files of `dir` (sorted by name) under the rules above; refused files
  // and bad lines are warned about on stderr.
  static WaitRules read_dir(const std::string& dir);
  // Appends `more`'s rules after this table's (they are tried after the built-in ones
  // for the same frame: a user rule adds a site, it does not silently replace one).
  void append(const WaitRules& more);

  WaitVerdict classify(const std::vector<std::string>& frames) const;
  // The verdict of a `java:` rule on a Java object's class and its superclasses
  // (nearest first); v.frame is the index of the class that matched.
  WaitVerdict classify_object(const std::vector<std::string>& classes) const;
  // The verdict of a `go:` rule on a goroutine's waitReason string and its stack
  // (innermost first); v.frame is the index of the frame the rule needed (npos: none).
  WaitVerdict classify_go(const std::string& reason, const std::vector<std::string>& frames) const;
  bool is_wrapper(const std::string& frame) const;
  size_t size() const { return rules_.size(); }
  const std::vector<WaitRule>& rules() const { return rules_; }
  const std::vector<DeclaredWait>& declared() const { return declared_; }
  const std::vector<WaitRule>& object_rules() const { return objects_; }
  const std::vector<WaitRule>& go_rules() const { return go_; }

 private:
  const WaitRule* match(const std::string& frame, WaitRule::Role role_filter, bool any_role) const;
  // frame -> its first deciding/via rule and first wrapper rule (index+1, 0: none):
  // reports match the same frames again and again (thousands of stacks)
  struct Memo {
    std::mutex mu;
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> hits;
  };
  std::pair<uint32_t, uint32_t> lookup(const std::string& frame) const;
  std::vector<WaitRule> rules_;
  std::vector<DeclaredWait> declared_;
  std::vector<WaitRule> objects_;  // java: rules
  std::vector<WaitRule> go_;       // go: rules (pattern: REASON, frame glob after '@' in go_frame)
  std::unique_ptr<Memo> memo_ = std::make_unique<Memo>();  // move-only: a copy would share it
};

// `*`-only glob, linear in |text| * |pattern| at worst (no backtracking blow-up).
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace bpfdiag
