// offcputime's renderers: BCC's multi-line stacks, folded lines, NDJSON records.
#include <algorithm>

#include "common/output.h"
#include "common/table.h"
#include "common/stacks.h"
#include "tools/offcputime/offcputime.h"

namespace offcputime {
using namespace bpfdiag;

namespace {

uint64_t by_total(const Entry& e) { return e.total_ns; }

// --waker's fields of a stack record: the waker's kind, ids, name and stack parts.
void add_waker_fields(nlohmann::json& j, const Waker& w) {
  j["waker_kind"] = waker_kind_name(w.kind);
  j["waker_pid"] = w.pid;
  j["waker_tid"] = w.tid;
  j["waker_comm"] = w.comm;
  if (w.stack.want_user) {
    j["waker_user_stack"] = w.stack.user;
    j["waker_user_stack_missing"] = w.stack.user_missing;
  }
  if (w.stack.want_kernel) {
    j["waker_kernel_stack"] = w.stack.kernel;
    j["waker_kernel_stack_missing"] = w.stack.kernel_missing;
  }
}

// BCC offwaketime's multi-line layout: the waker's line and its stack outermost first
// (user, then kernel), "--", the wakee's stack innermost first (kernel, then user), its
// line and the value; with -d a "-" line between the user and kernel parts of each.
void print_waker_multiline(std::ostream& os, const Entry& e, bool delimiter) {
  auto line = [&](const std::string& label, const std::string& rest) {
    std::string l = label;
    l.resize(16, ' ');
    os << "    " << l << " " << rest << "\n";
  };
  const Waker& w = e.waker;
  line("waker:", w.kind == WakerKind::Task ? w.comm + " " + std::to_string(w.tid) : w.name());
  const Stack& ws = w.stack;
  bool wuser = ws.want_user && (ws.user_missing || !ws.user.empty());
  bool wkernel = ws.want_kernel && (ws.kernel_missing || !ws.kernel.empty());
  if (ws.want_user) {
    if (ws.user_missing) os << "    [Missed User Stack]\n";
    for (auto it = ws.user.rbegin(); it != ws.user.rend() && !ws.user_missing; ++it) os << "    " << *it << "\n";
  }
  if (delimiter && wuser && wkernel) os << "    -\n";
  if (ws.want_kernel) {
    if (ws.kernel_missing) os << "    [Missed Kernel Stack]\n";
    for (auto it = ws.kernel.rbegin(); it != ws.kernel.rend() && !ws.kernel_missing; ++it)
      os << "    " << *it << "\n";
  }
  line("--", "--");
  const Stack& st = e.stack;
  bool kernel = st.want_kernel && (st.kernel_missing || !st.kernel.empty());
  bool user = st.want_user && (st.user_missing || !st.user.empty());
  if (st.want_kernel) {
    if (st.kernel_missing) os << "    [Missed Kernel Stack]\n";
    for (size_t i = 0; i < st.kernel.size() && !st.kernel_missing; ++i) os << "    " << st.kernel[i] << "\n";
  }
  if (delimiter && kernel && user) os << "    -\n";
  if (st.want_user) {
    if (st.user_missing) os << "    [Missed User Stack]\n";
    for (size_t i = 0; i < st.user.size() && !st.user_missing; ++i) os << "    " << st.user[i] << "\n";
  }
  line("target:", e.comm + " " + std::to_string(e.tid));
  os << "        " << e.total_ns / 1000 << "\n\n";
}

// One "offcputime.stack" record's own fields (its stack is added by write_stack_records).
nlohmann::json stack_fields(const Entry& e) {
  return {{"pid", e.pid},
          {"tid", e.tid},
          {"comm", e.comm},
          {"offcpu_total_ns", e.total_ns},
          {"offcpu_count", e.count},
          {"offcpu_max_ns", e.max_ns},
          // what the wait is, by the wait-site rules (common/wait_sites)
          {"wait_class", wait_kind_name(e.wait.kind)},
          {"wait_site_what", e.wait.what},
          {"wait_site_rule", e.wait.rule ? e.wait.rule->origin : e.declared_origin},
          {"wait_site_decided", e.wait.decided}};
}

nlohmann::json stack_fields_waker(const Entry& e) {
  nlohmann::json j = stack_fields(e);
  add_waker_fields(j, e.waker);
  return j;
}

nlohmann::json summary_fields(const Config& c, const Report& r) {
  nlohmann::json threads = nlohmann::json::array();
  uint64_t total = 0, count = 0;
  for (auto& t : thread_totals(r.entries)) {
    threads.push_back({{"pid", t.pid},
                       {"tid", t.tid},
                       {"comm", t.comm},
                       {"offcpu_total_ns", t.total_ns},
                       {"offcpu_count", t.count}});
    total += t.total_ns;
    count += t.count;
  }
  nlohmann::json j =
      stack_summary_fields({{"offcpu_total_ns", total}, {"offcpu_count", count}}, r.entries.size(), threads);
  j["wait_class_total_ns"] = wait_class_totals(r.entries);
  if (c.waker) j["waker_kind_total_ns"] = waker_kind_totals(r.entries);
  return j;
}

}  // namespace

void render(std::ostream& os, std::ostream& err, const Config& c, const Report& r) {
  if (c.json && c.waker)
    return write_stack_records(os, "offcputime", r.entries, by_total, stack_fields_waker, summary_fields(c, r),
                               r.window, r.dq);
  if (c.json)
    return write_stack_records(os, "offcputime", r.entries, by_total, stack_fields, summary_fields(c, r), r.window,
                               r.dq);
  if (c.folded) return write_folded_report(os, err, folded_lines(c, r.entries), r.dq);
  for (auto* e : sorted_by(r.entries, by_total, false)) {
    if (c.waker)
      print_waker_multiline(os, *e, c.delimiter);
    else
      print_stack_multiline(os, e->stack, e->comm, e->tid, e->total_ns / 1000, StackFormat{c.delimiter});
  }
  if (!r.entries.empty()) {  // by what the waits are (the wait-site rules)
    os << "off-CPU by wait class:";
    for (const auto& [k, ns] : wait_class_totals(r.entries))
      if (ns) os << " " << k << " " << fmt_ns(ns);
    os << "\n";
    if (c.waker) {
      os << "off-CPU by waker:";
      for (const auto& [k, ns] : waker_kind_totals(r.entries))
        if (ns) os << " " << k << " " << fmt_ns(ns);
      os << "\n";
    }
  }
  os << r.dq.to_text() << "\n";
  os.flush();
}

}  // namespace offcputime
