// profile's renderers: BCC's multi-line stacks, folded lines, NDJSON records.
#include <algorithm>

#include "common/output.h"
#include "common/stacks.h"
#include "tools/profile/profile.h"

namespace profile {
using namespace bpfdiag;

namespace {

uint64_t by_samples(const Entry& e) { return e.samples; }

nlohmann::json stack_fields(const Entry& e) {
  nlohmann::json j = {{"pid", e.pid}, {"tid", e.tid}, {"comm", e.comm}, {"sample_count", e.samples}};
  const nlohmann::json st = stack_json(e.stack);
  for (auto it = st.begin(); it != st.end(); ++it) j[it.key()] = it.value();
  return j;
}

nlohmann::json summary_fields(const Report& r) {
  nlohmann::json threads = nlohmann::json::array();
  uint64_t total = 0;
  for (auto& t : thread_totals(r.entries)) {
    threads.push_back({{"pid", t.pid}, {"tid", t.tid}, {"comm", t.comm}, {"sample_count", t.samples}});
    total += t.samples;
  }
  return {{"sample_count", total},
          {"frequency_hz", r.freq_hz},
          {"stack_count", r.entries.size()},
          {"thread_count", threads.size()},
          {"threads", threads}};
}

}  // namespace

void render(std::ostream& os, std::ostream& err, const Config& c, const Report& r) {
  if (c.json) {
    for (auto* e : sorted_by(r.entries, by_samples, true))
      write_record(os, make_record("profile", "stack", r.window, stack_fields(*e), r.dq));
    write_record(os, make_record("profile", "summary", r.window, summary_fields(r), r.dq));
    return;
  }
  if (c.folded) return write_folded_report(os, err, folded(c, r.entries).lines(), r.dq);
  for (auto* e : sorted_by(r.entries, by_samples, false))
    print_stack_multiline(os, e->stack, e->comm, e->pid, e->samples, StackFormat{c.delimiter});
  os << r.dq.to_text() << "\n";
  os.flush();
}

}  // namespace profile
