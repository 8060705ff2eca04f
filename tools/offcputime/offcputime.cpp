#include "tools/offcputime/offcputime.h"

#include <bcc/BPF.h>
#include <linux/types.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <map>
#include <tuple>

#include "common/bpf_session.h"
#include "common/btf.h"
#include "common/cli.h"
#include "common/embedded.h"
#include "common/filters.h"
#include "common/proc.h"
#include "common/symbolize.h"

extern "C" {
#include "offcputime_shared.h"
}
static_assert(sizeof(offcpu_key) == 32, "offcpu_key layout shared with BPF");
static_assert(sizeof(offcpu_val) == 24, "offcpu_val layout shared with BPF");
static_assert(sizeof(offcpu_start) == 40, "offcpu_start layout shared with BPF");

namespace bpfdiag {
extern const EmbeddedFile kBpf_offcputime[];
}

namespace offcputime {
using namespace bpfdiag;

const char kHelp[] = R"(offcputime - summarize off-CPU time by stack: where do threads wait?

USAGE: offcputime [-p PID] [-t TID] [-u|-k] [-U|-K] [-d] [-f] [-P] [-m US] [-M US] [-j] [duration]

Every time a thread leaves a CPU, its user and kernel stacks are recorded; when
it runs again, the time it spent off-CPU is added to that stack (in the kernel).
Uses the sched_switch tracepoint only (no kprobes). Times are in microseconds.

TARGET OPTIONS:
  -p, --pid PID[,PID]   trace these processes only
  -t, --tid TID[,TID]   trace these threads only
  -u, --user-threads-only    user threads only (no kernel threads)
  -k, --kernel-threads-only  kernel threads only (no user threads)
      --state STATE     only blocks in this task state: 0 = running/preempted
                        (exact match), otherwise a bitmask (1 = interruptible
                        sleep, 2 = uninterruptible)
  -m, --min-block-time US  only blocks of at least US microseconds (default 1)
  -M, --max-block-time US  only blocks of at most US microseconds

OUTPUT OPTIONS:
  -U, --user-stacks-only    show user space stacks only
  -K, --kernel-stacks-only  show kernel space stacks only
  -d, --delimited       insert "--" between kernel and user stacks
  -f, --folded          folded output for flamegraph.pl and speedscope
  -P, --per-thread      folded: name threads "comm-PID/TID" so they never merge
  -j, --json            one NDJSON record with every stack (times in ns)
      --ebpf            print the BPF program and exit

LIMITS:
      --stack-storage-size N  stack traces kept (default 16384, 1-262144)
      --map-size N          threads/stacks tracked (default 32768, 1024-1048576)
  -h, --help            show this help

EXAMPLES:
  offcputime             # trace off-CPU stack time until Ctrl-C
  offcputime 5           # trace for 5 seconds only
  offcputime -df 5       # 5 seconds, folded output with a "-" user/kernel frame
  offcputime -m 1000     # trace only blocks of at least 1 ms
  offcputime -M 10000    # trace only blocks of at most 10 ms
  offcputime -p 185      # only trace threads of PID 185
  offcputime -t 188      # only trace thread 188
  offcputime -u          # only trace user threads (no kernel threads)
  offcputime -k          # only trace kernel threads
  offcputime -U          # only show user space stacks (no kernel)
  offcputime -K          # only show kernel space stacks (no user)
  offcputime --state 2   # only blocks in uninterruptible sleep (D)
  offcputime -fP -p 185 5 > out.folded  # per-thread flame graph input
  offcputime -j 5        # JSON: every stack with total_ns, count, max_ns
)";

namespace {
constexpr uint64_t kMaxUs = 86400ULL * 1000000ULL;  // one day
}

