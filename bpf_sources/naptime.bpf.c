/* naptime: trace nanosleep(2) and clock_nanosleep(2) with their parent process, the
 * requested length and the time actually slept.
 *
 * Struct offsets are injected as -D flags read from the kernel's BTF:
 *   OFF_TASK_REAL_PARENT  task_struct.real_parent
 *   OFF_TASK_TGID         task_struct.tgid
 *   OFF_TASK_COMM         task_struct.comm
 * Optional filters (all applied at both enter and exit, so a filtered thread never
 * counts as unmatched):
 *   FILTER_TGID  boolean expression over `tgid`, e.g. (tgid == 42 || tgid == 43)
 *   FILTER_TID   boolean expression over `tid`
 *   FILTER_COMM  compare the task's comm with config.comm
 *   MIN_NS       drop sleeps whose requested length is below this (decided at exit)
 */
#include "naptime_shared.h"

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

BPF_HASH(start, u32, struct naptime_start, NAPTIME_MAX_INFLIGHT);
BPF_ARRAY(stats, u64, NAPTIME_STAT_MAX);
BPF_ARRAY(config, struct naptime_config, 1);
/* threads whose last sleep returned ERESTART_RESTARTBLOCK: if their next syscall is
 * restart_syscall, the sleep went on after the signal (not measured, only counted) */
BPF_TABLE("lru_hash", u32, u8, restarting, 4096);
BPF_PERF_OUTPUT(events);

static __always_inline void stat_inc(int idx) {
  u64 *v = stats.lookup(&idx);
  if (v)
    __sync_fetch_and_add(v, 1);
}

static __always_inline int wanted(u64 id) {
  u32 tgid = id >> 32, tid = (u32)id;
  (void)tgid;
  (void)tid;
#ifdef FILTER_TGID
  if (!(FILTER_TGID))
    return 0;
#endif
#ifdef FILTER_TID
  if (!(FILTER_TID))
    return 0;
#endif
#ifdef FILTER_COMM
  {
    int zero = 0;
    struct naptime_config *cfg = config.lookup(&zero);
    char comm[NAPTIME_COMM_LEN] = {};
    if (!cfg)
      return 0;
    bpf_get_current_comm(comm, sizeof(comm));
#pragma unroll
    for (int i = 0; i < NAPTIME_COMM_LEN; i++) {
      if (comm[i] != cfg->comm[i])
        return 0;
      if (comm[i] == 0)
        break;
    }
  }
#endif
  return 1;
}

static __always_inline int on_enter(s32 clock, u32 flags, const void *rqtp) {
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id;
  struct naptime_start s = {};
  struct {
    s64 sec;
    s64 nsec;
  } ts = {};
  void *task, *parent = NULL;

  if (!wanted(id))
    return 0;
  s.clock = clock;
  s.flags = flags;
  if (bpf_probe_read_user(&ts, sizeof(ts), rqtp))
    s.flags |= NAPTIME_F_BAD_REQUEST;
  s.req_sec = ts.sec;
  s.req_nsec = ts.nsec;
  task = (void *)bpf_get_current_task();
  if (bpf_probe_read_kernel(&parent, sizeof(parent), task + OFF_TASK_REAL_PARENT) == 0 && parent) {
    bpf_probe_read_kernel(&s.ppid, sizeof(s.ppid), parent + OFF_TASK_TGID);
    bpf_probe_read_kernel(s.pcomm, sizeof(s.pcomm), parent + OFF_TASK_COMM);
  }
  restarting.delete(&tid);
  s.enter_boot_ns = bpf_ktime_get_boot_ns();
  s.enter_mono_ns = bpf_ktime_get_ns();
  if (start.update(&tid, &s))
    stat_inc(NAPTIME_STAT_MAP_FULL);
  return 0;
}

static __always_inline int on_exit(void *ctx, long ret) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id;
  struct naptime_event ev = {};
  struct naptime_start *s;

  if (!wanted(id))
    return 0;
  s = start.lookup(&tid);
  if (!s) {
    stat_inc(NAPTIME_STAT_UNMATCHED_END);
    return 0;
  }
  __builtin_memcpy(&ev.start, s, sizeof(ev.start));
  start.delete(&tid);
  if (ret == -NAPTIME_ERESTART_RESTARTBLOCK) {
    u8 one = 1;
    restarting.update(&tid, &one);
  }
#ifdef MIN_NS
  {
    int zero = 0;
    s64 req = 0;
    struct naptime_config *cfg = config.lookup(&zero);
    if (cfg && naptime_requested_ns(&ev.start, cfg->realtime_off_ns, cfg->tai_off_ns, &req) &&
        req < (s64)MIN_NS)
      return 0;
  }
#endif
  ev.exit_mono_ns = now;
  ev.ret = ret;
  ev.pid = id >> 32;
  ev.tid = tid;
  bpf_get_current_comm(ev.comm, sizeof(ev.comm));
  events.perf_submit(ctx, &ev, sizeof(ev));
  return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_nanosleep) {
  return on_enter(NAPTIME_CLOCK_MONOTONIC, NAPTIME_F_NANOSLEEP, args->rqtp);
}

TRACEPOINT_PROBE(syscalls, sys_exit_nanosleep) {
  return on_exit(args, args->ret);
}

TRACEPOINT_PROBE(syscalls, sys_enter_clock_nanosleep) {
  return on_enter((s32)args->which_clock, (args->flags & 1) ? NAPTIME_F_ABSTIME : 0, args->rqtp);
}

TRACEPOINT_PROBE(syscalls, sys_exit_clock_nanosleep) {
  return on_exit(args, args->ret);
}

TRACEPOINT_PROBE(syscalls, sys_enter_restart_syscall) {
  u32 tid = (u32)bpf_get_current_pid_tgid();
  if (restarting.lookup(&tid)) {
    restarting.delete(&tid);
    stat_inc(NAPTIME_STAT_RESTARTED);
  }
  return 0;
}
