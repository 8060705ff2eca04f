#include "tools/naptime/naptime.h"

#include <bcc/BPF.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <iostream>

#include "common/bpf_session.h"
#include "common/btf.h"
#include "common/cli.h"
#include "common/embedded.h"
#include "common/filters.h"
#include "common/proc.h"

static_assert(sizeof(naptime_start) == 64, "naptime_start layout shared with BPF");
static_assert(sizeof(naptime_event) == 112, "naptime_event layout shared with BPF");
static_assert(sizeof(naptime_config) == 32, "naptime_config layout shared with BPF");

namespace bpfdiag {
extern const EmbeddedFile kBpf_naptime[];
}

namespace naptime {
using namespace bpfdiag;

const char kHelp[] =
    R"(naptime - trace sleeps: requested and actual length, parent, interruptions.

USAGE: naptime [-h] [-s] [-p PID[,PID]] [-t TID] [--comm NAME] [-m MIN] [-j] [--ebpf] [duration]

Traces nanosleep(2) and clock_nanosleep(2), where glibc's nanosleep, usleep,
sleep and std::this_thread::sleep_for end up. SECONDS is the length requested
(a TIMER_ABSTIME target is converted into the length from the call), SLEPT the
time until the call returned. NOTE shows the clock of an absolute request
("MONO abs"), a clock other than REALTIME/MONOTONIC, "restarted" (a signal
without handler, e.g. SIGSTOP/SIGCONT, woke it and the kernel resumed it unseen;
SLEPT covers the whole sleep) and errors (EINTR: a signal handler interrupted
the sleep). PPID/PCOMM: the parent at the time of the call.

OPTIONS:
 Filters:
  -p, --pid PID[,PID]   only these processes
  -t, --tid TID[,TID]   only these threads
      --comm NAME       only tasks with this command name (first 15 characters)
  -m, --min MIN         only sleeps requesting at least MIN (default unit us,
                        or with a unit: 10ms, 1.5s)
 Output:
  -s, --summary         per-process totals and a histogram of the time slept,
                        at the end instead of a line per sleep
  -j, --json            NDJSON: a "sleep" record per sleep, then a "summary"
      --ebpf            print the BPF program and exit
  -h, --help            show this help
 duration               stop after this long (seconds, or with a unit)

EXAMPLES:
  naptime                # trace every sleep until Ctrl-C
  naptime -p 181         # only sleeps of PID 181
  naptime --comm java    # only tasks named java
  naptime -m 10ms        # only sleeps of at least 10 ms
  naptime -s 10          # per-process summary and histogram after 10 seconds
  naptime -j -p 181 5    # JSON records for PID 181, for 5 seconds
)";

Result<Config> parse_args(int argc, char** argv) {
  cxxopts::Options opts("naptime");
  opts.add_options()("h,help", "")("s,summary", "")("j,json", "")("ebpf", "")(
      "p,pid", "", cxxopts::value<std::string>())("t,tid", "", cxxopts::value<std::string>())(
      "comm", "", cxxopts::value<std::string>())("m,min", "", cxxopts::value<std::string>());
  add_positionals(opts);
  auto r = parse_cli(opts, argc, argv);
  if (!r) return Error{r.error()};
  Config c;
  c.help = r->count("help");
  c.summary = r->count("summary");
  c.json = r->count("json");
  c.ebpf = r->count("ebpf");
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
  if (auto n = opt_str(*r, "comm")) {
    if (n->empty()) return Error{"--comm needs a non-empty name"};
    c.comm = n->substr(0, NAPTIME_COMM_LEN - 1);  // the kernel keeps 15 characters
  }
  if (auto m = opt_str(*r, "min")) {
    auto v = parse_duration_ns(*m, "minimum", 1000ULL, 0, 86400ULL * 1000000000ULL);
    if (!v) return Error{v.error()};
    c.min_ns = *v;
  }
  if (auto st = parse_duration_positional(positionals(*r), c.schedule)) return *st;
  if (c.help) return c;
  if (auto st = check_pids_exist(c.pids)) return *st;
  for (auto t : c.tids)
    if (!pid_exists(t)) return Error{"no thread with TID " + std::to_string(t)};
  return c;
}

std::string bpf_text() { return kBpf_naptime[0].text; }