Result<Config> parse_args(int argc, char** argv) {
  cxxopts::Options opts("offcputime");
  opts.add_options()("h,help", "")("p,pid", "", cxxopts::value<std::string>())(
      "t,tid", "", cxxopts::value<std::string>())("u,user-threads-only", "")(
      "k,kernel-threads-only", "")("U,user-stacks-only", "")("K,kernel-stacks-only", "")(
      "d,delimited", "")("f,folded", "")("P,per-thread", "")(
      "m,min-block-time", "", cxxopts::value<std::string>())(
      "M,max-block-time", "", cxxopts::value<std::string>())("state", "", cxxopts::value<std::string>())(
      "stack-storage-size", "", cxxopts::value<std::string>())(
      "map-size", "", cxxopts::value<std::string>())("j,json", "")("ebpf", "");
  add_positionals(opts);
  auto r = parse_cli(opts, argc, argv);
  if (!r) return Error{r.error()};
  Config c;
  c.help = r->count("help");
  if (auto p = opt_str(*r, "pid")) {
    auto v = parse_id_list(*p, "PID");
    if (!v) return Error{v.error()};
    c.pids = *v;
  }
  if (auto t = opt_str(*r, "tid")) {
    auto v = parse_id_list(*t, "TID");
    if (!v) return Error{v.error()};
    c.tids = *v;
  }
  c.user_threads_only = r->count("user-threads-only");
  c.kernel_threads_only = r->count("kernel-threads-only");
  if (c.user_threads_only && c.kernel_threads_only)
    return Error{"-u and -k are mutually exclusive (user or kernel threads)"};
  c.user_stacks_only = r->count("user-stacks-only");
  c.kernel_stacks_only = r->count("kernel-stacks-only");
  if (c.user_stacks_only && c.kernel_stacks_only)
    return Error{"-U and -K are mutually exclusive (user or kernel stacks)"};
  if (c.kernel_threads_only && c.user_stacks_only)
    return Error{"-k with -U shows nothing: kernel threads have no user stack"};
  c.delimiter = r->count("delimited");
  c.folded = r->count("folded");
  c.per_thread = r->count("per-thread");
  c.json = r->count("json");
  c.ebpf = r->count("ebpf");
  if (c.folded && c.json) return Error{"-f and -j are mutually exclusive (choose one output)"};
  if (auto m = opt_str(*r, "min-block-time")) {
    auto v = parse_uint(*m, "min block time (us)", 0, kMaxUs);
    if (!v) return Error{v.error()};
    c.min_us = *v;
  }
  if (auto m = opt_str(*r, "max-block-time")) {
    auto v = parse_uint(*m, "max block time (us)", 1, kMaxUs);
    if (!v) return Error{v.error()};
    c.max_us = *v;
  }
  if (c.max_us && c.min_us > c.max_us)
    return Error{"min block time (-m " + std::to_string(c.min_us) + ") is above max block time (-M " +
                 std::to_string(c.max_us) + ")"};
  if (auto s = opt_str(*r, "state")) {
    auto v = parse_uint(*s, "state", 0, 0xffff);
    if (!v) return Error{v.error()};
    c.state = *v;
  }
  if (auto s = opt_str(*r, "stack-storage-size")) {
    auto v = parse_uint(*s, "stack storage size", 1, 262144);
    if (!v) return Error{v.error()};
    c.stack_storage_size = *v;
  }
  if (auto s = opt_str(*r, "map-size")) {
    auto v = parse_uint(*s, "map size", 1024, 1048576);
    if (!v) return Error{v.error()};
    c.map_size = *v;
  }
  if (auto st = parse_duration_positional(positionals(*r), c.schedule)) return *st;
  if (!c.help)
    if (auto st = validate_targets(c)) return *st;
  return c;
}

Status validate_targets(const Config& c) {
  if (auto st = check_pids_exist(c.pids)) return st;
  for (auto t : c.tids) {
    if (!pid_exists(t)) return Error{"no thread with TID " + std::to_string(t)};
    if (c.pids.empty()) continue;
    bool ok = false;
    for (auto p : c.pids) ok = ok || is_thread_of(t, p);
    if (!ok) {
      std::string list;
      for (auto p : c.pids) list += (list.empty() ? "" : ",") + std::to_string(p);
      return Error{"TID " + std::to_string(t) + " is not a thread of PID " + list};
    }
  }
  return std::nullopt;
}

std::string bpf_text() { return kBpf_offcputime[0].text; }

