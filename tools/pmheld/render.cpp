// pmheld's reports: text, CSV and NDJSON, written to an injected stream.
#include <algorithm>
#include <cstdio>

#include "common/stacks.h"
#include "tools/pmheld/pmheld.h"

namespace pmheld {
using namespace bpfdiag;

namespace {

// A pmheld.lock record's own fields: the table's columns, then the symbol, the
// histogram and the acquiring stacks.
nlohmann::json lock_fields(const Table<LockHold>& t, const LockHold& l) {
  nlohmann::json j = t.to_json(l);
  nlohmann::json stacks = nlohmann::json::array();
  for (const auto& s : l.stacks) {
    Stack st;
    st.want_kernel = false;
    st.user = s.frames;
    st.user_missing = s.missing;
    nlohmann::json sj = stack_json(st);
    sj["hold_count"] = s.count;
    sj["hold_total_ns"] = s.total_ns;
    sj["hold_max_ns"] = s.max_ns;
    stacks.push_back(sj);
  }
  j["symbol"] = l.symbol;
  j["hold_hist"] = l.hist.to_json();
  j["stacks"] = stacks;
  return j;
}

void text_lock(std::ostream& os, const Config& c, const LockHold& l) {
  os << "\n" << lock_name(l) << (l.symbol.empty() ? "" : " (" + hex_addr(l.addr) + ")") << " in "
     << (l.comm.empty() ? "[exited]" : l.comm) << " (" << l.pid << "): " << l.count
     << (c.contended ? " contended holds" : " holds") << ", total " << fmt_ns(l.total_ns) << ", p50 "
     << fmt_ns(l.hist.percentile(50)) << ", p99 " << fmt_ns(l.hist.percentile(99)) << ", max " << fmt_ns(l.max_ns)
     << "\n";
  if (c.contended) {
    char avg[32];
    std::snprintf(avg, sizeof avg, "%.1f", l.count ? double(l.waiters_sum) / double(l.count) : 0.0);
    os << "  waiters at the unlock: max " << l.waiters_max << ", avg " << avg << "; " << l.exact << " of "
       << l.count << " holds timed from the holder's own wake-up, the rest from the first waiter\n";
  }
  if (!c.no_hist) print_log2_hist(os, l.hist.log2_slots(), "nsecs");
  for (size_t k = 0; k < l.stacks.size() && k < c.stacks; ++k) {
    const StackHold& s = l.stacks[k];
    os << "  " << (c.contended ? "releasing " : "") << "stack " << k + 1 << ": holds " << s.count << ", total "
       << fmt_ns(s.total_ns) << ", max " << fmt_ns(s.max_ns) << "; total hold in ns below\n";
    Stack st;
    st.want_kernel = false;
    st.user_missing = s.missing;
    st.user = s.frames;
    print_stack_multiline(os, st, l.comm, l.pid, s.total_ns);
  }
  if (l.stacks.size() > c.stacks && c.stacks) os << "    (" << l.stacks.size() - c.stacks << " more stacks)\n";
}

}  // namespace

void render(std::ostream& os, std::ostream& err, const Config& c, std::vector<LockHold> locks,
            const DataQuality& dq, const Window& w) {
  auto t = lock_table(c.contended);
  configure(t, c);
  t.sort(locks);
  const size_t shown = t.shown_rows(locks);
  if (c.json) {
    for (size_t i = 0; i < shown; ++i) write_record(os, make_record("pmheld", "lock", w, lock_fields(t, locks[i]), dq));
    uint64_t holds = 0, total = 0;
    for (const auto& l : locks) holds += l.count, total += l.total_ns;
    nlohmann::json sum = {{"lock_count", locks.size()}, {"hold_count", holds}, {"hold_total_ns", total}};
    if (c.contended) sum["mode"] = "contended", sum["sees"] = std::string(kContendedSees);
    write_record(os, make_record("pmheld", "summary", w, sum, dq));
    return;
  }
  if (c.csv) {
    t.print_csv(os, locks);
    os.flush();
    err << dq.to_text() << std::endl;  // the CSV stays pure
    err << lost_stacks_warning(c, dq);
    return;
  }
  if (c.timestamp) os << clock_hms() << "\n";
  if (c.contended) os << "[" << kContendedSees << "; stacks are the holders' at the unlock]\n";
  if (locks.empty()) {
    os << (c.contended ? "no contended mutex holds ended in this interval\n" : "no mutex holds ended in this interval\n");
  } else {
    t.print_text(os, locks);
    for (size_t i = 0; i < shown && (!c.no_hist || c.stacks); ++i) text_lock(os, c, locks[i]);
    if (shown < locks.size()) os << "\n(" << locks.size() - shown << " more locks; see -n)\n";
  }
  if (!dq.clean() || w.final) os << dq.to_text() << "\n";
  os << lost_stacks_warning(c, dq);
  os.flush();
}

}  // namespace pmheld
