// threadpool command line: the option table (generated --help), BPF flags, map sizes.
#include <algorithm>

#include "common/bpf_text.h"
#include "common/unwind_maps.h"
#include "common/btf.h"
#include "common/cgroup.h"
#include "common/cli.h"
#include "common/parse.h"
#include "common/tool_config.h"
#include "common/options.h"
#include "common/embedded.h"
#include "common/proc.h"
#include "common/registry.h"
#include "tools/threadpool/threadpool.h"

namespace bpfdiag {
extern const EmbeddedFile kBpf_threadpool[];
}

namespace threadpool {
using namespace bpfdiag;

namespace {
const OptionSpec kMapEntries{"map-entries", "N",
                             "size the BPF maps for N threads (default: 4x the\n"
                             "target's threads, at least 1024); raise it when the\n"
                             "report says updates were dropped",
                             "Maps"};
}  // namespace

const ToolSpec& tool_spec() {
  static const ToolSpec spec{
      "threadpool",
      "is a thread or process pool CPU-starved, blocked, or too small?",
      "Measures, per interval, how busy a pool's workers are, how long they wait for a\n"
      "CPU, what busy workers are blocked in (lock, I/O, poll, sleep, GIL, other), and\n"
      "for socket servers how long accepted connections queue before a worker reads\n"
      "them. The pool is one process's threads, or the threads of several processes\n"
      "(-p PID,PID,...; -p PID --children: a parent and its child processes, as\n"
      "nginx, php-fpm, gunicorn, Apache prefork and PostgreSQL run).\n"
      "A wait is classified by what it is: first by its wait site (the waiter's\n"
      "stack, unwound once per thread and futex word, against the suite's wait-site\n"
      "rules: pthread_mutex_lock is a lock, a pool's get-task function waiting for\n"
      "work); else waiting for work (idle) when a thread outside the pool ends it\n"
      "(a producer, a client) or the thread then takes a request, a mutex wait a\n"
      "peer ends is a lock, a condition wait a peer ends is unclassified (other,\n"
      "named by its site); sleep when it times out, the GIL when the futex lies in\n"
      "CPython's _PyRuntime. Threads are grouped by name (numbers removed); the\n"
      "main thread\n"
      "(in a pool of processes: the parent's) joins a pool only if it waits for work\n"
      "as the workers do, so a master that only supervises is not a busy worker.",
      {
          opt::pid("the pool (or --cgroup): one process's threads, or\n"
                   "several processes as one pool (with the\n"
                   "processes they fork while traced)"),
          opt::cgroup(),
          opt::container(),
          OptionSpec{"children", "",
                     "with -p: each PID's child processes join the\n"
                     "pool (those running now and those forked while\n"
                     "traced); the PID's own threads stay in it",
                     "Filters"},
          OptionSpec{"threads", "PATTERN",
                     "the pool: threads whose name matches this regex\n"
                     "(default: every thread, grouped by name minus digits)",
                     "Filters"},
          OptionSpec{"a,all-groups", "",
                     "text reports show every thread group (default: 3,\n"
                     "groups of several threads first, by CPU time)",
                     "Output"},
          opt::timestamp("print a timestamp on each report"),
          opt::per_thread("a line per thread in text reports"),
          OptionSpec{"H,hist", "", "dispatch latency histogram in text reports", "Output"},
          opt::json("NDJSON: threadpool.start, then per report a\n"
                    "threadpool.group per group and a threadpool.summary"),
          kMapEntries,
          opt::older_name("max-threads", kMapEntries),
          opt::verbose("after each report, on stderr: how many threads are\n"
                       "tracked and how many exited threads were retired"),
          opt::interval(),
          opt::count(),
          opt::duration(),
          opt::prometheus(),
          opt::listen(),
          opt::ebpf(),
          opt::help(),
      },
      "  threadpool -p 1234                    # summary at Ctrl-C, grouped by name\n"
      "  threadpool -p 1234 -i 1               # a report every second\n"
      "  threadpool -p 1234 --threads worker -i 1 -d 10   # pool: *worker*, 10s\n"
      "  threadpool -p 1234 -P -i 5            # per-thread lines every 5 seconds\n"
      "  threadpool -p 1234 -a -i 10           # every thread group, not only 3\n"
      "  threadpool -p 1234 --map-entries 16384 -i 5   # maps for 16384 threads\n"
      "  threadpool -p 1234 -j -i 1 -d 30      # NDJSON every second for 30 seconds\n"
      "  threadpool -p 100,101,102 -d 10       # nginx master + 2 workers, one pool\n"
      "  threadpool -p 100 --children -d 10    # a parent and its children, one pool\n"
      "  threadpool -p 1234 -i 10 --listen 9466  # metrics at 127.0.0.1:9466/metrics\n"

      "  threadpool --container 3f2a9c1d8e7b -d 10  # a container's processes, one pool\n",
      Positional::None};
  return spec;
}

Result<Config> parse_args(int argc, char** argv) {
  Config c;
  auto r = parse_tool_cli(tool_spec(), argc, argv);
  if (!r) return Error{r.error()};
  if ((c.help = r->common.help)) return c;  // --help wins over everything else
  const auto& raw = r->raw;
  c.hist = raw.count("hist");
  c.all_groups = raw.count("all-groups");
  c.verbose = r->common.verbose;
  c.timestamp = r->common.timestamp;
  c.per_thread = r->common.per_thread;
  c.json = r->common.json;
  c.ebpf = r->common.ebpf;
  c.schedule = r->common.schedule;
  c.prometheus = r->common.prometheus;
  c.listen = r->common.listen;
  if (auto m = r->value("map-entries")) {
    auto v = parse_uint(*m, "--map-entries", 64, 1048576);
    if (!v) return Error{v.error()};
    c.map_entries = static_cast<uint32_t>(*v);
  }
  // --cgroup/--container: without -p the pool is the processes in the cgroup now (and
  // those they fork); with -p, the PIDs inside it (both filters must pass)
  auto cg = resolve_cgroup_options(r->common, r->common.pids);
  if (!cg) return Error{cg.error()};
  c.cgroup = *cg;
  if (r->common.pids.empty() && !c.cgroup) return Error{"-p PID is required (or --cgroup/--container)"};
  c.pids = r->common.pids;
  if (c.cgroup && c.pids.empty()) {
    c.pids = cgroup_pids(*c.cgroup, kMaxIdList);
    if (c.pids.empty()) return Error{"cgroup " + c.cgroup->path + " has no processes"};
  } else if (c.cgroup) {
    c.pids.erase(std::remove_if(c.pids.begin(), c.pids.end(), [&](uint32_t p) { return !pid_in_cgroup(p, *c.cgroup); }),
                 c.pids.end());
  }
  c.children = raw.count("children");
  if (auto t = opt_str(raw, "threads")) {
    if (t->size() > kMaxPatternLen)
      return Error{"--threads PATTERN is longer than " + std::to_string(kMaxPatternLen) + " characters"};
    std::string err;
    if (!compile_pattern(*t, &err)) return Error{"invalid --threads pattern '" + *t + "': " + err};
    c.pattern = *t;
  }
  // --ebpf only prints the program: no process is needed
  if (!c.ebpf)
    if (auto st = check_pids_exist(c.pids)) return Error{st->message};
  return c;
}

// The registry's entry (common/registry.h): the option table, the parser and what each
// mode attaches.
const ToolEntry& registry_entry() {
  static const ToolEntry e{"threadpool", &tool_spec, &check_args<&parse_args>, {{"threadpool", {},
        {"sched:sched_switch", "sched:sched_waking", "sched:sched_wakeup_new", "sched:sched_process_fork",
         "raw_syscalls:sys_enter", "raw_syscalls:sys_exit"},
        false, false, "pool utilisation (scheduler and syscall raw tracepoints)"}},
      {{"-p $PID"}}};
  return e;
}

// common.h pasted in: libbcc rewrites map calls only in the main file
std::string bpf_text() { return with_unwind_header(with_common_header(kBpf_threadpool[0].text)); }

MapSizes map_sizes(const Config& c, size_t nthreads) {
  uint64_t t = c.map_entries;
  if (!t) {  // 4x the threads there are now (pools grow), at least 1024
    t = 1024;
    while (t < 4 * nthreads && t < (1u << 20)) t *= 2;
  }
  MapSizes m;
  m.threads = static_cast<uint32_t>(t);
  m.waits = static_cast<uint32_t>(std::max<uint64_t>(65536, 16 * t));  // a few waits each
  m.hist = static_cast<uint32_t>(std::max<uint64_t>(65536, 32 * t));   // dispatch buckets
  return m;
}

Result<BpfPlan> bpf_plan(const Config& c, size_t nthreads) {
  BpfPlan p;
  p.text = bpf_text();
  if (auto st = add_kernel_offsets(p, {{"OFF_TASK_PID", "task_struct", {"pid"}},
                                       {"OFF_TASK_TGID", "task_struct", {"tgid"}},
                                       {"OFF_TASK_STATE", "task_struct", {"__state", "state"}}}))
    return Error{st->message};
  add_arrival_offsets(p);
  const MapSizes m = map_sizes(c, nthreads);
  p.integer("TP_MAX_THREADS", m.threads);
  p.integer("TP_MAX_WAITS", m.waits);
  p.integer("TP_MAX_HIST", m.hist);
  return p;
}

const char* help_text() { return help_cstr(tool_spec()); }

std::shared_ptr<const regex_t> compile_pattern(const std::string& p, std::string* err) {
  auto* re = new regex_t;
  int rc = regcomp(re, p.c_str(), REG_EXTENDED | REG_NOSUB);
  if (rc != 0) {
    char buf[256];
    regerror(rc, re, buf, sizeof buf);
    if (err) *err = buf;
    delete re;
    return nullptr;
  }
  return std::shared_ptr<const regex_t>(re, [](const regex_t* r) {
    regfree(const_cast<regex_t*>(r));
    delete r;
  });
}

bool pattern_search(const regex_t& re, const std::string& s) {
  return regexec(&re, s.c_str(), 0, nullptr, 0) == 0;
}

}  // namespace threadpool