std::vector<std::string> filter_cflags(const Config& c) {
  std::vector<std::string> f;
  f.push_back(id_filter_cflag("TGID_OK", c.pids));
  f.push_back(id_filter_cflag("TID_OK", c.tids));
  if (!c.comm.empty()) f.push_back("-DFILTER_COMM");
  if (c.min_ns) f.push_back("-DMIN_NS=" + std::to_string(c.min_ns) + "ULL");
  return f;
}

Result<std::vector<std::string>> bpf_cflags(const Config& c) {
  auto flags = kernel_offset_cflags({
      {"OFF_TASK_REAL_PARENT", "task_struct", {"real_parent", "parent"}},
      {"OFF_TASK_TGID", "task_struct", {"tgid"}},
      {"OFF_TASK_COMM", "task_struct", {"comm"}},
  });
  if (!flags) return Error{flags.error()};
  for (auto& f : filter_cflags(c)) flags.value().push_back(f);
  return flags;
}

// --- decoding ---------------------------------------------------------------------

namespace {
int64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Offset of `id` from CLOCK_MONOTONIC: the tightest of a few mono/id/mono brackets.
int64_t offset_from_mono(clockid_t id) {
  int64_t best_gap = INT64_MAX, best = 0;
  for (int i = 0; i < 5; ++i) {
    int64_t a = clock_ns(CLOCK_MONOTONIC), v = clock_ns(id), b = clock_ns(CLOCK_MONOTONIC);
    if (b - a < best_gap) {
      best_gap = b - a;
      best = v - (a + (b - a) / 2);
    }
  }
  return best;
}

std::string cstr(const char* s, size_t n) { return std::string(s, strnlen(s, n)); }

std::string clock_short(int32_t clock) {
  switch (clock) {
    case NAPTIME_CLOCK_REALTIME: return "REAL";
    case NAPTIME_CLOCK_MONOTONIC: return "MONO";
    case NAPTIME_CLOCK_BOOTTIME: return "BOOT";
    case NAPTIME_CLOCK_TAI: return "TAI";
    case NAPTIME_CLOCK_REALTIME_ALARM: return "REAL_ALARM";
    case NAPTIME_CLOCK_BOOTTIME_ALARM: return "BOOT_ALARM";
    case NAPTIME_CLOCK_PROCESS_CPUTIME_ID:
    case NAPTIME_CLOCK_THREAD_CPUTIME_ID: return "CPU";
    default: return clock < 0 ? "CPU" : "CLK" + std::to_string(clock);
  }
}

std::string seconds(uint64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6f", ns / 1e9);
  return b;
}

std::string hms(uint64_t realtime_ns) {
  time_t t = static_cast<time_t>(realtime_ns / 1000000000ULL);
  struct tm tm;
  localtime_r(&t, &tm);
  char b[16];
  std::strftime(b, sizeof b, "%H:%M:%S", &tm);
  return b;
}
}  // namespace

ClockOffsets measure_clock_offsets() {
  return {offset_from_mono(CLOCK_REALTIME), offset_from_mono(CLOCK_TAI)};
}

std::string clock_name(int32_t clock) {
  switch (clock) {
    case NAPTIME_CLOCK_REALTIME: return "CLOCK_REALTIME";
    case NAPTIME_CLOCK_MONOTONIC: return "CLOCK_MONOTONIC";
    case NAPTIME_CLOCK_PROCESS_CPUTIME_ID: return "CLOCK_PROCESS_CPUTIME_ID";
    case NAPTIME_CLOCK_THREAD_CPUTIME_ID: return "CLOCK_THREAD_CPUTIME_ID";
    case NAPTIME_CLOCK_BOOTTIME: return "CLOCK_BOOTTIME";
    case NAPTIME_CLOCK_REALTIME_ALARM: return "CLOCK_REALTIME_ALARM";
    case NAPTIME_CLOCK_BOOTTIME_ALARM: return "CLOCK_BOOTTIME_ALARM";
    case NAPTIME_CLOCK_TAI: return "CLOCK_TAI";
    default:
      // negative ids are CPU-time clocks of another process or thread (clock_getcpuclockid)
      return clock < 0 ? "CLOCK_CPUTIME_OTHER" : "CLOCK_" + std::to_string(clock);
  }
}

