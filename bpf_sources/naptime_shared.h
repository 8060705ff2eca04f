/* Shared between naptime.bpf.c and the naptime front-end. Plain C: compiled by
 * libbcc's clang into BPF and by g++ into the tool and its unit tests, so both sides
 * convert a request into a relative length the same way (naptime_requested_ns). */
#ifndef BPFDIAG_NAPTIME_SHARED_H
#define BPFDIAG_NAPTIME_SHARED_H

#define NAPTIME_COMM_LEN 16
#define NAPTIME_MAX_INFLIGHT 16384 /* threads sleeping at the same time */

/* naptime_start.flags */
#define NAPTIME_F_ABSTIME 1u     /* TIMER_ABSTIME: the request is a clock value */
#define NAPTIME_F_NANOSLEEP 2u   /* nanosleep(2), not clock_nanosleep(2) */
#define NAPTIME_F_BAD_REQUEST 4u /* the timespec could not be read from user memory */
#define NAPTIME_F_RESTARTED 8u   /* the kernel restarted the sleep transparently after a
                                    signal without handler (SIGSTOP/SIGCONT, ptrace): the
                                    event covers the original call and its restarts */

/* Clock ids (include/uapi/linux/time.h) */
#define NAPTIME_CLOCK_REALTIME 0
#define NAPTIME_CLOCK_MONOTONIC 1
#define NAPTIME_CLOCK_PROCESS_CPUTIME_ID 2
#define NAPTIME_CLOCK_THREAD_CPUTIME_ID 3
#define NAPTIME_CLOCK_BOOTTIME 7
#define NAPTIME_CLOCK_REALTIME_ALARM 8
#define NAPTIME_CLOCK_BOOTTIME_ALARM 9
#define NAPTIME_CLOCK_TAI 11

/* Kernel-internal return codes of an interrupted sleep (include/linux/errno.h), as
 * sys_exit sees them, before signal delivery decides: when a handler runs, user space
 * gets EINTR (ERESTARTSYS only without SA_RESTART, ERESTARTNOINTR never); otherwise
 * the kernel restarts the call (ERESTART_RESTARTBLOCK through restart_syscall(2), the
 * others by re-executing it) and the application never notices. */
#define NAPTIME_EINTR 4
#define NAPTIME_ERESTARTSYS 512
#define NAPTIME_ERESTARTNOINTR 513
#define NAPTIME_ERESTARTNOHAND 514
#define NAPTIME_ERESTART_RESTARTBLOCK 516

/* Slots of the data-quality counters (bpf_sources/common.h `dq_counters`), mapped
 * to data_quality keys by the table in tools/naptime/run.cpp. */
#define NAPTIME_CNT_UNMATCHED_END 0 /* unmatched_end: exits whose enter was not seen */
#define NAPTIME_CNT_MAP_FULL 1      /* map_full: enters dropped, `start` map full */
#define NAPTIME_CNT_RESTARTED 2     /* restarted_after_signal: transparent restarts */
#define NAPTIME_CNT_MAX 3

/* Recorded at sys_enter, keyed by thread id. */
struct naptime_start {
  __u64 enter_mono_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
  __u64 enter_boot_ns; /* bpf_ktime_get_boot_ns(): CLOCK_BOOTTIME */
  __s64 req_sec;       /* the request as passed (relative length or absolute target) */
  __s64 req_nsec;
  __s32 clock;         /* clockid; CLOCK_MONOTONIC for nanosleep(2) */
  __u32 flags;         /* NAPTIME_F_* */
  __u32 ppid;          /* task->real_parent->tgid at enter */
  __u32 pad;
  char pcomm[NAPTIME_COMM_LEN]; /* task->real_parent->comm at enter */
};

/* Sent through the perf buffer at sys_exit. */
struct naptime_event {
  struct naptime_start start;
  __u64 exit_mono_ns;
  __s64 ret; /* return value user space saw: 0 or a negative errno (-EINTR when a
                signal handler interrupted it); the raw kernel code when the thread
                died before returning (see kernel_ret) */
  __s64 kernel_ret; /* the first sys_exit's raw value (e.g. -516), before signal
                       delivery turned it into -EINTR or a restart */
  __u32 pid; /* tgid */
  __u32 tid;
  char comm[NAPTIME_COMM_LEN];
};

/* Single-entry `config` array, written by user space. */
struct naptime_config {
  __s64 realtime_off_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC */
  __s64 tai_off_ns;      /* CLOCK_TAI - CLOCK_MONOTONIC */
  char comm[NAPTIME_COMM_LEN]; /* --comm filter (used with -DFILTER_COMM) */
};

/* The requested sleep as a relative length in ns. Returns 1 and sets *out when known,
 * 0 when it cannot be known (unreadable or invalid timespec, absolute CPU-time clock).
 * Absolute targets are converted with the clock read at enter: MONOTONIC and BOOTTIME
 * directly, REALTIME and TAI through their offset from MONOTONIC. A target already in
 * the past is a request of 0. */
/* A kernel-internal restart code at sys_exit: the sleep's fate (EINTR or transparent
 * restart) is decided at signal delivery, after the tracepoint. */
static inline int naptime_is_restart_code(__s64 ret) {
  return ret == -NAPTIME_ERESTARTSYS || ret == -NAPTIME_ERESTARTNOINTR ||
         ret == -NAPTIME_ERESTARTNOHAND || ret == -NAPTIME_ERESTART_RESTARTBLOCK;
}

static inline int naptime_requested_ns(const struct naptime_start *s, __s64 realtime_off_ns,
                                       __s64 tai_off_ns, __s64 *out) {
  __s64 t, now;
  if (s->flags & NAPTIME_F_BAD_REQUEST)
    return 0;
  if (s->req_sec < 0 || s->req_nsec < 0 || s->req_nsec >= 1000000000LL)
    return 0; /* the kernel answers EINVAL */
  if (s->req_sec >= 9000000000LL)
    t = 9000000000LL * 1000000000LL; /* beyond KTIME_MAX: "forever" */
  else
    t = s->req_sec * 1000000000LL + s->req_nsec;
  if (!(s->flags & NAPTIME_F_ABSTIME)) {
    *out = t;
    return 1;
  }
  switch (s->clock) {
  case NAPTIME_CLOCK_MONOTONIC:
    now = (__s64)s->enter_mono_ns;
    break;
  case NAPTIME_CLOCK_BOOTTIME:
  case NAPTIME_CLOCK_BOOTTIME_ALARM:
    now = (__s64)s->enter_boot_ns;
    break;
  case NAPTIME_CLOCK_REALTIME:
  case NAPTIME_CLOCK_REALTIME_ALARM:
    now = (__s64)s->enter_mono_ns + realtime_off_ns;
    break;
  case NAPTIME_CLOCK_TAI:
    now = (__s64)s->enter_mono_ns + tai_off_ns;
    break;
  default:
    return 0;
  }
  *out = t > now ? t - now : 0;
  return 1;
}

#endif
