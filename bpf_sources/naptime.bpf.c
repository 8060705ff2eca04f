/* naptime: trace nanosleep(2) and clock_nanosleep(2) with their parent process, the
 * requested length and the time actually slept.
 *
 * Struct offsets are injected as -D flags read from the kernel's BTF:
 *   OFF_TASK_REAL_PARENT  task_struct.real_parent
 *   OFF_TASK_TGID         task_struct.tgid
 *   OFF_TASK_COMM         task_struct.comm
 * Filters (all applied at both enter and exit, so a filtered thread never counts as
 * unmatched), from the suite's one -p/-t generator (common/filters.h):
 *   TGID_OK(x), TID_OK(x)  process/thread id filters ((1) when not filtering)
 *   FILTER_COMM  compare the task's comm with config.comm
 *   MIN_NS       drop sleeps whose requested length is below this (decided at exit)
 *
 * Signals: sys_exit sees the kernel's restart code (-512..-516) before signal
 * delivery decides the outcome, so such an exit is parked in `pending` until:
 *   signal_deliver with a handler      -> user space got EINTR: emitted with ret -EINTR
 *   restart_syscall / the same call    -> transparent restart (no handler: SIGSTOP,
 *     entered again                       SIGCONT, ptrace): the sleep goes on and is
 *                                          emitted once, at its final exit, flagged
 *                                          NAPTIME_F_RESTARTED, timed from the first enter
 *   the thread exits                   -> emitted with the raw kernel code
 */
#include "naptime_shared.h"
#define DQ_NCOUNTERS NAPTIME_CNT_MAX
#include "common.h"

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

BPFDIAG_HASH_LAZY(start, u32, struct naptime_start, NAPTIME_MAX_INFLIGHT);
BPF_ARRAY(config, struct naptime_config, 1);
/* sleeps whose sys_exit returned a restart code, until their fate is known */
BPFDIAG_HASH_LAZY(pending, u32, struct naptime_event, NAPTIME_MAX_INFLIGHT);
BPF_PERF_OUTPUT(events);

#include "filters.h"

static __always_inline int wanted(u64 id) {
  u32 tgid = id >> 32, tid = (u32)id;
  if (!TGID_OK(tgid) || !TID_OK(tid) || !CGROUP_OK())
    return 0;
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

/* Sends one finished sleep (the -m filter is applied here). */
static __always_inline void emit(void *ctx, struct naptime_event *ev) {
#ifdef MIN_NS
  int zero = 0;
  s64 req = 0;
  struct naptime_config *cfg = config.lookup(&zero);
  if (cfg && naptime_requested_ns(&ev->start, cfg->realtime_off_ns, cfg->tai_off_ns, &req) &&
      req < (s64)MIN_NS)
    return;
#endif
  events.perf_submit(ctx, ev, sizeof(*ev));
}

static __always_inline int on_enter(void *ctx, s32 clock, u32 flags, const void *rqtp) {
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id;
  struct naptime_start s = {};
  struct {
    s64 sec;
    s64 nsec;
  } ts = {};
  void *task, *parent = NULL;

  if (!wanted(id))
    return PASS;
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
  s.enter_boot_ns = bpf_ktime_get_boot_ns();
  s.enter_mono_ns = bpf_ktime_get_ns();
  struct naptime_event *p = pending.lookup(&tid);
  if (p) {
    if (p->kernel_ret != -NAPTIME_ERESTART_RESTARTBLOCK) {
      /* re-executed after a signal without handler: the same sleep goes on */
      __builtin_memcpy(&s, &p->start, sizeof(s));
      s.flags |= NAPTIME_F_RESTARTED;
      dq_count(NAPTIME_CNT_RESTARTED);
    } else {
      /* ERESTART_RESTARTBLOCK resumes only through restart_syscall: its fate was
       * missed; report it as the kernel left it */
      emit(ctx, p);
    }
    pending.delete(&tid);
  }
  if (start.update(&tid, &s))
    dq_count(NAPTIME_CNT_MAP_FULL);
  return PASS;
}

static __always_inline int on_exit(void *ctx, long ret, int restart_syscall) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id;
  struct naptime_event ev = {};
  struct naptime_start *s;

  if (!wanted(id))
    return PASS;
  s = start.lookup(&tid);
  if (!s) {
    /* restart_syscall also resumes other syscalls (poll, futex): not ours */
    if (!restart_syscall)
      dq_count(NAPTIME_CNT_UNMATCHED_END);
    return PASS;
  }
  if (restart_syscall && !(s->flags & NAPTIME_F_RESTARTED))
    return PASS;
  __builtin_memcpy(&ev.start, s, sizeof(ev.start));
  start.delete(&tid);
  ev.exit_mono_ns = now;
  ev.ret = ret;
  ev.kernel_ret = ret;
  ev.pid = id >> 32;
  ev.tid = tid;
  bpf_get_current_comm(ev.comm, sizeof(ev.comm));
  if (naptime_is_restart_code(ret)) {
    /* EINTR or a transparent restart: decided at signal delivery, right after */
    if (pending.update(&tid, &ev))
      dq_count(NAPTIME_CNT_MAP_FULL);
    return PASS;
  }
  emit(ctx, &ev);
  return PASS;
}

