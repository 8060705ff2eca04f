// profile's renderers: BCC's multi-line stacks, folded lines, NDJSON records.
#include <algorithm>

#include "common/output.h"
#include "common/stacks.h"
#include "tools/profile/profile.h"

namespace profile {
using namespace bpfdiag;

namespace {

uint64_t by_samples(const Entry& e) { return e.samples; }

// One "profile.stack" record's own fields (its stack is added by write_stack_records).
nlohmann::json stack_fields(const Entry& e) {
  return {{"pid", e.pid}, {"tid", e.tid}, {"comm", e.comm}, {"sample_count", e.samples}};
}

nlohmann::json summary_fields(const Report& r) {
  nlohmann::json threads = nlohmann::json::array();
  uint64_t total = 0;
  for (auto& t : thread_totals(r.entries)) {
    threads.push_back({{"pid", t.pid}, {"tid", t.tid}, {"comm", t.comm}, {"sample_count", t.samples}});
    total += t.samples;
  }
  return stack_summary_fields({{"sample_count", total}, {"frequency_hz", r.freq_hz}}, r.entries.size(), threads);
}

}  // namespace

void render(std::ostream& os, std::ostream& err, const Config& c, const Report& r) {
  if (c.json)
    return write_stack_records(os, "profile", r.entries, by_samples, stack_fields, summary_fields(r), r.window, r.dq);
  if (c.folded) return write_folded_report(os, err, folded(c, r.entries).lines(), r.dq);
  for (auto* e : sorted_by(r.entries, by_samples, false))
    print_stack_multiline(os, e->stack, e->comm, e->pid, e->samples, StackFormat{c.delimiter});
  os << r.dq.to_text() << "\n";
  os.flush();
}

}  // namespace profile
