// pmheld's report model: the lock table's columns (one definition for text, CSV,
// JSON, --sort and --fields) and the names shown for a lock.
#include "tools/pmheld/pmheld.h"

#include "common/unwind_maps.h"

namespace pmheld {
using namespace bpfdiag;

std::string lock_name(const LockHold& l) { return l.symbol.empty() ? hex_addr(l.addr) : l.symbol; }

const char kContendedSees[] = "contended holds only, timed from the first waiter; uncontended holds not seen";

DataQuality empty_dq(bool contended) {
  std::vector<std::string> keys = {"reacquired_without_unlock", "cond_waits", "failed_locks", "overflow_stacks"};
  if (contended)  // what the futex hand-off mode saw but could not time as a mutex hold (the
                  // uprobe mode's keys stay, at 0: every pmheld record has them)
    for (const char* k : {"other_futex_waits", "other_futex_wakes", "uncontended_wakes", "untimed_holds",
                          "pi_futex_ops"})
      keys.push_back(k);
  for (auto& u : unwind_dq_keys()) keys.push_back(u);  // --unwind=dwarf (zero with fp)
  return DataQuality::with_keys(keys);
}

Table<LockHold> lock_table(bool contended) {
  using L = LockHold;
  std::vector<Column<L>> cols = {
      {"pid", "PID", 7, [](const L& l) { return Cell(uint64_t(l.pid)); }},
      {"comm", "COMM", -15, [](const L& l) { return Cell(l.comm); }, {}, false},
      {"lock", "LOCK", -20, [](const L& l) { return Cell(lock_name(l)); }},
      {"addr", "ADDR", -14, [](const L& l) { return Cell(hex_addr(l.addr)); }, {}, false},
      {"hold_count", "COUNT", 9, [](const L& l) { return Cell(l.count); }, {}, true, {"count"}},
      ns_column<L>("hold_total_ns", "TOTAL", [](const L& l) { return l.total_ns; }, true, {"total"}),
      ns_column<L>("hold_avg_ns", "AVG", [](const L& l) { return l.hist.mean(); }, true, {"avg"}),
      ns_column<L>("hold_p50_ns", "P50", [](const L& l) { return l.hist.percentile(50); }, true, {"p50"}),
      ns_column<L>("hold_p90_ns", "P90", [](const L& l) { return l.hist.percentile(90); }, false, {"p90"}),
      ns_column<L>("hold_p99_ns", "P99", [](const L& l) { return l.hist.percentile(99); }, true, {"p99"}),
      ns_column<L>("hold_max_ns", "MAX", [](const L& l) { return l.max_ns; }, true, {"max"}),
  };
  if (contended) {  // who waited: the hand-off's own figures
    cols.push_back({"waiters_max", "WAITERS", 7, [](const L& l) { return Cell(l.waiters_max); }, {}, false,
                    {"waiters"}});
    cols.push_back({"waiters_avg", "AVGW", 5,
                    [](const L& l) { return Cell(l.count ? double(l.waiters_sum) / double(l.count) : 0.0); }, {},
                    false});
    cols.push_back({"hold_exact", "EXACT", 7, [](const L& l) { return Cell(l.exact); }, {}, false, {"exact"}});
  }
  return Table<L>(cols);
}

Status configure(Table<LockHold>& t, const Config& c) {
  if (auto st = t.set_sort(c.sort)) return st;
  if (!c.fields.empty())
    if (auto st = t.set_fields(c.fields)) return st;
  t.set_entries(c.entries);
  return std::nullopt;
}

std::string lost_stacks_warning(const Config& c, const DataQuality& dq) {
  if (!dq.lost_stacks) return "";
  // The stack table keeps every distinct stack for the whole run (stat keys refer to
  // them across intervals), so only a larger table helps, not reporting more often.
  return "warning: " + std::to_string(dq.lost_stacks) +
         " acquiring stacks were lost (stack table full or hash collision); try "
         "--stack-storage-size " +
         std::to_string(std::min<uint64_t>(c.stack_storage_size * 4, 262144)) + "\n";
}

}  // namespace pmheld
