// lockstat's reports: text, CSV and NDJSON, written to an injected stream. Both
// views (locks, -P threads) go through one path: rows from the report model, the
// table's columns for text, CSV and the JSON object of each row, then one summary.
#include <algorithm>
#include <cstdio>
#include <set>

#include "tools/lockstat/internal.h"

namespace lockstat {
using namespace bpfdiag;

namespace {

std::string site_chain(const SiteRow& s) {
  std::string out = s.site;
  // the call site, then up to two outer frames after it
  auto it = std::find(s.stack.begin(), s.stack.end(), s.site);
  if (it == s.stack.end()) return out;
  int more = 0;
  for (++it; it != s.stack.end() && more < 2; ++it, ++more) out += " <- " + *it;
  return out;
}

void render_lock_details(std::ostream& os, const Config& c, const LockRow& r) {
  char line[256];
  std::string rd = reading(r);
  if (!rd.empty()) os << "    " << rd << "\n";
  for (size_t i = 0; i < r.waiters.size() && i < c.stacks; ++i) {
    const auto& w = r.waiters[i];
    std::snprintf(line, sizeof line, "    waiter %7u %-15s %8llu %7s max %s\n", w.tid, w.comm.c_str(),
                  static_cast<unsigned long long>(w.contended), fmt_ns(w.total_ns).c_str(),
                  fmt_ns(w.max_ns).c_str());
    os << line;
  }
  for (size_t i = 0; i < r.sites.size() && i < c.stacks; ++i) {
    const auto& s = r.sites[i];
    std::snprintf(line, sizeof line, "    site   %8llu %7s  ", static_cast<unsigned long long>(s.contended),
                  fmt_ns(s.total_ns).c_str());
    os << line << site_chain(s) << "\n";
  }
  if (!r.sites.empty() && c.stacks && r.site_samples < r.contended) {
    std::snprintf(line, sizeof line, "    (sites scaled from the stacks of %llu of %llu waits)\n",
                  static_cast<unsigned long long>(r.site_samples), static_cast<unsigned long long>(r.contended));
    os << line;
  }
  if (c.hist) {
    os << "\n";
    print_log2_hist(os, r.hist.log2_slots(), "nsecs");
  }
}

// --- JSON --------------------------------------------------------------------------

// A call site: its name, its stack (user or kernel, as the lock's layer) and waits.
nlohmann::json site_json(const SiteRow& s, bool kernel) {
  Stack st;
  st.want_user = !kernel;
  st.want_kernel = kernel;
  (kernel ? st.kernel : st.user) = s.stack;
  (kernel ? st.kernel_missing : st.user_missing) = s.stack.empty();
  nlohmann::json j = stack_json(st);
  j["site"] = s.site;
  j["wait_count"] = s.contended;
  j["wait_total_ns"] = s.total_ns;
  return j;
}

nlohmann::json lock_fields(const Table<LockRow>& t, const LockRow& r, const Config& c) {
  nlohmann::json j = t.to_json(r);
  nlohmann::json threads = nlohmann::json::array(), sites = nlohmann::json::array();
  const size_t list_max = std::max<size_t>(c.stacks, 10);  // JSON lists: at least 10
  for (size_t k = 0; k < r.waiters.size() && k < list_max; ++k) {
    const auto& w = r.waiters[k];
    threads.push_back({{"tid", w.tid}, {"comm", w.comm}, {"wait_count", w.contended},
                       {"wait_total_ns", w.total_ns}, {"wait_max_ns", w.max_ns}});
  }
  for (size_t k = 0; k < r.sites.size() && k < list_max; ++k) sites.push_back(site_json(r.sites[k], r.layer == "kernel"));
  j["class"] = wait_class_name(r.cls);
  j["symbol"] = r.symbol;
  j["wait_site_what"] = r.wait_what;      // the wait-site rule's words ("" when none matched)
  j["wait_site_rule"] = r.wait_rule;      // that rule's file:line
  j["wait_site_decided"] = r.wait_decided;
  j["word_count"] = r.layer == "kernel" ? uint64_t(1) : uint64_t(r.words.size());
  j["reading"] = reading(r);
  j["max_wait_share"] = r.max_share;
  j["timeout_count"] = r.timedout;
  j["wake_count"] = r.wakes;
  j["peer_wake_count"] = r.peer_wakes;
  j["threads"] = threads;
  j["sites"] = sites;
  j["site_sample_count"] = r.site_samples;
  if (c.hist) j["wait_hist"] = r.hist.to_json();
  return j;
}

nlohmann::json thread_fields(const Table<ThreadRow>& t, const ThreadRow& r, const Config& c) {
  nlohmann::json j = t.to_json(r);
  if (c.hist) j["wait_hist"] = r.hist.to_json();
  return j;
}

// The report's totals, the same keys in both views (over the contended locks).
nlohmann::json summary_fields(const Report& rep, const Config& c) {
  uint64_t waits = 0, total = 0, other_ns = 0;
  std::set<uint32_t> tids;
  for (const auto& r : rep.locks) {
    waits += r.contended, total += r.total_ns;
    for (const auto& w : r.waiters) tids.insert(w.tid);
  }
  for (const auto& r : rep.other) other_ns += r.total_ns;
  return {{"view", c.per_thread ? "threads" : "locks"},
          {"lock_count", rep.locks.size()},
          {"thread_count", c.per_thread ? rep.threads.size() : tids.size()},
          {"wait_count", waits},
          {"wait_total_ns", total},
          {"other_lock_count", rep.other.size()},
          {"other_wait_total_ns", other_ns},
          {"probe_cost_ns", c.probe_cost_ns}};
}

// The first --entries rows of a table as `lockstat.<kind>` records.
template <typename Row, typename Fields>
void emit_rows(std::ostream& os, const Table<Row>& t, const std::vector<Row>& rows, const char* kind,
               const Window& w, const DataQuality& dq, Fields fields) {
  for (size_t i = 0; i < t.shown_rows(rows); ++i)
    write_record(os, make_record("lockstat", kind, w, fields(rows[i]), dq));
}

// --- text --------------------------------------------------------------------------

void text_locks(std::ostream& os, const Config& c, const Table<LockRow>& t, const Report& rep) {
  auto section = [&](const std::vector<LockRow>& rs, const char* more) {
    os << t.header_line() << "\n";
    for (size_t i = 0; i < t.shown_rows(rs); ++i) {
      os << t.row_line(rs[i]) << "\n";
      render_lock_details(os, c, rs[i]);
    }
    if (t.shown_rows(rs) < rs.size()) os << "(" << rs.size() - t.shown_rows(rs) << more << "; -n 0 shows all)\n";
  };
  if (rep.locks.empty()) os << "No lock contention seen.\n";
  else section(rep.locks, " more locks");
  if (!rep.other.empty()) {
    os << "\nWaits that are not ranked as lock contention (condition, idle, timed, GIL, uncontended, unclassified):\n";
    section(rep.other, " more");
  }
}

void text_threads(std::ostream& os, const Config& c, const Table<ThreadRow>& t, const std::vector<ThreadRow>& rows) {
  if (rows.empty()) os << "No lock contention seen.\n";
  else t.print_text(os, rows);
  if (c.hist)
    for (size_t i = 0; i < t.shown_rows(rows); ++i) {
      os << "\ntid " << rows[i].tid << " (" << rows[i].comm << ")\n";
      print_log2_hist(os, rows[i].hist.log2_slots(), "nsecs");
    }
}

}  // namespace

void render(std::ostream& os, std::ostream& err, const Config& c, const Snapshot& s, const Names& n,
            const Window& w) {
  Report rep = build_report(s, n, c);
  auto lt = lock_table(c.uprobes);
  auto tt = thread_table(c.uprobes);
  if (c.per_thread) configure(tt, c);
  else configure(lt, c);
  if (c.json) {
    if (c.per_thread) {
      emit_rows(os, tt, rep.threads, "thread", w, s.dq, [&](const ThreadRow& r) { return thread_fields(tt, r, c); });
    } else {
      auto fields = [&](const LockRow& r) { return lock_fields(lt, r, c); };
      emit_rows(os, lt, rep.locks, "lock", w, s.dq, fields);
      emit_rows(os, lt, rep.other, "lock", w, s.dq, fields);
    }
    write_record(os, make_record("lockstat", "summary", w, summary_fields(rep, c), s.dq));
    return;
  }
  if (c.csv) {
    if (c.per_thread) tt.print_csv(os, rep.threads);
    else lt.print_csv(os, rep.locks);
    os.flush();
    err << s.dq.to_text() << std::endl;  // the CSV stays pure
    return;
  }
  if (c.timestamp) os << clock_hms() << "\n";
  if (c.per_thread) text_threads(os, c, tt, rep.threads);
  else text_locks(os, c, lt, rep);
  if (c.uprobes)  // see OVERHEAD in lockstat(8)
    os << "--uprobes: each call's time excludes " << c.probe_cost_ns
       << " ns of probe cost (calibrated at startup, then tracked on uncontended calls).\n"
          "Probed calls run slower, so holds and contention grow: for wait totals\n"
          "prefer futex mode; use --uprobes for call sites and call counts.\n";
  os << s.dq.to_text() << "\n";
  os.flush();
}

}  // namespace lockstat