Result<std::vector<std::string>> bpf_cflags(const Config& c) {
  auto f = kernel_offset_cflags({
      {"OFF_TASK_PID", "task_struct", {"pid"}},
      {"OFF_TASK_TGID", "task_struct", {"tgid"}},
      {"OFF_TASK_FLAGS", "task_struct", {"flags"}},
      {"OFF_TASK_STATE", "task_struct", {"__state", "state"}},
  });
  if (!f) return Error{f.error()};
  std::vector<std::string> flags = *f;
  flags.push_back(id_filter_cflag("TGID_OK", c.pids));
  flags.push_back(id_filter_cflag("TID_OK", c.tids));
  if (c.user_threads_only) flags.push_back("-DUSER_THREADS_ONLY");
  if (c.kernel_threads_only) flags.push_back("-DKERNEL_THREADS_ONLY");
  if (c.state) flags.push_back((*c.state == 0 ? "-DSTATE_EQ=" : "-DSTATE_MASK=") + std::to_string(*c.state));
  flags.push_back("-DMIN_NS=" + std::to_string(c.min_us * 1000) + "ULL");
  flags.push_back("-DMAX_NS=" + (c.max_us ? std::to_string(c.max_us * 1000) + "ULL" : std::string("0xffffffffffffffffULL")));
  if (!c.kernel_stacks_only) flags.push_back("-DCAPTURE_USER");
  if (!c.user_stacks_only) flags.push_back("-DCAPTURE_KERNEL");
  flags.push_back("-DSTACK_STORAGE_SIZE=" + std::to_string(c.stack_storage_size));
  flags.push_back("-DSTART_SIZE=" + std::to_string(c.map_size));
  flags.push_back("-DCOUNTS_SIZE=" + std::to_string(c.map_size));
  flags.push_back("-DSEEN_SIZE=" + std::to_string(c.map_size));
  return flags;
}

// --- rendering ---------------------------------------------------------------------

static std::string folded_name(const Config& c, const Entry& e) {
  if (!c.per_thread) return e.comm;
  return e.comm + "-" + std::to_string(e.pid) + "/" + std::to_string(e.tid);
}

std::vector<std::string> folded_lines(const Config& c, const std::vector<Entry>& entries) {
  // merge identical lines (same name and frames), keeping first-seen order
  std::map<std::string, uint64_t> sums;
  std::vector<std::string> order;
  for (auto& e : entries) {
    std::string l = folded_line(folded_name(c, e), e.stack, 0);
    l.resize(l.size() - 2);  // drop " 0"
    if (!sums.count(l)) order.push_back(l);
    sums[l] += e.total_ns;
  }
  std::vector<std::string> out;
  for (auto& l : order) out.push_back(l + " " + std::to_string(sums[l] / 1000));
  return out;
}

std::vector<std::string> warnings(const Config& c, const DataQuality& dq) {
  std::vector<std::string> w;
  if (dq.lost_stacks)
    w.push_back("WARNING: " + std::to_string(dq.lost_stacks) +
                " stack traces could not be stored (hash collision or full table); try "
                "--stack-storage-size " + std::to_string(std::min<uint64_t>(c.stack_storage_size * 4, 262144)));
  if (dq.map_full)
    w.push_back("WARNING: " + std::to_string(dq.map_full) +
                " off-CPU periods were dropped because a map was full; try --map-size " +
                std::to_string(std::min<uint64_t>(c.map_size * 4, 1048576)));
  auto sf = dq.extra.find("seen_full");
  if (sf != dq.extra.end() && sf->second)
    w.push_back("WARNING: " + std::to_string(sf->second) + " new processes were not announced because " +
                std::to_string(c.map_size) + " live processes were already tracked (no periods were " +
                "dropped; their stacks may show [unknown] if they exited early); try --map-size " +
                std::to_string(std::min<uint64_t>(c.map_size * 4, 1048576)));
  return w;
}

static nlohmann::json entry_json(const Entry& e) {
  return {{"pid", e.pid},
          {"tid", e.tid},
          {"comm", e.comm},
          {"total_ns", e.total_ns},
          {"count", e.count},
          {"max_ns", e.max_ns},
          {"user_stack", e.stack.user},
          {"kernel_stack", e.stack.kernel},
          {"user_stack_missing", e.stack.user_missing},
          {"kernel_stack_missing", e.stack.kernel_missing}};
}