TRACEPOINT_PROBE(syscalls, sys_enter_nanosleep) {
  return on_enter(args, NAPTIME_CLOCK_MONOTONIC, NAPTIME_F_NANOSLEEP, args->rqtp);
}

TRACEPOINT_PROBE(syscalls, sys_exit_nanosleep) {
  return on_exit(args, args->ret, 0);
}

TRACEPOINT_PROBE(syscalls, sys_enter_clock_nanosleep) {
  return on_enter(args, (s32)args->which_clock, (args->flags & 1) ? NAPTIME_F_ABSTIME : 0, args->rqtp);
}

TRACEPOINT_PROBE(syscalls, sys_exit_clock_nanosleep) {
  return on_exit(args, args->ret, 0);
}

/* No handler ran: the kernel resumes an ERESTART_RESTARTBLOCK sleep here; it is the
 * same sleep, timed on until restart_syscall returns. */
TRACEPOINT_PROBE(syscalls, sys_enter_restart_syscall) {
  u32 tid = (u32)bpf_get_current_pid_tgid();
  struct naptime_event *p = pending.lookup(&tid);
  if (!p)
    return PASS;
  struct naptime_start s;
  __builtin_memcpy(&s, &p->start, sizeof(s));
  s.flags |= NAPTIME_F_RESTARTED;
  pending.delete(&tid);
  if (start.update(&tid, &s))
    dq_count(NAPTIME_CNT_MAP_FULL);
  else
    dq_count(NAPTIME_CNT_RESTARTED);
  return PASS;
}

TRACEPOINT_PROBE(syscalls, sys_exit_restart_syscall) {
  return on_exit(args, args->ret, 1);
}

/* A signal is delivered to the current thread. With a handler, an interrupted sleep
 * returns EINTR to user space (ERESTARTSYS only without SA_RESTART; ERESTARTNOINTR is
 * always restarted). SIG_DFL/SIG_IGN (0/1) leave the restart to the kernel. */
TRACEPOINT_PROBE(signal, signal_deliver) {
  u32 tid = (u32)bpf_get_current_pid_tgid();
  struct naptime_event *p = pending.lookup(&tid);
  if (!p || args->sa_handler <= 1)
    return PASS;
  if (p->kernel_ret == -NAPTIME_ERESTARTNOINTR ||
      (p->kernel_ret == -NAPTIME_ERESTARTSYS && (args->sa_flags & 0x10000000 /* SA_RESTART */)))
    return PASS; /* re-executed after the handler: on_enter continues it */
  struct naptime_event ev;
  __builtin_memcpy(&ev, p, sizeof(ev));
  pending.delete(&tid);
  ev.ret = -NAPTIME_EINTR;
  emit(args, &ev);
  return PASS;
}

/* A thread killed while its sleep was parked: report it as the kernel left it. */
RAW_TRACEPOINT_PROBE(sched_process_exit) {
  u32 tid = (u32)bpf_get_current_pid_tgid();
  struct naptime_event *p = pending.lookup(&tid);
  if (!p)
    return 0;
  struct naptime_event ev;
  __builtin_memcpy(&ev, p, sizeof(ev));
  pending.delete(&tid);
  emit(ctx, &ev);
  return 0;
}
