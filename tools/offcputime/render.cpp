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

nlohmann::json summary_fields(const Report& r) {
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
  return j;
}

}  // namespace

void render(std::ostream& os, std::ostream& err, const Config& c, const Report& r) {
  if (c.json)
    return write_stack_records(os, "offcputime", r.entries, by_total, stack_fields, summary_fields(r), r.window,
                               r.dq);
  if (c.folded) return write_folded_report(os, err, folded_lines(c, r.entries), r.dq);
  for (auto* e : sorted_by(r.entries, by_total, false))
    print_stack_multiline(os, e->stack, e->comm, e->tid, e->total_ns / 1000, StackFormat{c.delimiter});
  if (!r.entries.empty()) {  // by what the waits are (the wait-site rules)
    os << "off-CPU by wait class:";
    for (const auto& [k, ns] : wait_class_totals(r.entries))
      if (ns) os << " " << k << " " << fmt_ns(ns);
    os << "\n";
  }
  os << r.dq.to_text() << "\n";
  os.flush();
}

}  // namespace offcputime
