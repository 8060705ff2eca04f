// profile's option table (BCC profile's flags: -p -t -U -K -I -F -f --stack-storage-size,
// positional [duration]; -d is the suite's duration, BCC's "delimited" is --delimited),
// parsing into Config, BPF cflags.
#include "common/bpf_text.h"
#include "common/cli.h"
#include "common/embedded.h"
#include "common/filters.h"
#include "common/tool_config.h"
#include "common/unwind_maps.h"
#include "common/registry.h"
#include "tools/profile/profile.h"

namespace bpfdiag {
extern const EmbeddedFile kBpf_profile[];
}

namespace profile {
using namespace bpfdiag;

namespace {
ToolSpec make_spec() {
  ToolSpec s;
  s.name = "profile";
  s.summary = "sample on-CPU stacks: where does the CPU time go?";
  s.description =
      "A software CPU-clock perf event on every CPU samples the running thread's user\n"
      "and kernel stacks F times a second; samples are counted per thread and stack in\n"
      "the kernel. A thread that runs T seconds takes about F * T samples. The idle\n"
      "task (pid 0) is left out unless -I is given. Values are sample counts.";
  s.options = {
      opt::pid("sample these processes only"),
      opt::tid("sample these threads only"),
      opt::cgroup(),
      opt::container(),
      OptionSpec{"I,include-idle", "", "include the idle task (pid 0) in the samples", "Filters"},
      opt::user_stacks_only("show user space stacks only (no kernel)"),
      opt::kernel_stacks_only("show kernel space stacks only (no user)"),
      opt::unwind(),
      opt::jvm_perfmap(),
      OptionSpec{"delimited", "", "insert \"--\" between kernel and user stacks", "Output"},
      opt::folded("folded output for flame graphs (as offcputime -f)"),
      opt::per_thread("folded: name threads \"comm-PID/TID\" so they never merge"),
      opt::json("NDJSON: profile.start, a profile.stack record per\n"
                "stack, then profile.summary"),
      opt::svg(),
      opt::pprof("write the final report's samples to FILE as a\ngzip-compressed pprof profile (go tool pprof)"),
      opt::prometheus(),
      opt::listen(),
      opt::ebpf(),
      opt::help(),
      OptionSpec{"F,frequency", "HZ", "sample frequency per CPU (1-10000, default 49)", "Sampling"},
      opt::duration(),
      opt::interval(),
      opt::count(),
      OptionSpec{"stack-storage-size", "N", "stack traces kept (1024-1048576, default 16384)", "Limits"},
      OptionSpec{"map-entries", "N", "(thread, stack) pairs counted (1024-1048576,\ndefault 65536)",
                 "Limits"},
  };
  s.examples =
      "  profile                # sample all threads at 49 Hz until Ctrl-C\n"
      "  profile -F 99 10       # sample at 99 Hz for 10 seconds\n"
      "  profile -p 185 -d 5    # only PID 185, for 5 seconds\n"
      "  profile -t 188         # only thread 188\n"
      "  profile --container 3f2a9c1d8e7b -d 5  # one container's CPU time\n"
      "  profile -U             # user space stacks only (no kernel)\n"
      "  profile -K             # kernel space stacks only (no user)\n"
      "  profile -I 5           # include the idle task\n"
      "  profile -f -p 185 5 > cpu.folded  # folded, for flamegraph\n"
      "  profile -p 4242 --jvm-perfmap -f 10  # a JVM: Java methods named\n"
      "  profile -p 185 5 --svg cpu.svg    # an interactive flame graph\n"
      "  profile -p 185 5 --pprof cpu.pb.gz  # for go tool pprof -top cpu.pb.gz\n"
      "  profile -j -d 5        # NDJSON: every stack with its sample_count\n"
      "  profile -i 10 --listen 9464 >/dev/null  # metrics at 127.0.0.1:9464/metrics\n";
  s.positional = Positional::Duration;
  return s;
}
}  // namespace

const ToolSpec& tool_spec() { return cached_spec<make_spec>(); }

Result<Config> parse_args(int argc, char** argv) {
  Config c;
  auto r = parse_stack_tool_cli(tool_spec(), argc, argv, c);
  if (!r) return Error{r.error()};
  if (c.help) return c;
  const auto& raw = r->raw;
  c.include_idle = raw.count("include-idle");
  if (auto s = opt_str(raw, "frequency")) {
    auto v = parse_uint(*s, "-F/--frequency", 1, 10000);
    if (!v) return Error{v.error()};
    c.freq_hz = *v;
  }
  if (auto s = opt_str(raw, "stack-storage-size")) {
    auto v = parse_uint(*s, "--stack-storage-size", 1024, 1048576);
    if (!v) return Error{v.error()};
    c.stack_storage_size = *v;
  }
  if (auto s = opt_str(raw, "map-entries")) {
    auto v = parse_uint(*s, "--map-entries", 1024, 1048576);
    if (!v) return Error{v.error()};
    c.map_entries = *v;
  }
  if (auto st = check_targets(c.pids, c.tids)) return *st;
  c.jvm_perfmap = raw.count("jvm-perfmap") > 0;
  if (c.jvm_perfmap && c.pids.empty()) return Error{"--jvm-perfmap needs -p PID (the JVMs to ask)"};
  auto uw = unwind_dwarf_option(raw, !c.pids.empty() || !c.tids.empty());
  if (!uw) return Error{uw.error()};
  c.unwind_dwarf = *uw && !c.kernel_stacks_only;
  return c;
}

// The registry's entry (common/registry.h): the option table, the parser and what each
// mode attaches.
const ToolEntry& registry_entry() {
  static const ToolEntry e{"profile", &tool_spec, &check_args<&parse_args>, {{"profile", {}, {}, true, false, "on-CPU stacks (perf cpu-clock samples)"}},
      {{"", "-U", "-K"}, {"", "-I"}, {"--unwind fp", "-p $PID --unwind fp", "-t $TID --unwind fp", "-p $PID --unwind dwarf"}}};
  return e;
}

std::string bpf_text() { return with_unwind_header(with_common_header(kBpf_profile[0].text)); }

BpfPlan bpf_plan(const Config& c) {
  BpfPlan p;
  p.text = bpf_text();
  p.id_filter("TGID_OK", c.pids).id_filter("TID_OK", c.tids);
  add_cgroup_filter(p, c.cgroup, false);
  if (c.include_idle) p.flag("INCLUDE_IDLE");
  if (!c.kernel_stacks_only) p.flag("CAPTURE_USER");
  if (!c.user_stacks_only) p.flag("CAPTURE_KERNEL");
  p.integer("STACK_STORAGE_SIZE", c.stack_storage_size);
  p.integer("COUNTS_SIZE", c.map_entries);
  // system-wide user stacks: each process is announced on its first sample (and after
  // exec) and its mappings read while it runs (bpf_sources/announce.h)
  if (c.announce()) {
    p.flag("ANNOUNCE");
    p.integer("SEEN_SIZE", 16384);  // live processes; beyond: seen_full, named at the report
  }
  return p;
}

}  // namespace profile
