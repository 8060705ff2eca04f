// lockstat's table columns: one definition for text, CSV, JSON, --sort and --fields.
// Column names are the suite's JSON vocabulary (wait_total_ns, wait_p99_ns, ...); the
// short names users type (total, p99, contended, ...) stay accepted as aliases.
#include "tools/lockstat/internal.h"

namespace lockstat {
using namespace bpfdiag;

namespace {

// The wait columns both views share, in their display order.
template <typename R>
void add_wait_columns(std::vector<Column<R>>& cols, bool uprobes, bool p50_shown) {
  cols.emplace_back("wait_count", "CONT", 7, [](const R& r) { return Cell(r.contended); },
                    nullptr, true, std::vector<std::string>{"contended"});
  cols.emplace_back("calls", "CALLS", 8, [](const R& r) { return Cell(r.calls); }, nullptr, uprobes);
  cols.push_back(ns_column<R>("wait_total_ns", "TOTAL", [](const R& r) { return r.total_ns; }, true, {"total"}));
  cols.push_back(ns_column<R>("wait_max_ns", "MAX", [](const R& r) { return r.max_ns; }, true, {"max"}));
  cols.push_back(ns_column<R>("wait_avg_ns", "AVG", [](const R& r) { return r.avg_ns(); }, false, {"avg"}));
  cols.push_back(ns_column<R>("wait_p50_ns", "P50", [](const R& r) { return r.p50_ns; }, p50_shown, {"p50"}));
  cols.push_back(ns_column<R>("wait_p90_ns", "P90", [](const R& r) { return r.p90_ns; }, false, {"p90"}));
  cols.push_back(ns_column<R>("wait_p99_ns", "P99", [](const R& r) { return r.p99_ns; }, true, {"p99"}));
}

}  // namespace

Table<LockRow> lock_table(bool uprobes) {
  using R = LockRow;
  std::vector<Column<R>> cols = {
      {"kind", "KIND", -11, [](const R& r) { return Cell(r.kind); }},
      {"layer", "LAYER", -6, [](const R& r) { return Cell(r.layer); }, {}, false},
      {"pid", "PID", 6, [](const R& r) { return Cell(uint64_t(r.pid)); }},
      {"comm", "COMM", -15, [](const R& r) { return Cell(r.comm); }, {}, false},
      {"addr", "ADDR", -18, [](const R& r) { return Cell(hex_addr(r.addr)); }, {}, false},
  };
  add_wait_columns(cols, uprobes, true);
  cols.emplace_back("thread_count", "WTR", 3, [](const R& r) { return Cell(uint64_t(r.waiters.size())); },
                    nullptr, true, std::vector<std::string>{"waiters"});
  cols.emplace_back("lock", "LOCK", 0, [](const R& r) { return Cell(r.name()); });
  return Table<R>(cols);
}

Table<ThreadRow> thread_table(bool uprobes) {
  using R = ThreadRow;
  std::vector<Column<R>> cols = {
      {"pid", "PID", 7, [](const R& r) { return Cell(uint64_t(r.pid)); }},
      {"tid", "TID", 7, [](const R& r) { return Cell(uint64_t(r.tid)); }},
      {"comm", "COMM", -15, [](const R& r) { return Cell(r.comm); }},
  };
  add_wait_columns(cols, uprobes, false);
  cols.emplace_back("lock_count", "LOCKS", 5, [](const R& r) { return Cell(uint64_t(r.locks)); }, nullptr,
                    true, std::vector<std::string>{"locks"});
  cols.emplace_back("top_lock", "TOP LOCK", 0, [](const R& r) { return Cell(r.top_lock); });
  return Table<R>(cols);
}

}  // namespace lockstat
