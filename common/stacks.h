// Stack rendering shared by every stack tool: BCC-style multi-line stacks, folded
// lines for flamegraph.pl/speedscope (and a parser for them). Reading stack ids back
// from the BPF maps: common/stack_reader.
//
// PUBLIC API:
//   print_stack_multiline(os, st, "comm", pid, value, opts);   // BCC's layout
//   folded_line("comm", st, value, opts)  -> "comm;main;f;-;sys_read;...;schedule 42"
//   parse_folded(line)                    -> FoldedLine{frames, value} or an error
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <tuple>
#include <type_traits>
#include <string>
#include <vector>

#include "common/report.h"
#include "common/result.h"
#include "common/symbolize.h"

namespace bpfdiag {

// One symbolized stack. Frames are innermost first (as the kernel reports them).
struct Stack {
  bool want_kernel = true;     // the kernel part is part of this report (not -U)
  bool want_user = true;       // the user part is part of this report (not -K)
  bool kernel_missing = false; // wanted but lost: shown as [Missed Kernel Stack]
  bool user_missing = false;   // wanted but lost: shown as [Missed User Stack]
  std::vector<std::string> kernel;
  std::vector<std::string> user;
};

struct StackFormat {
  bool delimiter = false;  // multi-line: "--" between kernel and user frames (BCC's -d)
};

// Multi-line, BCC's offcputime/profile layout:
//     kernel_inner
//     ...
//     --                  (only with delimiter and both parts present)
//     user_inner
//     ...
//     -                comm (pid)
//         value
//   <blank line>
void print_stack_multiline(std::ostream& os, const Stack& st, const std::string& comm,
                           uint32_t pid, uint64_t value, const StackFormat& f = {});

// Folded: "comm;user_outer;...;user_inner;-;kernel_outer;...;kernel_inner value".
// The "-" frame separates the parts when both are present. `comm` is used as given
// (e.g. "cat" or "cat-1234/1235" for per-thread keys). ';' and newlines inside frames
// are replaced so the line stays parseable.
std::string folded_line(const std::string& comm, const Stack& st, uint64_t value);
// Frame text made safe for folded output (';' -> ':', control chars -> ' ').
std::string folded_frame(const std::string& frame);

struct FoldedLine {
  std::vector<std::string> frames;  // frames[0] is the process/thread name
  uint64_t value = 0;
};
// Parses "a;b;c 123". Frames may contain spaces; the value is after the last space.
Result<FoldedLine> parse_folded(const std::string& line);

// The first folded frame of a thread's stack: "comm", or per thread (-P) "comm-PID/TID"
// so threads never merge.
std::string folded_name(const std::string& comm, uint32_t pid, uint32_t tid, bool per_thread);

// Folded lines of every stack tool (offcputime, profile, ...): lines that render the
// same (same name and frames) are merged, values summed, in first-seen order; `divisor`
// scales the summed value (offcputime: ns -> us).
class FoldedSet {
 public:
  // `suffix`: more frames after the stack's, ";"-separated with a leading ";" (offcputime
  // --waker: ";--;" and the waker's frames).
  void add(const std::string& name, const Stack& st, uint64_t value, const std::string& suffix = "");
  std::vector<std::string> lines(uint64_t divisor = 1) const;
  // The same stacks as FoldedLine (frames[0] = name), e.g. for render_flamegraph.
  std::vector<FoldedLine> stacks(uint64_t divisor = 1) const;
  bool empty() const { return order_.empty(); }

 private:
  std::vector<std::string> order_;  // "name;frames" without the value
  std::map<std::string, uint64_t> sums_;
};

// Entries (with pid, tid, comm and stack members) whose stacks render the same (stack
// ids that differ only in frames symbolization drops or cannot name) become one;
// merge(into, from) adds `from`'s values. First-seen order is kept. `apart(e)`, when
// given, keeps entries with different values apart (e.g. a declared wait's name).
// merge_identical_stacks_by: the same, `apart(e)` of any ordered type (e.g. a tuple).
template <class E, class MergeFn, class ApartFn>
void merge_identical_stacks_by(std::vector<E>& entries, MergeFn merge, ApartFn apart) {
  using Apart = std::decay_t<decltype(apart(entries.front()))>;
  using Key = std::tuple<uint32_t, uint32_t, std::string, std::vector<std::string>, std::vector<std::string>,
                         bool, bool, Apart>;
  std::map<Key, size_t> index;
  std::vector<E> out;
  for (auto& e : entries) {
    Key key{e.pid,        e.tid, e.comm, e.stack.user, e.stack.kernel, e.stack.user_missing, e.stack.kernel_missing,
            apart(e)};
    auto it = index.find(key);
    if (it == index.end()) {
      index.emplace(std::move(key), out.size());
      out.push_back(std::move(e));
    } else {
      merge(out[it->second], e);
    }
  }
  entries = std::move(out);
}
template <class E, class MergeFn>
void merge_identical_stacks(std::vector<E>& entries, MergeFn merge,
                            const std::function<uint64_t(const E&)>& apart = {}) {
  merge_identical_stacks_by(entries, merge, [&](const E& e) -> uint64_t { return apart ? apart(e) : 0; });
}

// Pointers to `entries`, stably sorted by key(entry), largest first if `descending`
// (text reports list the largest last, as BCC does; JSON lists it first).
template <class E, class KeyFn>
std::vector<const E*> sorted_by(const std::vector<E>& entries, KeyFn key, bool descending) {
  std::vector<const E*> sorted;
  for (auto& e : entries) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(), [&](const E* a, const E* b) {
    return descending ? key(*a) > key(*b) : key(*a) < key(*b);
  });
  return sorted;
}

// True if a BPF stack id means "lost" (not merely "no user stack": -EFAULT is what
// kernel threads and user-less contexts return, which BCC also shows as empty).
inline bool stack_id_lost(int64_t id) { return id < 0 && id != -14 /* -EFAULT */; }

// Which parts to resolve.
struct StackParts {
  bool user = true;
  bool kernel = true;
};

// True for frames of the tracing path itself (tracepoint dispatch, BPF trampoline,
// JIT-ed program); StackReader::resolve drops them from the innermost end of kernel stacks
// so a stack reads the same as with a kprobe and identical stacks do not split.
bool is_tracing_frame(const std::string& name);

// Deletes every entry of an int-keyed BPF map (a BPF_STACK_TRACE table, or a map keyed
// by stack id) except the ids in `keep`. Tools that report per interval call it after
// a report, keeping the ids still referenced by counts recorded since: a stack table
// is never emptied by the kernel, and once full every new stack is lost (a long run
// under a fork storm fills it in minutes). Returns how many entries were deleted.
size_t clear_stack_ids(int fd, const std::set<int32_t>& keep = {});

}  // namespace bpfdiag
