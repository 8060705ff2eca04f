// pmheld's option table, parsing and BPF compile flags.
#include <linux/types.h>

#include "common/bpf_text.h"
#include "common/cli.h"
#include "common/embedded.h"
#include "common/tool_config.h"
#include "common/unwind_maps.h"
#include "common/registry.h"
#include "tools/pmheld/pmheld.h"

namespace bpfdiag {
extern const EmbeddedFile kBpf_pmheld[];
}

namespace pmheld {
using namespace bpfdiag;

namespace {

const char kDescription[] = R"(A hold lasts from the successful return of pthread_mutex_lock, _trylock,
_timedlock or _clocklock to pthread_mutex_unlock. pthread_cond_wait and
_timedwait release the mutex while waiting, so a wait ends the hold and its
return starts a new one: condition-variable waits never count as holding.
Locks are named by their data symbol when they have one (static mutexes).

--contended puts no uprobe on lock calls (their cost is ~11 us per call): it
sees only contended holds, from glibc's futex hand-off. A thread that finds
the mutex taken blocks in FUTEX_WAIT(word, 2); the holder's unlock sees it
and calls FUTEX_WAKE(word, 1). A hold is timed from the first waiter's
FUTEX_WAIT (or, when the holder got the mutex by waiting, from that wait's
return) to the FUTEX_WAKE: a lower bound of the hold. Stacks are the
holder's at the unlock (releasing stacks). Uncontended holds are not seen;
futex words waited on with another value (condition variables, semaphores,
rwlocks) are counted in data_quality (other_futex_waits, other_futex_wakes),
never reported as mutexes.

FIELDS (--sort, --fields, CSV and JSON use these names; short names in ()):
  pid comm lock addr hold_count (count) hold_total_ns (total)
  hold_avg_ns (avg) hold_p50_ns (p50) hold_p90_ns (p90) hold_p99_ns (p99)
  hold_max_ns (max); with --contended also waiters_max (most threads
  blocked at one unlock), waiters_avg, hold_exact (holds timed from the
  holder's own wake-up, not from the first waiter))";

const char kExamples[] = R"(  pmheld -p 181             # hold times of PID 181's mutexes, until Ctrl-C
  pmheld -p 181 -d 10       # trace PID 181 for 10 seconds
  pmheld -p 181 -i 5        # a report every 5 seconds
  pmheld -p 181 -s 0 -n 3   # top 3 locks, no stacks (lower overhead)
  pmheld --contended -p 181 -d 10  # contended holds only, no uprobes
  pmheld -S p99 -d 5        # all processes for 5 s, worst p99 hold first
  pmheld --cgroup system.slice/mysql.service -d 5  # one service's mutexes
  pmheld -p 181 -j -d 10    # NDJSON records per lock after 10 seconds
  pmheld -p 181 -d 10 --pprof held.pb.gz  # for go tool pprof
  pmheld -p 181 -i 10 --listen 9467  # metrics at 127.0.0.1:9467/metrics
)";

ToolSpec make_spec() {
  return ToolSpec{
      "pmheld",
      "summarize pthread mutex hold times per lock and acquiring stack.",
      kDescription,
      with_standard_options({
          opt::pid("trace only these processes (default: every process\nusing this machine's libc)"),
          OptionSpec{"contended", "",
                     "contended holds only, from futex hand-offs (no\nuprobes: cheap); timed from the first waiter,\n"
                     "uncontended holds not seen",
                     "Filters"},
          opt::cgroup(),
          opt::container(),
          opt::stacks("acquiring stacks shown per lock (default 3; 0: do\nnot record stacks, which is cheaper)"),
          opt::unwind("acquiring stacks: dwarf (.eh_frame tables; the\n"
                      "default with -p) or fp (frame pointers; the\n"
                      "default system-wide)"),
          OptionSpec{"stack-storage-size", "N",
                     "distinct acquiring stacks kept for the whole run\n(default 16384, 1-262144)", "Output"},
          opt::entries("locks shown (default 10; 0: all)"),
          opt::sort("order locks by a field (default hold_total_ns);\n-KEY sorts ascending"),
          opt::fields("table columns, e.g. lock,count,p99 or +comm"),
          OptionSpec{"no-hist", "", "do not print a histogram per lock", "Output"},
          OptionSpec{"probe-at-symbol", "",
                     "probe each function's first instruction (slower:\nit is single-stepped) instead of the first\n"
                     "emulated one",
                     "Output"},
          opt::csv(),
          opt::timestamp(),
          opt::json("NDJSON: pmheld.start, then per report one pmheld.lock\nper lock and a pmheld.summary"),
          opt::svg("write a flame graph of the hold times by acquiring\nstack to FILE when the run ends"),
          opt::pprof("write the run's holds by acquiring stack to FILE\nas a gzip-compressed pprof profile (go tool pprof)"),
          opt::prometheus(),
          opt::listen(),
      }, "print where each probe was placed"),
      kExamples,
      Positional::None};
}

}  // namespace

const ToolSpec& spec() { return cached_spec<make_spec>(); }
const char* help_text() { return help_cstr(spec()); }

Result<Config> parse_args(int argc, char** argv) {
  Config c;
  CommonOptions o;
  auto raw = parse_into(spec(), argc, argv, c, &o);
  if (!raw) return Error{raw.error()};
  if (c.help) return c;
  const auto& r = *raw;
  auto cg = resolve_cgroup_options(o, c.pids);
  if (!cg) return Error{cg.error()};
  c.cgroup = *cg;
  c.no_hist = r.count("no-hist");
  c.at_symbol = r.count("probe-at-symbol");
  c.contended = r.count("contended");
  if (c.contended && c.at_symbol)
    return Error{"--probe-at-symbol places uprobes; --contended has none"};
  if (auto s = opt_str(r, "stack-storage-size")) {
    auto v = parse_uint(*s, "--stack-storage-size", 1, 262144);
    if (!v) return Error{v.error()};
    c.stack_storage_size = *v;
  }
  auto uw = unwind_dwarf_option(r, !c.pids.empty());
  if (!uw) return Error{uw.error()};
  c.unwind_dwarf = *uw && c.stacks > 0;  // -s 0: no stacks to unwind
  auto t = lock_table(c.contended);  // --sort/--fields typos are usage errors
  if (auto st = configure(t, c)) return *st;
  return c;
}

// The registry's entry (common/registry.h): the option table, the parser and what each
// mode attaches.
const ToolEntry& registry_entry() {
  static const ToolEntry e{"pmheld", &spec, &check_args<&parse_args>, {{"pmheld", {}, {}, false, true, "pthread mutex hold times (uprobes on libc)"},
       {"pmheld --contended", {"syscalls:sys_enter_futex", "syscalls:sys_exit_futex"}, {}, false, false,
        "contended pthread mutex holds from futex hand-offs (no uprobes)"}},
      {{"", "--contended"}, {"", "-s 0"}, {"--unwind fp", "-p $PID --unwind fp", "-p $PID --unwind dwarf"}}};
  return e;
}

std::string bpf_text() { return with_unwind_header(with_common_header(kBpf_pmheld[0].text)); }

BpfPlan bpf_plan(const Config& c) {
  BpfPlan p;
  p.text = bpf_text();
  if (c.contended) {
    p.flag("CONTENDED");
    p.id_filter("TGID_OK", c.pids);
  }
  if (c.stacks == 0)
    p.flag("NO_STACKS");
  else
    p.integer("STACK_ENTRIES", c.stack_storage_size);
  add_cgroup_filter(p, c.cgroup, false);
  return p;
}

}  // namespace pmheld
