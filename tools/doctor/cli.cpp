// doctor command line: the option table (generated --help), parsing, BPF text and flags.
#include "common/bpf_text.h"
#include "common/btf.h"
#include "common/cli.h"
#include "common/tool_config.h"
#include "common/embedded.h"
#include "common/registry.h"
#include "tools/doctor/doctor.h"

namespace bpfdiag {
extern const EmbeddedFile kBpf_doctor[];
}

namespace doctor {
using namespace bpfdiag;

const ToolSpec& tool_spec() {
  static const ToolSpec spec{
      "doctor",
      "say whether this machine can be traced, and what to fix.",
      "Checks what the suite needs before a run can be trusted: privileges, kernel\n"
      "BTF, tracefs, lockdown (fentry, tp_btf), kprobes, uprobes, perf events,\n"
      "perf_event_paranoid, memlock, kernel headers, libbcc; which tools and modes\n"
      "work here; and, with -p, what runs in a target (native code, Go, CPython, a\n"
      "HotSpot JVM, Node.js, JIT code), whether its files have symbols, unwind\n"
      "tables and frame pointers, and the suite's commands to run for it (e.g.\n"
      "offcputime -p PID --jvm-perfmap). A live check (under 1 s) loads a small BPF\n"
      "program, makes known syscalls, sleeps and libc calls, and checks that each was\n"
      "counted and no event was lost. One line per check: ok, warn (a feature some\n"
      "mode needs is missing), fail (the suite cannot be trusted here) or skip (not\n"
      "checked), with the fix. Exit status 1 when a required check fails, else 0.",
      {
          opt::pid("also check these processes: runtime, symbols, unwinding,\n"
                   "and the commands to run for each"),
          OptionSpec{"no-live", "", "skip the live check (no BPF program is loaded)", "Checks"},
          OptionSpec{"l,list", "",
                     "list the suite's tools and modes, and what each needs\n"
                     "(tracepoints, perf events, uprobes); no checks. With\n"
                     "-j: a doctor.tool record per tool, with its options",
                     "Checks"},
          opt::json("NDJSON: doctor.start, one doctor.check per check,\n"
                    "doctor.summary"),
          opt::ebpf(),
          opt::help(),
      },
      "  doctor             # check this machine, with the live check\n"
      "  doctor -p 181      # also PID 181: runtime, symbols, unwinding, what to run\n"
      "  doctor --no-live   # static checks only\n"
      "  doctor -j          # NDJSON (the runbook `doctor` runs this)\n"
      "  doctor --list      # every tool and mode, and what it needs\n",
      Positional::None};
  return spec;
}

const char* help_text() { return help_cstr(tool_spec()); }

Result<Config> parse_args(int argc, char** argv) {
  auto r = parse_tool_cli(tool_spec(), argc, argv);
  if (!r) return Error{r.error()};
  Config c;
  c.help = r->common.help;
  if (c.help) return c;
  c.json = r->common.json;
  c.ebpf = r->common.ebpf;
  c.pids = r->common.pids;
  c.live = !r->raw.count("no-live");
  c.list = r->raw.count("list") > 0;
  if (c.list && (c.ebpf || !c.pids.empty()))
    return Error{"-l/--list runs no checks: not with --ebpf or -p"};
  if (c.ebpf && !c.live) return Error{"--ebpf prints the live check's program: not with --no-live"};
  return c;
}

// The registry's entry (common/registry.h): the option table, the parser and what each
// mode attaches.
const ToolEntry& registry_entry() {
  static const ToolEntry e{"doctor", &tool_spec, &check_args<&parse_args>, {{"doctor", {"syscalls:sys_enter_getppid"}, {"sched:sched_switch"}, false, false,
        "the live check (uprobe events too, where uprobes work)"}},
      {}};
  return e;
}

// common.h pasted in: libbcc rewrites map calls only in the main file
std::string bpf_text() { return with_common_header(kBpf_doctor[0].text); }

bpfdiag::Result<bpfdiag::BpfPlan> bpf_plan(uint32_t tid) {
  bpfdiag::BpfPlan p;
  p.text = bpf_text();
  p.tracepoints = {"syscalls:sys_enter_getppid"};
  if (auto st = bpfdiag::add_kernel_offsets(p, {{"OFF_TASK_NVCSW", "task_struct", {"nvcsw"}},
                                                {"OFF_TASK_NIVCSW", "task_struct", {"nivcsw"}}}))
    return bpfdiag::Error{st->message};
  p.integer("TARGET_TID", tid);
  return p;
}

}  // namespace doctor
