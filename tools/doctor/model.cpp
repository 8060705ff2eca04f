// doctor's model: verdicts that need no machine (unit-tested): lockdown parsing, the
// frame-pointer heuristic, the tool/mode matrix (from the registry's modes), the live
// check's verdicts, exit code.
#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "common/pthread_probes.h"
#include "tools/doctor/doctor.h"

namespace doctor {
using namespace bpfdiag;

const char* status_name(Verdict s) {
  switch (s) {
    case Verdict::Ok: return "ok";
    case Verdict::Warn: return "warn";
    case Verdict::Fail: return "fail";
    case Verdict::Skip: return "skip";
  }
  return "?";
}

int exit_code(const std::vector<Check>& checks) {
  for (const auto& k : checks)
    if (k.required && k.status == Verdict::Fail) return 1;
  return 0;
}

std::map<std::string, uint64_t> status_counts(const std::vector<Check>& checks) {
  std::map<std::string, uint64_t> n = {{"ok", 0}, {"warn", 0}, {"fail", 0}, {"skip", 0}};
  for (const auto& k : checks) n[status_name(k.status)]++;
  return n;
}

std::string lockdown_mode(const std::string& text) {
  auto l = text.find('['), r = text.find(']');
  if (l == std::string::npos || r == std::string::npos || r <= l + 1) return "";
  return text.substr(l + 1, r - l - 1);
}

// x86-64, walked with the suite's prologue decoder (common/pthread_probes.h); the walk
// ends at a branch, an instruction it does not know, or after 8 instructions.
FrameSetup frame_setup(const uint8_t* code, size_t n) {
  size_t off = 0;
  bool stack = false;
  for (int insn = 0; insn < 8 && off < n; ++insn) {
    const uint8_t* p = code + off;
    const size_t left = n - off;
    if (p[0] == 0x55 && left >= 4 && p[1] == 0x48 &&
        ((p[2] == 0x89 && p[3] == 0xe5) || (p[2] == 0x8b && p[3] == 0xec)))
      return FrameSetup::FramePointer;
    X86Insn d = decode_x86(p, left);
    if (!d.ok || d.len == 0) break;
    if (d.writes & kRegRsp) stack = true;  // push, sub/add %rsp, call
    if (d.branch) break;
    off += d.len;
  }
  return stack ? FrameSetup::NoFramePointer : FrameSetup::Frameless;
}

std::string frame_pointer_verdict(const FramePointerSample& s) {
  if (s.functions < 5) return "unknown";
  if (s.with_fp * 5 >= s.functions * 4) return "yes";
  if (s.with_fp * 5 <= s.functions) return "no";
  return "mixed";
}

std::vector<std::string> matrix_tracepoints(const std::vector<const ToolEntry*>& tools) {
  std::vector<std::string> all;
  for (const ToolEntry* t : tools)
    for (const auto& m : t->modes)
      for (const auto* list : {&m.tracepoints, &m.raw_tracepoints})
        for (const auto& tp : *list)
          if (std::find(all.begin(), all.end(), tp) == all.end()) all.push_back(tp);
  return all;
}

std::string needs_text(const ModeNeeds& m) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : "; ") + part; };
  auto join = [](const std::vector<std::string>& v) {
    std::string j;
    for (const auto& x : v) j += (j.empty() ? "" : ", ") + x;
    return j;
  };
  if (!m.tracepoints.empty()) add("tracepoints " + join(m.tracepoints));
  if (!m.raw_tracepoints.empty()) add("raw tracepoints " + join(m.raw_tracepoints));
  if (m.perf_cpu_clock) add("perf cpu-clock events");
  if (m.uprobes) add("uprobes");
  return s;
}

namespace {

std::vector<std::string> missing_needs(const Features& f, const ModeNeeds& m) {
  std::vector<std::string> missing;
  if (!f.root) missing.push_back("root");
  if (!f.btf) missing.push_back("kernel BTF");
  if (m.needs_tracefs() && !f.tracefs) missing.push_back("tracefs");
  if (m.perf_cpu_clock && !f.perf_cpu_clock) missing.push_back("perf cpu-clock events");
  if (m.uprobes && !f.uprobes) missing.push_back("uprobes");
  if (f.tracefs) {
    for (const auto& tp : m.tracepoints)
      if (!f.tracepoints.count(tp)) missing.push_back("tracepoint " + tp);
    for (const auto& tp : m.raw_tracepoints)
      if (!f.tracepoints.count(tp)) missing.push_back("raw tracepoint " + tp);
  }
  return missing;
}

}  // namespace

