// offcputime's option table (BCC's flags: -p -t -u -k -U -K -d -f -m -M --state
// --stack-storage-size, positional [duration]), parsing into Config, BPF cflags.
#include <cstdlib>
#include <algorithm>

#include "common/bpf_text.h"
#include "common/btf.h"
#include "common/cli.h"
#include "common/embedded.h"
#include "common/filters.h"
#include "common/proc.h"
#include "common/tool_config.h"
#include "common/unwind_maps.h"
#include "common/registry.h"
#include "tools/offcputime/offcputime.h"

namespace bpfdiag {
extern const EmbeddedFile kBpf_offcputime[];
}

namespace offcputime {
using namespace bpfdiag;

namespace {
constexpr uint64_t kMaxMapEntries = 1048576;

const OptionSpec kMapEntries{"map-entries", "N", "threads/stacks tracked (default 32768, 1024-1048576)", "Limits"};

ToolSpec make_spec() {
  ToolSpec s;
  s.name = "offcputime";
  s.summary = "summarize off-CPU time by stack: where do threads wait?";
  s.description =
      "Every time a thread leaves a CPU, its user and kernel stacks are recorded; when\n"
      "it runs again, the time it spent off-CPU is added to that stack (in the kernel).\n"
      "Uses the sched_switch tracepoint only (no kprobes). Times shown in microseconds.";
  s.options = {
      opt::pid("trace these processes only"),
      opt::tid("trace these threads only"),
      opt::cgroup(),
      opt::container(),
      OptionSpec{"u,user-threads-only", "", "user threads only (no kernel threads)", "Filters"},
      OptionSpec{"k,kernel-threads-only", "", "kernel threads only (no user threads)", "Filters"},
      OptionSpec{"state", "STATE",
                 "only blocks in this task state: 0 = running/preempted\n"
                 "(exact match), otherwise a bitmask (1 = interruptible\n"
                 "sleep, 2 = uninterruptible)",
                 "Filters"},
      opt::min("only blocks of at least TIME (default unit us,\ndefault 1 us)"),
      opt::max("only blocks of at most TIME (default unit us)"),
      opt::older_name("min-block-time", opt::min("")),  // BCC's long names
      opt::older_name("max-block-time", opt::max("")),
      opt::user_stacks_only("show user space stacks only"),
      opt::kernel_stacks_only("show kernel space stacks only"),
      opt::unwind(),
      opt::jvm_perfmap(),
      OptionSpec{"waker", "",
                 "also who woke each thread (BCC's offwaketime): the\n"
                 "waker's comm and stacks, or [interrupt] (a timer)",
                 "Output"},
      OptionSpec{"d,delimited", "", "insert \"--\" between kernel and user stacks", "Output"},
      opt::folded("folded output for flamegraph.pl and speedscope"),
      opt::per_thread("folded: name threads \"comm-PID/TID\" so they never merge"),
      opt::json("NDJSON: offcputime.start, an offcputime.stack record\n"
                "per stack, then offcputime.summary (times in ns)"),
      opt::svg("write a flame graph of the whole run to FILE\n(off-CPU colours, times in us)"),
      opt::pprof("write the whole run to FILE as a gzip-compressed\npprof profile (off_cpu in ns, for go tool pprof)"),
      opt::prometheus(),
      opt::listen(),
      opt::ebpf(),
      opt::help(),
      OptionSpec{"duration", "TIME", "trace for TIME (default unit s), then report", "Schedule"},
      opt::interval(),
      opt::count(),
      OptionSpec{"stack-storage-size", "N",
                 "stack traces kept (1-262144; default: sized\n"
                 "from the threads traced, 16384-131072)",
                 "Limits"},
      kMapEntries,
      opt::older_name("map-size", kMapEntries),
  };
  s.examples =
      "  offcputime             # trace off-CPU stack time until Ctrl-C\n"
      "  offcputime 5           # trace for 5 seconds only\n"
      "  offcputime -df 5       # 5 seconds, folded output with a \"-\" user/kernel frame\n"
      "  offcputime -m 1000     # trace only blocks of at least 1 ms\n"
      "  offcputime -M 10ms     # trace only blocks of at most 10 ms\n"
      "  offcputime -p 185      # only trace threads of PID 185\n"
      "  offcputime -t 188      # only trace thread 188\n"
      "  offcputime --cgroup system.slice/nginx.service 5  # one service\n"
      "  offcputime --container 3f2a9c1d8e7b -f 5  # one container, folded\n"
      "  offcputime -u          # only trace user threads (no kernel threads)\n"
      "  offcputime -k          # only trace kernel threads\n"
      "  offcputime -U          # only show user space stacks (no kernel)\n"
      "  offcputime -K          # only show kernel space stacks (no user)\n"
      "  offcputime --state 2   # only blocks in uninterruptible sleep (D)\n"
      "  offcputime -i 5 -c 3   # three reports, 5 seconds each\n"
      "  offcputime -fP -p 185 5 > out.folded  # per-thread flame graph input\n"
      "  offcputime -j 5        # NDJSON: every stack with offcpu_total_ns\n"
      "  offcputime -p 185 5 --svg off.svg  # an interactive flame graph\n"
      "  offcputime -p 185 5 --pprof off.pb.gz  # for go tool pprof\n"
      "  offcputime -p 4242 --jvm-perfmap 10  # a JVM: Java methods named\n"
      "  offcputime --waker -f -p 185 5  # folded wakee;...;--;...;waker lines\n"
      "  offcputime -i 10 --listen 9464  # metrics at 127.0.0.1:9464/metrics\n";
  s.positional = Positional::Duration;
  return s;
}

// parse_tool_cli names the duration option "-d/--duration"; here -d is BCC's delimiter.
std::string fix_duration_name(std::string e) {
  auto at = e.find("-d/--duration");
  if (at != std::string::npos) e.replace(at, 13, "--duration");
  return e;
}
}  // namespace

const ToolSpec& tool_spec() { return cached_spec<make_spec>(); }

Result<Config> parse_args(int argc, char** argv) {
  Config c;
  auto r = parse_stack_tool_cli(tool_spec(), argc, argv, c);
  if (!r) return Error{fix_duration_name(r.error())};
  if (c.help) return c;
  const CommonOptions& co = r->common;
  const auto& raw = r->raw;
  c.user_threads_only = raw.count("user-threads-only");
  c.kernel_threads_only = raw.count("kernel-threads-only");
  c.jvm_perfmap = raw.count("jvm-perfmap") > 0;
  c.waker = raw.count("waker") > 0;
  if (c.jvm_perfmap && c.pids.empty()) return Error{"--jvm-perfmap needs -p PID (the JVMs to ask)"};
  auto uw = unwind_dwarf_option(raw, !c.pids.empty() || !c.tids.empty());
  if (!uw) return Error{uw.error()};
  c.unwind_dwarf = *uw && !c.kernel_stacks_only;
  if (c.user_threads_only && c.kernel_threads_only)
    return Error{"-u and -k are mutually exclusive (user or kernel threads)"};
  if (c.kernel_threads_only && c.user_stacks_only)
    return Error{"-k with -U shows nothing: kernel threads have no user stack"};
  if (co.min_ns) c.min_ns = *co.min_ns;  // also under BCC's --min-block-time
  if (co.max_ns) c.max_ns = *co.max_ns;  // (parse_tool_cli refuses min > max)
  if (auto s = opt_str(raw, "state")) {
    auto v = parse_uint(*s, "--state", 0, 0xffff);
    if (!v) return Error{v.error()};
    c.state = *v;
  }
  if (c.waker && c.state && *c.state == 0)
    return Error{"--waker with --state 0 shows nothing: preempted threads are not woken"};
  if (auto s = opt_str(raw, "stack-storage-size")) {  // else 0: sized in run()
    auto v = parse_uint(*s, "--stack-storage-size", 1, 262144);
    if (!v) return Error{v.error()};
    c.stack_storage_size = *v;
  }
  if (const std::string* entries = r->value("map-entries")) {
    auto v = parse_uint(*entries, "--map-entries", 1024, kMaxMapEntries);
    if (!v) return Error{v.error()};
    c.map_entries = *v;
  }
  if (auto st = validate_targets(c)) return *st;
  return c;
}

// The registry's entry (common/registry.h): the option table, the parser and what each
// mode attaches.
const ToolEntry& registry_entry() {
  static const ToolEntry e{"offcputime", &tool_spec, &check_args<&parse_args>, {{"offcputime", {}, {"sched:sched_switch", "sched:sched_process_exec", "sched:sched_process_exit", "sched:sched_process_free"},
        false, false, "off-CPU stacks (sched_switch raw tracepoint)"},
       {"offcputime --waker", {}, {"sched:sched_switch", "sched:sched_waking", "sched:sched_process_exec",
        "sched:sched_process_exit", "sched:sched_process_free"}, false, false, "off-CPU stacks with their wakers' (+ sched_waking)"}},
      {{"", "-U", "-K"}, {"", "-u", "-k"}, {"", "--state 0", "--state 2"}, {"--unwind fp", "-p $PID --unwind fp", "-t $TID --unwind fp", "-p $PID --unwind dwarf"}, {"", "--waker"}}};
  return e;
}

Status validate_targets(const Config& c) { return check_targets(c.pids, c.tids); }

std::string bpf_text() { return with_unwind_header(with_common_header(kBpf_offcputime[0].text)); }

Result<BpfPlan> bpf_plan(const Config& c) {
  BpfPlan p;
  p.text = bpf_text();
  auto st = add_kernel_offsets(p, {
      {"OFF_TASK_PID", "task_struct", {"pid"}},
      {"OFF_TASK_TGID", "task_struct", {"tgid"}},
      {"OFF_TASK_FLAGS", "task_struct", {"flags"}},
      {"OFF_TASK_STATE", "task_struct", {"__state", "state"}},
  });
  if (st) return Error{st->message};
  add_arrival_offsets(p);
  p.id_filter("TGID_OK", c.pids).id_filter("TID_OK", c.tids);
  if (auto cst = add_cgroup_filter(p, c.cgroup, true)) return Error{cst->message};
  if (c.user_threads_only) p.flag("USER_THREADS_ONLY");
  if (c.kernel_threads_only) p.flag("KERNEL_THREADS_ONLY");
  if (c.waker) {  // sched_waking; the user registers at the top of the waker's kernel stack
    if (auto st = add_kernel_offsets(p, {{"OFF_TASK_STACK", "task_struct", {"stack"}}})) return Error{st->message};
    p.integer("THREAD_SIZE", 16384);  // x86-64 (as common/unwind_maps)
    p.flag("WAKER");
  }
  if (c.state) p.integer(*c.state == 0 ? "STATE_EQ" : "STATE_MASK", *c.state);
  p.integer("MIN_NS", c.min_ns, "ULL");
  if (c.max_ns)
    p.integer("MAX_NS", c.max_ns, "ULL");
  else
    p.expression("MAX_NS", "0xffffffffffffffffULL");
  if (!c.kernel_stacks_only) p.flag("CAPTURE_USER");
  if (!c.user_stacks_only) p.flag("CAPTURE_KERNEL");
  uint64_t stacks = c.stack_storage_size ? c.stack_storage_size : kDefaultStackStorage;
  p.integer("STACK_STORAGE_SIZE", stacks);
  p.integer("OVERFLOW_STORAGE_SIZE", overflow_storage_size(stacks));
  p.integer("START_SIZE", c.map_entries);
  p.integer("COUNTS_SIZE", c.map_entries * 8);  // allocated as used
  p.integer("SEEN_SIZE", c.map_entries);
  return p;
}

}  // namespace offcputime
