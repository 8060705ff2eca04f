// offcputime's model: entries merged as they render, per-thread totals, folded lines,
// the warnings at the end of a run, the start record's fields and the banner.
#include <algorithm>
#include <map>

#include "common/parse.h"
#include "common/unwind_maps.h"
#include "tools/offcputime/offcputime.h"

namespace offcputime {
using namespace bpfdiag;

const std::vector<std::string>& dq_keys() {
  // seen_full: a new process was not announced (symbols only, no time lost);
  // overflow_stacks: stacks kept in the overflow map (not lost); unknown_frames:
  // frames no symbol names; processes_gone_before_seen: exited before their maps
  // could be read; symbolize_skipped: user frames left unnamed because the report was
  // due (Ctrl-C) before their symbols were loaded; dropped_periods: off-CPU periods whose switch-in was not seen;
  // recovered_periods: of those, the ones ended at the arrival the scheduler recorded
  // (bpf_sources/arrival.h: counted in full, not lost); debuginfod_files /
  // debuginfod_failed: DEBUGINFOD_URLS lookups that named a file's frames / that named
  // nothing (common/debuginfod.h).
  static const std::vector<std::string> keys = [] {
    // waker_unseen (--waker): blocked periods counted with no wakeup recorded ([unknown])
    std::vector<std::string> k = {"seen_full",         "overflow_stacks",   "unknown_frames", "processes_gone_before_seen",
                                  "symbolize_skipped", "dropped_periods",   "recovered_periods", "stale_begins",
                                  "waker_unseen",      "debuginfod_files",  "debuginfod_failed"};
    for (auto& u : unwind_dq_keys()) k.push_back(u);  // --unwind=dwarf (zero with fp)
    return k;
  }();
  return keys;
}

const char* waker_kind_name(WakerKind k) {
  switch (k) {
    case WakerKind::Task: return "task";
    case WakerKind::Interrupt: return "interrupt";
    case WakerKind::Preempted: return "preempted";
    case WakerKind::Unseen: break;
  }
  return "unknown";
}

std::string Waker::name() const {
  return kind == WakerKind::Task ? comm : std::string("[") + waker_kind_name(kind) + "]";
}

bool Waker::operator<(const Waker& o) const {
  auto key = [](const Waker& w) {
    return std::tie(w.kind, w.pid, w.tid, w.comm, w.stack.kernel, w.stack.user, w.stack.kernel_missing,
                    w.stack.user_missing);
  };
  return key(*this) < key(o);
}

void trim_interrupted(std::vector<std::string>& kernel) {
  for (size_t i = 0; i < kernel.size(); ++i)
    if (kernel[i].rfind("asm_", 0) == 0) {  // the interrupt's entry (idtentry): keep it, drop the rest
      kernel.resize(i + 1);
      return;
    }
}

bool interrupt_frames(const std::vector<std::string>& kernel) {
  // x86-64 interrupt entries (idtentry: asm_sysvec_*, asm_common_interrupt; FRED:
  // fred_extint, fred_sysvec_*), the handlers they call, and softirq processing (after
  // an interrupt, at local_bh_enable, or in ksoftirqd). Exceptions (asm_exc_*: a page
  // fault) are the task's own.
  static const char* const kPrefixes[] = {"asm_sysvec_",   "sysvec_",         "__sysvec_",    "asm_common_interrupt",
                                          "common_interrupt", "fred_extint",  "fred_sysvec_", "handle_softirqs",
                                          "__do_softirq",  "do_softirq",      "irq_exit_rcu", "__irq_exit_rcu",
                                          "handle_irq_event", "asm_spurious_interrupt"};
  for (const auto& f : kernel)
    for (const char* p : kPrefixes)
      if (f.rfind(p, 0) == 0) return true;
  return false;
}

void classify_waker(Waker& w) {
  if (w.kind != WakerKind::Task || !interrupt_frames(w.stack.kernel)) return;
  w.kind = WakerKind::Interrupt;  // current was only interrupted: not the waker
  w.pid = w.tid = 0;
  w.comm.clear();
  w.stack.user.clear();
  w.stack.user_missing = false;
  trim_interrupted(w.stack.kernel);
}

std::string waker_folded_suffix(const Waker& w) {
  std::string out = ";--";
  const Stack& st = w.stack;
  bool kernel_part = false;
  if (st.want_kernel) {
    if (st.kernel_missing) {
      out += ";[Missed Kernel Stack]";
      kernel_part = true;
    } else {
      for (auto& f : st.kernel) out += ";" + folded_frame(f);
      kernel_part = !st.kernel.empty();
    }
  }
  if (st.want_user) {
    bool user_part = st.user_missing || !st.user.empty();
    if (kernel_part && user_part) out += ";-";
    if (st.user_missing)
      out += ";[Missed User Stack]";
    else
      for (auto& f : st.user) out += ";" + folded_frame(f);
  }
  return out + ";" + folded_frame(w.name());
}

std::map<std::string, uint64_t> waker_kind_totals(const std::vector<Entry>& entries) {
  std::map<std::string, uint64_t> by;
  for (auto k : {WakerKind::Unseen, WakerKind::Task, WakerKind::Interrupt, WakerKind::Preempted})
    by[waker_kind_name(k)] = 0;
  for (const auto& e : entries) by[waker_kind_name(e.waker.kind)] += e.total_ns;
  return by;
}

// Stack ids that differ only in frames symbolization drops (the tracing path's own
// frames) or cannot name render the same; report them as one entry.
void merge_identical(std::vector<Entry>& entries) {
  merge_identical_stacks_by(
      entries,
      [](Entry& m, const Entry& e) {
        m.total_ns += e.total_ns;
        m.count += e.count;
        m.max_ns = std::max(m.max_ns, e.max_ns);
      },
      // waits of other kinds, and (--waker) other wakers, stay apart
      [](const Entry& e) { return std::make_pair(e.declared << 1 | e.runnable, e.waker); });
}

void classify_waits(std::vector<Entry>& entries, const std::function<const DeclaredName*(uint64_t)>& declared) {
  const WaitRules& rules = WaitRules::suite();
  std::vector<std::string> frames;
  for (auto& e : entries) {
    if (e.runnable) {  // the task's own state says it: it wanted a CPU
      e.wait = WaitVerdict{WaitKind::Cpu, "runnable: preempted or yielded, waiting for a CPU", std::string::npos, true,
                           false, nullptr};
      continue;
    }
    if (const DeclaredName* d = e.declared && declared ? declared(e.declared) : nullptr) {
      e.wait = WaitVerdict{d->kind, d->what, std::string::npos, true, false, nullptr};
      e.declared_origin = d->origin;
      continue;
    }
    frames = e.stack.kernel;  // innermost first: the kernel's frames, then the user's
    frames.insert(frames.end(), e.stack.user.begin(), e.stack.user.end());
    e.wait = rules.classify(frames);
  }
}

std::map<std::string, uint64_t> wait_class_totals(const std::vector<Entry>& entries) {
  std::map<std::string, uint64_t> by;
  for (int k = 0; k <= int(WaitKind::Unclassified); ++k) by[wait_kind_name(WaitKind(k))] = 0;  // every class
  for (const auto& e : entries) by[wait_kind_name(e.wait.kind)] += e.total_ns;
  return by;
}

std::vector<ThreadTotal> thread_totals(const std::vector<Entry>& entries) {
  std::map<std::pair<uint32_t, uint32_t>, ThreadTotal> by_thread;
  for (auto& e : entries) {
    auto& t = by_thread[{e.pid, e.tid}];
    if (t.comm.empty()) t = ThreadTotal{e.pid, e.tid, e.comm, 0, 0};
    t.total_ns += e.total_ns;
    t.count += e.count;
  }
  std::vector<ThreadTotal> out;
  for (auto& [k, t] : by_thread) out.push_back(t);
  return out;
}

void add_folded(FoldedSet& set, const Config& c, const std::vector<Entry>& entries) {
  if (!c.waker) return add_folded_entries(set, entries, c.per_thread, [](const Entry& e) { return e.total_ns; });
  for (auto& e : entries)  // BCC offwaketime's lines: wakee;...;--;waker frames...;waker
    set.add(folded_name(e.comm, e.pid, e.tid, c.per_thread), e.stack, e.total_ns, waker_folded_suffix(e.waker));
}

std::vector<std::string> folded_lines(const Config& c, const std::vector<Entry>& entries) {
  FoldedSet set;
  add_folded(set, c, entries);
  return set.lines(1000);  // values in microseconds
}

std::vector<std::string> warnings(const Config& c, const DataQuality& dq) {
  std::vector<std::string> w;
  uint64_t bigger_maps = std::min<uint64_t>(c.map_entries * 4, 1048576);
  if (dq.lost_stacks)
    w.push_back("warning: " + std::to_string(dq.lost_stacks) +
                " stack traces could not be stored (hash collision or full table); try "
                "--stack-storage-size " + std::to_string(std::min<uint64_t>(
                    (c.stack_storage_size ? c.stack_storage_size : kDefaultStackStorage) * 4, 262144)));
  if (dq.map_full)
    w.push_back("warning: " + std::to_string(dq.map_full) +
                " off-CPU periods were dropped because a map was full; try --map-entries " +
                std::to_string(bigger_maps));
  auto sf = dq.extra.find("seen_full");
  if (sf != dq.extra.end() && sf->second)
    w.push_back("warning: " + std::to_string(sf->second) + " new processes were not announced because " +
                std::to_string(c.map_entries) + " live processes were already tracked (no periods were " +
                "dropped; their stacks may show [unknown] if they exited early); try --map-entries " +
                std::to_string(bigger_maps));
  auto sk = dq.extra.find("symbolize_skipped");
  if (sk != dq.extra.end() && sk->second)
    w.push_back("warning: " + std::to_string(sk->second) + " user frames were left unnamed: the report " +
                "was due (stop signal) before their symbols were loaded; give a duration (e.g. " +
                "offcputime 10) to name them all");
  return w;
}

nlohmann::json start_fields(const Config& c, uint64_t probes) {
  auto opt_ns = [](uint64_t v, bool set) { return set ? nlohmann::json(v) : nlohmann::json(nullptr); };
  const Schedule& s = c.schedule;
  nlohmann::json f = start_record_fields(c.pids, c.tids, probes,
                             {{"user_threads_only", c.user_threads_only},
                              {"kernel_threads_only", c.kernel_threads_only},
                              {"user_stacks_only", c.user_stacks_only},
                              {"kernel_stacks_only", c.kernel_stacks_only},
                              {"min_ns", c.min_ns},
                              {"max_ns", opt_ns(c.max_ns, c.max_ns != 0)},
                              {"state", opt_ns(c.state.value_or(0), c.state.has_value())},
                              {"stack_storage_size", c.stack_storage_size},
                              {"map_entries", c.map_entries},
                              {"unwind", c.unwind_dwarf ? "dwarf" : "fp"},
                              {"waker", c.waker},
                              {"interval_ns", opt_ns(s.interval_ns.value_or(0), s.interval_ns.has_value())},
                              {"duration_ns", opt_ns(s.duration_ns.value_or(0), s.duration_ns.has_value())}});
  if (c.cgroup) f["cgroup"] = cgroup_json(c.cgroup);
  return f;
}

std::string traced_text(const Config& c) {
  std::string who = stack_targets_text(c);
  if (c.user_threads_only) who += " (user threads)";
  if (c.kernel_threads_only) who += " (kernel threads)";
  std::string what = stack_parts_text(c);
  std::string how = c.kernel_stacks_only ? ""
                    : c.unwind_dwarf      ? " (user stacks: DWARF unwinding)"
                                          : " (user stacks: frame pointers)";
  std::string wakers = c.waker ? " and waker" : "";
  return "off-CPU time (us) of " + who + " by " + what + " stack" + wakers + how;
}

std::string banner(const Config& c) { return "Tracing " + traced_text(c) + banner_until(c.schedule); }

}  // namespace offcputime
