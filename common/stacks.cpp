#include "common/stacks.h"

#include <bcc/BPF.h>
#include <bcc/libbpf.h>

#include <cerrno>

namespace bpfdiag {

void print_stack_multiline(std::ostream& os, const Stack& st, const std::string& comm,
                           uint32_t pid, uint64_t value, const StackFormat& f) {
  if (st.want_kernel) {
    if (st.kernel_missing)
      os << "    [Missed Kernel Stack]\n";
    else
      for (auto& fr : st.kernel) os << "    " << fr << "\n";
  }
  if (st.want_user) {
    bool kernel_shown = st.want_kernel && (st.kernel_missing || !st.kernel.empty());
    bool user_shown = st.user_missing || !st.user.empty();
    if (f.delimiter && kernel_shown && user_shown) os << "    --\n";
    if (st.user_missing)
      os << "    [Missed User Stack]\n";
    else
      for (auto& fr : st.user) os << "    " << fr << "\n";
  }
  // BCC: "    %-16s %s (%d)" with "-", then "        %d\n"
  std::string dash = "-";
  dash.resize(16, ' ');
  os << "    " << dash << " " << comm << " (" << pid << ")\n";
  os << "        " << value << "\n\n";
}

std::string folded_frame(const std::string& frame) {
  std::string s = frame;
  for (auto& c : s) {
    if (c == ';') c = ':';
    else if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return s;
}

std::string folded_line(const std::string& comm, const Stack& st, uint64_t value) {
  std::string out = folded_frame(comm);
  bool user_part = false;
  if (st.want_user) {
    if (st.user_missing) {
      out += ";[Missed User Stack]";
      user_part = true;
    } else {
      for (auto it = st.user.rbegin(); it != st.user.rend(); ++it) out += ";" + folded_frame(*it);
      user_part = !st.user.empty();
    }
  }
  if (st.want_kernel) {
    bool kernel_part = st.kernel_missing || !st.kernel.empty();
    if (user_part && kernel_part) out += ";-";
    if (st.kernel_missing) {
      out += ";[Missed Kernel Stack]";
    } else {
      for (auto it = st.kernel.rbegin(); it != st.kernel.rend(); ++it)
        out += ";" + folded_frame(*it);
    }
  }
  return out + " " + std::to_string(value);
}

Result<FoldedLine> parse_folded(const std::string& line) {
  std::string l = line;
  while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
  auto sp = l.rfind(' ');
  if (sp == std::string::npos || sp == 0 || sp + 1 >= l.size())
    return Error{"folded line has no ' value' at the end: '" + l + "'"};
  std::string num = l.substr(sp + 1);
  uint64_t v = 0;
  for (char c : num) {
    if (c < '0' || c > '9') return Error{"folded line value is not a number: '" + num + "'"};
    uint64_t nv = v * 10 + static_cast<uint64_t>(c - '0');
    if (nv / 10 != v) return Error{"folded line value overflows: '" + num + "'"};
    v = nv;
  }
  FoldedLine out;
  out.value = v;
  std::string stack = l.substr(0, sp);
  size_t start = 0;
  while (true) {
    auto semi = stack.find(';', start);
    std::string fr = stack.substr(start, semi == std::string::npos ? std::string::npos : semi - start);
    if (fr.empty()) return Error{"folded line has an empty frame: '" + l + "'"};
    out.frames.push_back(fr);
    if (semi == std::string::npos) break;
    start = semi + 1;
  }
  return out;
}

std::string folded_name(const std::string& comm, uint32_t pid, uint32_t tid, bool per_thread) {
  if (!per_thread) return comm;
  return comm + "-" + std::to_string(pid) + "/" + std::to_string(tid);
}

void FoldedSet::add(const std::string& name, const Stack& st, uint64_t value, const std::string& suffix) {
  std::string l = folded_line(name, st, 0);
  l.resize(l.size() - 2);  // drop " 0"
  l += suffix;
  auto it = sums_.find(l);
  if (it == sums_.end()) {
    order_.push_back(l);
    sums_.emplace(std::move(l), value);
  } else {
    it->second += value;
  }
}

std::vector<std::string> FoldedSet::lines(uint64_t divisor) const {
  std::vector<std::string> out;
  for (auto& l : order_) out.push_back(l + " " + std::to_string(sums_.at(l) / (divisor ? divisor : 1)));
  return out;
}

std::vector<FoldedLine> FoldedSet::stacks(uint64_t divisor) const {
  std::vector<FoldedLine> out;
  for (auto& l : order_) {
    FoldedLine f;
    f.value = sums_.at(l) / (divisor ? divisor : 1);
    size_t start = 0;
    while (true) {  // folded_frame() keeps ';' out of frames: split on it
      auto semi = l.find(';', start);
      f.frames.push_back(l.substr(start, semi == std::string::npos ? std::string::npos : semi - start));
      if (semi == std::string::npos) break;
      start = semi + 1;
    }
    out.push_back(std::move(f));
  }
  return out;
}

bool is_tracing_frame(const std::string& name) {
  // The probe's own path: tracepoint dispatch, the BPF trampoline and the JIT-ed
  // program (no kallsyms entry; it resolves past the end of kernel text).
  static const char* kPrefixes[] = {"bpf_trace_run", "__traceiter_", "__bpf_trace_", "bpf_prog_",
                                    "perf_trace_", "trace_call_bpf", "_einittext", "__uprobe_perf_func",
                                    "uprobe_dispatcher", "handle_swbp"};
  for (const char* p : kPrefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

size_t clear_stack_ids(int fd, const std::set<int32_t>& keep) {
  std::vector<int32_t> ids;
  int32_t cur = 0, next = 0;
  bool first = true;
  while (bpf_get_next_key(fd, first ? nullptr : &cur, &next) == 0) {
    if (!keep.count(next)) ids.push_back(next);
    cur = next;
    first = false;
  }
  size_t n = 0;
  for (int32_t id : ids)
    if (bpf_delete_elem(fd, &id) == 0) ++n;
  return n;
}

}  // namespace bpfdiag