std::string errno_name(int64_t ret) {
  if (ret >= 0) return "";
  int64_t e = -ret;
  // kernel-internal codes: only in events of threads that died before returning
  switch (e) {
    case NAPTIME_ERESTARTSYS: return "ERESTARTSYS";
    case NAPTIME_ERESTARTNOINTR: return "ERESTARTNOINTR";
    case NAPTIME_ERESTARTNOHAND: return "ERESTARTNOHAND";
    case NAPTIME_ERESTART_RESTARTBLOCK: return "ERESTART_RESTARTBLOCK";
  }
  if (e < 4096) {
    if (const char* n = strerrorname_np(static_cast<int>(e))) return n;
  }
  return "E" + std::to_string(e);
}

Sleep decode(const naptime_event& ev, const ClockOffsets& off) {
  Sleep s;
  s.time_ns = static_cast<uint64_t>(static_cast<int64_t>(ev.exit_mono_ns) + off.realtime_ns);
  s.pid = ev.pid;
  s.tid = ev.tid;
  s.ppid = ev.start.ppid;
  s.comm = cstr(ev.comm, sizeof ev.comm);
  s.pcomm = cstr(ev.start.pcomm, sizeof ev.start.pcomm);
  s.syscall = (ev.start.flags & NAPTIME_F_NANOSLEEP) ? "nanosleep" : "clock_nanosleep";
  s.clock = ev.start.clock;
  s.abstime = ev.start.flags & NAPTIME_F_ABSTIME;
  __s64 req = 0;
  if (naptime_requested_ns(&ev.start, off.realtime_ns, off.tai_ns, &req)) s.requested_ns = req;
  s.slept_ns = ev.exit_mono_ns > ev.start.enter_mono_ns ? ev.exit_mono_ns - ev.start.enter_mono_ns : 0;
  s.ret = ev.ret;
  s.kernel_ret = ev.kernel_ret;
  s.interrupted = ev.ret != 0;
  s.restarted = ev.start.flags & NAPTIME_F_RESTARTED;
  return s;
}

void Summary::add(const Sleep& s) {
  auto& p = procs_[s.pid];
  p.comm = s.comm;
  p.count++;
  p.interrupted += s.interrupted;
  p.restarted += s.restarted;
  if (s.requested_ns) p.requested_ns += *s.requested_ns;
  p.slept_ns += s.slept_ns;
  p.slept.record(s.slept_ns);
  all_.record(s.slept_ns);
  all_us_.record(s.slept_ns / 1000);
}

// --- rendering --------------------------------------------------------------------

void render_header(std::ostream& os) {
  char line[160];
  std::snprintf(line, sizeof line, "%-8s %-6s %-15s %-6s %-15s %9s %9s %s\n", "TIME", "PPID",
                "PCOMM", "PID", "COMM", "SECONDS", "SLEPT", "NOTE");
  os << line;
}

void render_sleep(std::ostream& os, const Config& c, const Sleep& s) {
  if (c.json) {
    nlohmann::json j = {{"type", "sleep"},
                        {"time_ns", s.time_ns},
                        {"pid", s.pid},
                        {"tid", s.tid},
                        {"ppid", s.ppid},
                        {"comm", s.comm},
                        {"pcomm", s.pcomm},
                        {"syscall", s.syscall},
                        {"clock", clock_name(s.clock)},
                        {"abstime", s.abstime},
                        {"requested_ns", nullptr},
                        {"slept_ns", s.slept_ns},
                        {"interrupted", s.interrupted},
                        {"restarted", s.restarted},
                        {"ret", s.ret},
                        {"error", nullptr}};
    if (s.requested_ns) j["requested_ns"] = *s.requested_ns;
    if (s.ret) j["error"] = errno_name(s.ret);
    os << j.dump() << '\n';  // flushed by the caller once per batch of events
    return;
  }
  std::string note;
  auto add = [&](const std::string& w) { note += (note.empty() ? "" : " ") + w; };
  if (s.abstime) {
    add(clock_short(s.clock));
    add("abs");
  } else if (s.clock != NAPTIME_CLOCK_REALTIME && s.clock != NAPTIME_CLOCK_MONOTONIC) {
    add(clock_short(s.clock));
  }
  if (s.restarted) add("restarted");
  if (s.ret) add(errno_name(s.ret));
  char line[256];
  std::snprintf(line, sizeof line, "%-8s %-6u %-15s %-6u %-15s %9s %9s %s", hms(s.time_ns).c_str(),
                s.ppid, s.pcomm.c_str(), s.pid, s.comm.c_str(),
                s.requested_ns ? seconds(*s.requested_ns).c_str() : "?", seconds(s.slept_ns).c_str(),
                note.c_str());
  std::string l = line;
  while (!l.empty() && l.back() == ' ') l.pop_back();
  os << l << "\n";
}

