// threadpool: which threads form a pool (group ids for the waker classes), a thread's
// state at attach time, and runtime locks (CPython's GIL) named from data symbols.
#include <fstream>
#include <sstream>

#include "tools/threadpool/tracer.h"

namespace threadpool {

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// State letter from /proc/PID/task/TID/stat ('\0' if unreadable).
char task_state(uint32_t pid, uint32_t tid) {
  std::string s = read_first_line("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
  auto rp = s.rfind(')');
  return rp == std::string::npos || rp + 2 >= s.size() ? '\0' : s[rp + 2];
}

}  // namespace

tp_thread initial_state(uint32_t pid, uint32_t tid, uint64_t now) {
  tp_thread t = {};
  t.ts = now;
  t.sys_nr = TP_NO_SYSCALL;
  t.w_nr = TP_NO_SYSCALL;
  t.w_wake = TP_W_UNSEEN;
  char st = task_state(pid, tid);
  if (st == 'R') {
    t.state = TP_ST_RUNNING;
  } else if (st == 'S' || st == 'D' || st == 'I' || st == 't' || st == 'T') {
    t.state = TP_ST_BLOCKED;
    std::istringstream in(read_first_line("/proc/" + std::to_string(pid) + "/task/" +
                                          std::to_string(tid) + "/syscall"));
    long nr = -1;
    std::string a0, a1;
    uint64_t arg0 = 0, arg1 = 0;
    // "running" or a short line: not in a syscall, the wait stays unknown
    if (in >> nr >> a0 >> a1 && parse_syscall_arg(a0, arg0) && parse_syscall_arg(a1, arg1)) {
      t.sys_nr = t.w_nr = static_cast<int32_t>(nr);
      t.sys_arg0 = arg0;
      t.sys_arg1 = static_cast<uint32_t>(arg1);
      if (nr == TP_NR_FUTEX) {
        t.w_op = static_cast<uint32_t>(arg1) & TP_FUTEX_CMD_MASK;
        t.w_obj = arg0 & ~7ULL;
        if (t.w_op == TP_FUTEX_WAIT_BITSET) {  // a hand-off candidate, as the BPF side marks it
          t.cw_obj = t.w_obj;
          t.cw_op = t.w_op;
          t.cw_set = 1;
        }
      }
    }
  }
  return t;
}

uint32_t GroupIds::id_of(bool main, const std::string& group, const ThreadTimes* t, int current_nr) {
  auto it = ids_.find(group);
  if (it == ids_.end()) it = ids_.emplace(group, static_cast<uint32_t>(ids_.size() + 1)).first;
  const uint32_t base = it->second * 4;
  if (main) return base + TP_GID_MAIN;  // the main thread: a supervisor until shown otherwise
  // a listener: most of its blocked time in event waits (or, before any is seen,
  // blocked in one now)
  uint64_t blk = 0, ev = 0;
  if (t)
    for (const auto& [k, w] : t->waits) {
      blk += w.blk();
      if (is_event_wait(k.nr)) ev += w.blk();
    }
  const bool listener = blk ? ev * 2 > blk : is_event_wait(current_nr);
  return listener ? base + 2 : base;
}

const std::map<uint64_t, std::string>& RuntimeLocks::update(
    const std::map<uint32_t, ThreadTimes>& snap, const std::function<uint32_t(uint32_t)>& pid_of) {
  constexpr size_t kMaxChecked = 1 << 16;  // bounded: words are looked up once per process
  for (const auto& [tid, t] : snap)
    for (const auto& [k, w] : t.waits) {
      if (k.nr != TP_NR_FUTEX || !k.obj || checked_.size() >= kMaxChecked) continue;
      const uint32_t pid = pid_of(tid);
      if (!pid || !checked_.insert({pid, k.obj}).second) continue;
      bpfdiag::SymbolInfo s = sym_.lookup_data(pid, k.obj);
      if (s.found && s.name == "_PyRuntime")
        named_[k.obj] = "GIL (_PyRuntime+" + std::to_string(s.offset) + ")";
    }
  return named_;
}

}  // namespace threadpool