std::vector<Check> tool_matrix(const Features& f, const std::vector<const ToolEntry*>& tools) {
  std::vector<Check> out;
  for (const ToolEntry* t : tools)
    for (const auto& m : t->modes) {
      std::vector<std::string> missing = missing_needs(f, m);
      Check k{"tools", m.mode, Verdict::Ok, false, m.gives, ""};
      if (!missing.empty()) {
        k.status = Verdict::Warn;
        std::string list;
        for (const auto& s : missing) list += (list.empty() ? "" : ", ") + s;
        k.detail = "will not work: missing " + list;
        k.fix = !f.root ? "run as root" : "see the failed checks above for " + missing.front();
      }
      out.push_back(k);
    }
  return out;
}

std::string strf(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::vector<Check> live_checks(const LiveResult& r) {
  using ull = unsigned long long;
  std::vector<Check> out;
  {  // tracepoint counts
    Check k{"live", "tracepoint_events", Verdict::Ok, true, "", ""};
    k.detail = strf("syscalls:sys_enter_getppid counted %llu of %llu getppid() calls",
                    ull(r.syscalls_counted), ull(r.syscalls_made));
    if (r.syscalls_counted != r.syscalls_made) {
      k.set(Verdict::Fail, "tracepoint events are missed or misattributed: report this kernel (uname -a) as a bug");
    }
    out.push_back(k);
  }
  {  // perf buffer delivery
    Check k{"live", "event_delivery", Verdict::Ok, true, "", ""};
    k.detail = strf("perf buffer delivered %llu of %llu events, %llu lost, %llu duplicated",
                    ull(r.events_received), ull(r.syscalls_counted), ull(r.events_lost), ull(r.events_duplicated));
    if (r.events_received != r.syscalls_counted || r.events_lost || r.events_duplicated) {
      k.set(Verdict::Fail, "events are lost between kernel and user space: check memory (memlock, memcg) and CPU load");
    }
    out.push_back(k);
  }
  {  // raw tracepoint: every switch of the sleeping thread, by the kernel's own count
    Check k{"live", "raw_tracepoint_events", Verdict::Ok, true, "", ""};
    k.detail = strf("sched_switch counted %llu of the kernel's %llu switches of a thread making %llu sleeps",
                    ull(r.switches_counted), ull(r.switches_kernel), ull(r.sleeps_made));
    if (r.switches_counted != r.switches_kernel || r.switches_kernel < r.sleeps_made / 2) {
      k.set(Verdict::Fail, "sched_switch events are missed or extra: off-CPU and run queue results cannot be trusted");
    }
    out.push_back(k);
  }
  {  // uprobe (optional: only the uprobe tools need it)
    Check k{"live", "uprobe_events", Verdict::Ok, false, "", ""};
    if (!r.uprobe_error.empty()) {
      k.status = Verdict::Warn;
      k.detail = "uprobe not attached: " + r.uprobe_error;
      k.fix = "pmheld and lockstat --uprobes need uprobes (CONFIG_UPROBE_EVENTS=y)";
    } else {
      k.detail = strf("uprobe on libc getppid counted %llu of %llu calls",
                    ull(r.uprobe_hits), ull(r.uprobe_calls));
      if (r.uprobe_hits != r.uprobe_calls) {
        k.set(Verdict::Warn, "uprobe hits are missed: pmheld and lockstat --uprobes counts cannot be trusted");
      }
    }
    out.push_back(k);
  }
  {
    Check k{"live", "live_check_time", Verdict::Ok, false, "", ""};
    k.detail = strf("compile %.0f ms, attach and events %.0f ms, whole live check %.0f ms",
                  r.compile_ns / 1e6, (r.total_ns - r.compile_ns) / 1e6, r.total_ns / 1e6);
    if (r.total_ns > 1000000000ULL) {
      k.status = Verdict::Warn;
      k.fix = "slow start: the machine is loaded or short of memory; tools take as long to attach";
    }
    out.push_back(k);
  }
  return out;
}

}  // namespace doctor