void render_summary(std::ostream& os, const Config& c, const Summary& sum, const DataQuality& dq,
                    uint64_t duration_ns) {
  if (c.json) {
    nlohmann::json procs = nlohmann::json::array();
    for (auto& [pid, p] : sum.procs())
      procs.push_back({{"pid", pid},
                       {"comm", p.comm},
                       {"count", p.count},
                       {"interrupted", p.interrupted},
                       {"restarted", p.restarted},
                       {"requested_ns", p.requested_ns},
                       {"slept_ns", p.slept_ns},
                       {"hist", p.slept.to_json()}});
    emit_json(os, {{"type", "summary"},
                   {"duration_ns", duration_ns},
                   {"sleeps", sum.count()},
                   {"processes", procs},
                   {"hist", sum.all().to_json()},
                   {"data_quality", dq.to_json()}});
    return;
  }
  if (c.summary) {
    char line[160];
    std::snprintf(line, sizeof line, "%-7s %-15s %8s %6s %13s %13s\n", "PID", "COMM", "SLEEPS",
                  "INTR", "REQUESTED_S", "SLEPT_S");
    os << line;
    for (auto& [pid, p] : sum.procs()) {
      std::snprintf(line, sizeof line, "%-7u %-15s %8llu %6llu %13s %13s\n", pid, p.comm.c_str(),
                    static_cast<unsigned long long>(p.count),
                    static_cast<unsigned long long>(p.interrupted), seconds(p.requested_ns).c_str(),
                    seconds(p.slept_ns).c_str());
      os << line;
    }
    if (!sum.all().empty()) {
      os << "\n";
      print_log2_hist(os, sum.all_us().log2_slots(), "usecs");
    }
    os << "\n";
  }
  os << dq.to_text() << "\n";
  os.flush();
}

// --- tracing ----------------------------------------------------------------------

namespace {

const std::vector<std::string> kTracepoints = {
    "syscalls:sys_enter_nanosleep",       "syscalls:sys_exit_nanosleep",
    "syscalls:sys_enter_clock_nanosleep", "syscalls:sys_exit_clock_nanosleep",
    "syscalls:sys_enter_restart_syscall", "syscalls:sys_exit_restart_syscall",
    "signal:signal_deliver"};

struct Tracer {
  const Config& c;
  ClockOffsets off;
  Summary sum;
  uint64_t lost = 0;
  uint64_t short_records = 0;
  uint64_t unreadable = 0;  // requests whose timespec could not be read
};

void on_event(void* cookie, void* data, int size) {
  auto* t = static_cast<Tracer*>(cookie);
  if (size < static_cast<int>(sizeof(naptime_event))) {
    t->short_records++;
    return;
  }
  naptime_event ev;
  std::memcpy(&ev, data, sizeof ev);
  if (ev.start.flags & NAPTIME_F_BAD_REQUEST) t->unreadable++;
  Sleep s = decode(ev, t->off);
  t->sum.add(s);
  if (!t->c.summary) render_sleep(std::cout, t->c, s);
}

void on_lost(void* cookie, uint64_t lost) { static_cast<Tracer*>(cookie)->lost += lost; }

Status write_config(BpfSession& session, const Config& c, const ClockOffsets& off) {
  naptime_config cfg = {};
  cfg.realtime_off_ns = off.realtime_ns;
  cfg.tai_off_ns = off.tai_ns;
  std::strncpy(cfg.comm, c.comm.c_str(), sizeof cfg.comm - 1);
  auto table = session.bpf().get_array_table<naptime_config>("config");
  auto st = table.update_value(0, cfg);
  if (!st.ok()) return Error{"cannot write the config map: " + st.msg()};
  return std::nullopt;
}

}  // namespace

