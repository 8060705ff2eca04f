// doctor runtime: the checks in order, the live check, the report and the exit status.
#include <bcc/BPF.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <iostream>
#include <utility>

#include "common/bpf_counters.h"
#include "common/bpf_object.h"
#include "common/debuginfod.h"
#include "common/pthread_probes.h"
#include "common/runloop.h"
#include "common/tool.h"
#include "tools/doctor/doctor.h"

extern "C" {
#include <linux/types.h>

#include "doctor_shared.h"
}

namespace doctor {
using namespace bpfdiag;

namespace {

constexpr uint64_t kSyscalls = 1000;  // getppid() calls: tracepoint, perf buffer, uprobe
constexpr uint64_t kBatch = 200;      // perf buffer polled after each batch
constexpr uint64_t kSleeps = 50;      // 1 ms sleeps: one voluntary switch each

const std::vector<CounterSlot> kCounters = {{DOCTOR_CNT_SUBMIT_FAILED, "lost_events"}};

struct Delivery {
  std::vector<bool> seen = std::vector<bool>(kSyscalls, false);
  uint64_t received = 0, lost = 0, duplicated = 0;
};

void on_event(void* cookie, void* data, int size) {
  auto* d = static_cast<Delivery*>(cookie);
  if (size < static_cast<int>(sizeof(doctor_event))) return;
  doctor_event ev;
  std::memcpy(&ev, data, sizeof ev);
  d->received++;
  if (ev.seq >= d->seen.size() || d->seen[ev.seq])
    d->duplicated++;
  else
    d->seen[ev.seq] = true;
}

void on_lost(void* cookie, uint64_t n) { static_cast<Delivery*>(cookie)->lost += n; }

uint64_t read_count(BpfSession& bpf, int slot) {
  uint64_t v = 0;
  bpf.get_array_table<uint64_t>("counts").get_value(slot, v);
  return v;
}

// The switches counted and the kernel's count as one snapshot: this thread can be switched
// out between two map reads (a loaded run read "50 of the kernel's 51": preempted between
// them). Both slots are written by one program run at each switch of this thread, so the
// pair is consistent when the count read before and after the kernel's is the same.
std::pair<uint64_t, uint64_t> read_switches(BpfSession& bpf) {
  uint64_t counted = read_count(bpf, DOCTOR_SWITCHES), kernel = 0;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    kernel = read_count(bpf, DOCTOR_KERNEL_SWITCHES);
    const uint64_t again = read_count(bpf, DOCTOR_SWITCHES);
    if (again == counted) break;
    counted = again;
  }
  return {counted, kernel};
}

// Loads doctor.bpf.c, attaches it, makes known events and counts what arrived. An
// error means the program could not be compiled, loaded or attached (one line).
Result<LiveResult> live_check(DataQuality& dq) {
  LiveResult r;
  const uint64_t t0 = monotonic_ns();
  const auto tid = static_cast<uint32_t>(syscall(SYS_gettid));
  // Found before loading: the uprobe's library (our own libc, through the open file).
  auto lib = find_pthread_lib(static_cast<uint32_t>(getpid()));
  auto plan = bpf_plan(tid);
  if (!plan) return Error{plan.error()};
  auto loaded = load_tool(ToolPlan{"doctor", *plan, false});
  if (!loaded) return Error{loaded.error()};
  BpfSession& s = **loaded;
  r.compile_ns = monotonic_ns() - t0;
  Delivery d;
  if (auto st = s.open_perf_buffer("events", on_event, on_lost, &d, 16)) return Error{st->message};
  if (auto st = s.attach_tracepoint("syscalls:sys_enter_getppid", "tracepoint__syscalls__sys_enter_getppid"))
    return Error{st->message};
  if (auto st = s.attach_raw_tracepoint("sched_switch", "raw_tracepoint__sched_switch")) return Error{st->message};
  if (!lib)
    r.uprobe_error = lib.error();
  else if (auto st = s.attach_uprobe(lib->probe_path(), "getppid", "on_getppid", false, getpid()))
    r.uprobe_error = st->message;

  for (uint64_t done = 0; done < kSyscalls;) {
    for (uint64_t i = 0; i < kBatch && done < kSyscalls; ++i, ++done) getppid();
    s.poll_perf_buffer("events", 0);
  }
  r.syscalls_made = kSyscalls;
  r.uprobe_calls = r.uprobe_error.empty() ? kSyscalls : 0;

  // Every switch is checked against the kernel's own count (a sleep is not always a
  // switch: preempted between arming its timer and schedule(), a thread can find the
  // timer expired when it runs again; a CI run saw 49 voluntary switches for 50
  // sleeps). One sleep first, so the kernel's count is known at the start.
  const struct timespec nap = {0, 1000000};
  clock_nanosleep(CLOCK_MONOTONIC, 0, &nap, nullptr);
  const auto [switches0, kernel0] = read_switches(s);
  for (uint64_t i = 0; i < kSleeps; ++i) clock_nanosleep(CLOCK_MONOTONIC, 0, &nap, nullptr);
  const auto [switches1, kernel1] = read_switches(s);
  r.switches_counted = switches1 - switches0;
  r.switches_kernel = kernel1 - kernel0;
  r.sleeps_made = kSleeps;

  r.syscalls_counted = read_count(s, DOCTOR_SYSCALLS);
  r.uprobe_hits = read_count(s, DOCTOR_UPROBES);
  const uint64_t deadline = monotonic_ns() + 200000000ULL;  // what is still in flight
  while (d.received + d.lost < r.syscalls_counted && monotonic_ns() < deadline) s.poll_perf_buffer("events", 10);
  r.events_received = d.received;
  r.events_lost = d.lost;
  r.events_duplicated = d.duplicated;
  dq.add("lost_events", d.lost);
  if (auto st = add_bpf_counters(s, kCounters, dq)) return Error{st->message};
  r.total_ns = monotonic_ns() - t0;
  return r;
}

// The compiled-object cache: a tool's first start with given options compiles its
// BPF program (0.1-0.3 s, LLVM), later starts load it from here.
Check cache_check() {
  const BpfObjectCacheState s = BpfObjectCache::state();
  if (s.off)
    return Check{"bpf", "object_cache", Verdict::Skip, false,
                 s.dir + ": " + s.why + ": every tool start compiles its BPF program (0.1-0.3 s)",
                 "unset BPFDIAG_CACHE to load compiled programs from the cache"};
  if (!s.usable)
    return Check{"bpf", "object_cache", Verdict::Warn, false,
                 s.dir + " " + s.why + ": not used, every tool start compiles its BPF program (0.1-0.3 s)",
                 "make " + s.dir + " a directory of this user's with mode 0700 (rm -rf it: the "
                 "next start creates it), or set BPFDIAG_CACHE_DIR"};
  return Check{"bpf", "object_cache", Verdict::Ok, false,
               strf("%s: %llu compiled program%s, %llu kB (a tool's first start with given "
                    "options compiles, 0.1-0.3 s; later starts load from here)",
                    s.dir.c_str(), static_cast<unsigned long long>(s.objects),
                    s.objects == 1 ? "" : "s", static_cast<unsigned long long>((s.bytes + 999) / 1000)),
               ""};
}

// DEBUGINFOD_URLS (common/debuginfod.h): whether stripped binaries can be named from a
// debuginfod server. What the tools would use, checked without asking any server.
Check debuginfod_check() {
  const DebuginfodConfig c = debuginfod_config(/*create=*/false);
  if (c.urls.empty())
    return Check{"system", "debuginfod", Verdict::Skip, false,
                 "DEBUGINFOD_URLS is not set: stripped binaries are named from local debug files only",
                 "to fetch debug files by build-id, set DEBUGINFOD_URLS (e.g. https://debuginfod.debian.net)"};
  if (!c.cache_usable && !c.cache_missing)
    return Check{"system", "debuginfod", Verdict::Warn, false,
                 "DEBUGINFOD_URLS=" + c.urls + ", but its cache " + c.cache_dir + " " + c.cache_why +
                     ": nothing is looked up",
                 "point DEBUGINFOD_CACHE_PATH at a directory of root's with mode 0700, or remove " + c.cache_dir +
                     " (the tools create it)"};
  void* lib = dlopen("libdebuginfod.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!lib)
    return Check{"system", "debuginfod", Verdict::Warn, false,
                 "DEBUGINFOD_URLS=" + c.urls + ", but libdebuginfod.so.1 cannot be loaded: nothing is looked up",
                 "apt install libdebuginfod1"};
  dlclose(lib);
  return Check{"system", "debuginfod", Verdict::Ok, false,
               "DEBUGINFOD_URLS=" + c.urls + ": stripped binaries' debug files are fetched by build-id (cache " +
                   c.cache_dir + "; the reports of a run wait 4 s at most)",
               ""};
}

std::string failure_line(const std::vector<Check>& checks) {
  std::string msg = "this machine cannot be traced:";
  for (const auto& k : checks)
    if (k.required && k.status == Verdict::Fail) msg += " " + k.name + ": " + (k.fix.empty() ? k.detail : k.fix) + ";";
  msg.pop_back();
  return msg;
}

}  // namespace

Status run(const Config& c) {
  if (c.list) {
    render_tool_list(std::cout, c, suite_tools());
    return std::nullopt;
  }
  if (c.ebpf) {
    auto plan = bpf_plan(static_cast<uint32_t>(syscall(SYS_gettid)));
    if (!plan) return Error{plan.error()};
    std::cout << ebpf_listing(*plan);
    return std::nullopt;
  }
  const uint64_t t0 = monotonic_ns();
  render_start(std::cout, c);
  SystemProbe sys = probe_system(suite_tools());
  std::vector<Check> checks = sys.checks;
  DataQuality dq = empty_quality();
  if (!c.live) {
    checks.push_back(Check{"live", "live_check", Verdict::Skip, false, "not run (--no-live)", ""});
  } else if (!sys.features.root) {
    checks.push_back(Check{"live", "live_check", Verdict::Skip, false, "needs root", ""});
  } else {
    auto r = live_check(dq);
    if (!r) {
      checks.push_back(Check{"live", "live_check", Verdict::Fail, true, r.error(),
                             "no BPF program can be loaded and attached here: see the first failed check"});
    } else {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "compiled against bpfdiag's header shim and loaded in %.0f ms (no kernel headers needed)",
                    r->compile_ns / 1e6);
      checks.push_back(Check{"live", "bpf_compile", Verdict::Ok, true, buf, ""});
      for (auto& k : live_checks(*r)) checks.push_back(k);
    }
  }
  if (sys.features.root) checks.push_back(cache_check());
  if (sys.features.root) checks.push_back(debuginfod_check());
  for (auto& k : tool_matrix(sys.features, suite_tools())) checks.push_back(k);
  for (uint32_t pid : c.pids)
    for (auto& k : probe_target(pid)) checks.push_back(k);
  render(std::cout, c, checks, dq, monotonic_ns() - t0);
  if (exit_code(checks) != 0) return Error{failure_line(checks)};
  return std::nullopt;
}

}  // namespace doctor