void render(std::ostream& os, std::ostream& err, const Config& c, const Report& r) {
  if (c.json) {
    std::vector<const Entry*> sorted;
    for (auto& e : r.entries) sorted.push_back(&e);
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const Entry* a, const Entry* b) { return a->total_ns > b->total_ns; });
    nlohmann::json stacks = nlohmann::json::array(), threads = nlohmann::json::array();
    std::map<std::pair<uint32_t, uint32_t>, nlohmann::json> per_thread;
    for (auto* e : sorted) {
      stacks.push_back(entry_json(*e));
      auto& t = per_thread[{e->pid, e->tid}];
      if (t.is_null()) t = {{"pid", e->pid}, {"tid", e->tid}, {"comm", e->comm}, {"total_ns", 0}, {"count", 0}};
      t["total_ns"] = t["total_ns"].get<uint64_t>() + e->total_ns;
      t["count"] = t["count"].get<uint64_t>() + e->count;
    }
    for (auto& [k, t] : per_thread) threads.push_back(t);
    emit_json(os, {{"type", "offcputime"},
                   {"time_ns", realtime_ns()},
                   {"duration_ns", r.duration_ns},
                   {"final", true},
                   {"stacks", stacks},
                   {"threads", threads},
                   {"data_quality", r.dq.to_json()}});
    return;
  }
  if (c.folded) {
    for (auto& l : folded_lines(c, r.entries)) os << l << "\n";
    os.flush();
    err << r.dq.to_text() << "\n";
    return;
  }
  std::vector<const Entry*> sorted;
  for (auto& e : r.entries) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Entry* a, const Entry* b) { return a->total_ns < b->total_ns; });
  for (auto* e : sorted)
    print_stack_multiline(os, e->stack, e->comm, e->tid, e->total_ns / 1000, StackFormat{c.delimiter});
  os << r.dq.to_text() << "\n";
  os.flush();
}

// --- running -------------------------------------------------------------------------

namespace {

struct Live {
  Symbolizer sym;
  uint64_t lost_events = 0;
};

void on_new_proc(void* cookie, void* data, int size) {
  if (size < static_cast<int>(sizeof(uint32_t))) return;
  uint32_t tgid;
  std::memcpy(&tgid, data, sizeof tgid);
  auto& sym = static_cast<Live*>(cookie)->sym;
  if (sym.remembered(tgid))
    sym.refresh(tgid);  // announced again after exec: new mappings
  else
    sym.remember(tgid);
}

void on_lost(void* cookie, uint64_t n) { static_cast<Live*>(cookie)->lost_events += n; }

// Kernel frames of the tracing machinery itself (the stack is captured inside the
// tracepoint): everything innermost before the scheduler's own frames.
// Stack ids that differ only in frames symbolization drops (the tracing path's own
// frames) or cannot name render the same; report them as one entry.
void merge_identical(std::vector<Entry>& entries) {
  std::map<std::tuple<uint32_t, uint32_t, std::string, std::vector<std::string>, std::vector<std::string>, bool, bool>,
           size_t>
      index;
  std::vector<Entry> out;
  for (auto& e : entries) {
    auto key = std::make_tuple(e.pid, e.tid, e.comm, e.stack.user, e.stack.kernel, e.stack.user_missing,
                               e.stack.kernel_missing);
    auto it = index.find(key);
    if (it == index.end()) {
      index.emplace(std::move(key), out.size());
      out.push_back(std::move(e));
      continue;
    }
    Entry& m = out[it->second];
    m.total_ns += e.total_ns;
    m.count += e.count;
    m.max_ns = std::max(m.max_ns, e.max_ns);
  }
  entries = std::move(out);
}

std::string banner(const Config& c) {
  std::string who = "all threads";
  auto list = [](const std::vector<uint32_t>& v) {
    std::string s;
    for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
    return s;
  };
  if (!c.tids.empty()) who = "TID " + list(c.tids);
  else if (!c.pids.empty()) who = "PID " + list(c.pids);
  if (c.user_threads_only) who += " (user threads)";
  if (c.kernel_threads_only) who += " (kernel threads)";
  std::string what = c.user_stacks_only ? "user" : c.kernel_stacks_only ? "kernel" : "user + kernel";
  std::string when = c.schedule.duration_ns ? " for " + format_duration(*c.schedule.duration_ns) + "."
                                            : "... Hit Ctrl-C to end.";
  return "Tracing off-CPU time (us) of " + who + " by " + what + " stack" + when;
}

}  // namespace