Status run(const Config& c) {
  auto flags = bpf_cflags(c);
  if (!flags) return Error{flags.error()};
  if (c.ebpf) {
    std::cout << ebpf_listing(bpf_text(), *flags);
    return std::nullopt;
  }
  if (auto st = preflight(kTracepoints)) return st;
  auto s = BpfSession::load(bpf_text(), *flags);
  if (!s) return Error{s.error()};
  auto& session = *s.value();
  Tracer t{c, measure_clock_offsets(), {}, 0, 0, 0};
  if (auto st = write_config(session, c, t.off)) return st;
  if (auto st = session.open_perf_buffer("events", on_event, on_lost, &t, 64)) return st;
  const std::vector<std::pair<std::string, std::string>> probes = {
      {kTracepoints[0], "tracepoint__syscalls__sys_enter_nanosleep"},
      {kTracepoints[1], "tracepoint__syscalls__sys_exit_nanosleep"},
      {kTracepoints[2], "tracepoint__syscalls__sys_enter_clock_nanosleep"},
      {kTracepoints[3], "tracepoint__syscalls__sys_exit_clock_nanosleep"},
      {kTracepoints[4], "tracepoint__syscalls__sys_enter_restart_syscall"},
      {kTracepoints[5], "tracepoint__syscalls__sys_exit_restart_syscall"},
      {kTracepoints[6], "tracepoint__signal__signal_deliver"}};
  // resolvers of parked (interrupted) sleeps first, then exits before enters: a sleep
  // that starts before its exit probe exists cannot be matched
  if (auto st = session.attach_raw_tracepoint("sched_process_exit", "raw_tracepoint__sched_process_exit"))
    return Error{st->message + "; is CONFIG_TRACEPOINTS enabled?"};
  for (auto it = probes.rbegin(); it != probes.rend(); ++it)
    if (auto st = session.attach_tracepoint(it->first, it->second))
      return Error{st->message + "; are syscall tracepoints enabled (CONFIG_FTRACE_SYSCALLS)?"};

  if (c.json) {
    std::fputs("naptime: tracing sleeps... Hit Ctrl-C to end.\n", stderr);
    std::fflush(stderr);
  } else {
    std::cout << "Tracing sleeps... Hit Ctrl-C to end." << std::endl;
    if (!c.summary) render_header(std::cout);
  }

  const uint64_t t0 = monotonic_ns();
  uint64_t last_offsets = t0;
  RunHooks hooks;
  hooks.poll = [&](int timeout_ms) {
    session.poll_perf_buffer("events", timeout_ms);
    std::cout.flush();
    uint64_t now = monotonic_ns();
    if (now - last_offsets > 1000000000ULL) {  // follow clock adjustments (NTP, settime)
      t.off = measure_clock_offsets();
      write_config(session, c, t.off);
      last_offsets = now;
    }
  };
  hooks.report = [&](bool) {
    while (session.poll_perf_buffer("events", 0) > 0) {
    }
    DataQuality dq;
    dq.lost_events = t.lost;
    auto stats = session.bpf().get_array_table<uint64_t>("stats");
    uint64_t v = 0;
    if (stats.get_value(NAPTIME_STAT_UNMATCHED_END, v).ok()) dq.unmatched_end = v;
    if (stats.get_value(NAPTIME_STAT_MAP_FULL, v).ok()) dq.map_full = v;
    if (stats.get_value(NAPTIME_STAT_RESTARTED, v).ok()) dq.extra["restarted_after_signal"] = v;
    // sleeps still in progress (those the -m filter would have kept)
    auto start = session.bpf().get_hash_table<uint32_t, naptime_start>("start");
    for (auto& [tid, st] : start.get_table_offline()) {
      __s64 req = 0;
      bool known = naptime_requested_ns(&st, t.off.realtime_ns, t.off.tai_ns, &req);
      if (!known || static_cast<uint64_t>(req) >= c.min_ns) dq.unmatched_begin++;
      (void)tid;
    }
    // interrupted sleeps whose outcome (EINTR or restart) was not decided yet, e.g. a
    // thread still stopped by SIGSTOP: in progress too
    auto pending = session.bpf().get_hash_table<uint32_t, naptime_event>("pending");
    for (auto& [tid, ev] : pending.get_table_offline()) {
      __s64 req = 0;
      bool known = naptime_requested_ns(&ev.start, t.off.realtime_ns, t.off.tai_ns, &req);
      if (!known || static_cast<uint64_t>(req) >= c.min_ns) dq.unmatched_begin++;
      (void)tid;
    }
    dq.extra["unreadable_requests"] = t.unreadable;
    if (t.short_records) dq.extra["short_records"] = t.short_records;
    if (!c.json && !c.summary) std::cout << "\n";
    render_summary(std::cout, c, t.sum, dq, monotonic_ns() - t0);
  };
  run_loop(c.schedule, hooks);
  return std::nullopt;
}

}  // namespace naptime
