// naptime's model: decoding BPF events into Sleeps (requested length, clocks,
// errno names) and the per-report totals.
#include <time.h>

#include <cstring>

#include "tools/naptime/naptime.h"

static_assert(sizeof(naptime_start) == 64, "naptime_start layout shared with BPF");
static_assert(sizeof(naptime_event) == 112, "naptime_event layout shared with BPF");
static_assert(sizeof(naptime_config) == 32, "naptime_config layout shared with BPF");

namespace naptime {
using namespace bpfdiag;

const std::vector<std::string>& dq_keys() {
  // restarted_after_signal: sleeps the kernel resumed after a signal without handler;
  // unreadable_requests: timespecs not readable from user memory; short_records: perf
  // records too short to be an event.
  static const std::vector<std::string> keys = {"restarted_after_signal", "unreadable_requests", "short_records"};
  return keys;
}


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
  interrupted_ += s.interrupted;
  restarted_ += s.restarted;
  if (s.requested_ns) requested_ns_ += *s.requested_ns;
  slept_ns_ += s.slept_ns;
  all_.record(s.slept_ns);
  all_us_.record(s.slept_ns / 1000);
}

}  // namespace naptime