Status run(const Config& c) {
  auto flags = bpf_cflags(c);
  if (!flags) return Error{flags.error()};
  if (c.ebpf) {
    std::cout << ebpf_listing(bpf_text(), *flags);
    return std::nullopt;
  }
  if (auto st = preflight({})) return st;
  auto s = BpfSession::load(bpf_text(), *flags);
  if (!s) return Error{s.error()};
  auto& session = *s.value();
  Live live;
  if (auto st = session.open_perf_buffer("new_procs", on_new_proc, on_lost, &live, 16)) return st;
  for (auto p : c.pids) live.sym.remember(p);
  if (auto st = session.attach_raw_tracepoint("sched_process_exec", "raw_tracepoint__sched_process_exec"))
    return Error{st->message + "; is CONFIG_TRACEPOINTS enabled?"};
  if (auto st = session.attach_raw_tracepoint("sched_process_exit", "raw_tracepoint__sched_process_exit"))
    return Error{st->message + "; is CONFIG_TRACEPOINTS enabled?"};
  if (auto st = session.attach_raw_tracepoint("sched_switch", "raw_tracepoint__sched_switch"))
    return Error{st->message + "; is CONFIG_TRACEPOINTS enabled?"};
  uint64_t t0 = monotonic_ns();
  if (!c.json && !c.folded) std::cout << banner(c) << std::endl;

  RunHooks hooks;
  hooks.poll = [&](int timeout_ms) { session.poll_perf_buffer("new_procs", std::min(timeout_ms, 100)); };
  hooks.report = [&](bool) {
    // Stop tracing first so the report is a consistent snapshot and costs nothing.
    {
      StderrNoiseFilter quiet;
      session.bpf().detach_raw_tracepoint("sched_switch");
      session.bpf().detach_raw_tracepoint("sched_process_exec");
      session.bpf().detach_raw_tracepoint("sched_process_exit");
    }
    uint64_t duration = monotonic_ns() - t0;
    session.poll_perf_buffer("new_procs", 0);  // announcements still queued
    Report rep;
    rep.duration_ns = duration;
    auto stats = session.bpf().get_percpu_array_table<uint64_t>("stats");
    auto stat = [&](int idx) {
      std::vector<uint64_t> v;
      uint64_t sum = 0;
      if (stats.get_value(idx, v).ok())
        for (auto x : v) sum += x;
      return sum;
    };
    rep.dq.lost_stacks = stat(OFFCPU_STAT_STACK_LOST);
    rep.dq.unmatched_end = stat(OFFCPU_STAT_UNMATCHED_IN);
    rep.dq.map_full = stat(OFFCPU_STAT_START_FULL) + stat(OFFCPU_STAT_COUNTS_FULL);
    // `seen` full loses no off-CPU time, only a symbol snapshot: reported on its own
    rep.dq.extra["seen_full"] = stat(OFFCPU_STAT_SEEN_FULL);
    rep.dq.lost_events = live.lost_events;
    rep.dq.unmatched_begin = session.bpf().get_hash_table<uint32_t, offcpu_start>("start").get_table_offline().size();
    auto stacks = session.bpf().get_stack_table("stack_traces");
    auto counts = session.bpf().get_hash_table<offcpu_key, offcpu_val>("counts").get_table_offline();
    StackParts parts{!c.kernel_stacks_only, !c.user_stacks_only};
    for (auto& [k, v] : counts) {
      Entry e;
      e.pid = k.tgid;
      e.tid = k.tid;
      e.comm = std::string(k.comm, strnlen(k.comm, sizeof k.comm));
      e.total_ns = v.total_ns;
      e.count = v.count;
      e.max_ns = v.max_ns;
      e.stack = resolve_stack(stacks, live.sym, k.tgid, k.user_stack_id, k.kernel_stack_id, parts, nullptr);
      rep.entries.push_back(std::move(e));
    }
    merge_identical(rep.entries);
    auto& ss = live.sym.stats();
    rep.dq.extra["unknown_frames"] = ss.user_unknown + ss.kernel_unknown;
    rep.dq.extra["processes_gone_before_seen"] = ss.pids_unreadable;
    render(std::cout, std::cerr, c, rep);
    for (auto& w : warnings(c, rep.dq)) std::cerr << w << "\n";
  };
  run_loop(c.schedule, hooks);
  return std::nullopt;
}

}  // namespace offcputime
