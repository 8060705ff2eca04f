/* Shared between offcputime.bpf.c and the offcputime front-end. */
#ifndef BPFDIAG_OFFCPUTIME_SHARED_H
#define BPFDIAG_OFFCPUTIME_SHARED_H

#define OFFCPU_COMM_LEN 16
#include "stacks_shared.h"
/* Stack ids with this bit are in the overflow map (bpf_sources/stacks.h). */
#define OFFCPU_OVERFLOW_BIT BPFDIAG_OVERFLOW_BIT

/* Aggregation key: one entry per thread and (user, kernel) stack pair. */
struct offcpu_key {
  __u32 tgid;
  __u32 tid;
  __s32 user_stack_id;   /* < 0: not captured (-EFAULT: no user stack) or lost */
  __s32 kernel_stack_id;
  char comm[OFFCPU_COMM_LEN];
  __u64 user_hash;       /* --unwind=dwarf: uw_stacks key of the user stack (0: none) */
  __u64 declared;        /* the declared wait in flight at the switch-out (declared.h raw; 0: none) */
  __u32 runnable;        /* 1: switched out runnable (preempted or yielded): a wait for a CPU */
  __u32 pad;
};

struct offcpu_val {
  __u64 total_ns;  /* summed off-CPU time */
  __u64 count;     /* number of off-CPU periods */
  __u64 max_ns;    /* longest single period */
};

/* --waker: who made a blocked thread runnable again (BCC's offwaketime). Written per
 * wakee at sched_waking (current is the waker, or whatever an interrupt interrupted),
 * consumed by the wakee's next switch-in, where it joins the period's key. */
enum offcpu_waker_kind {
  OFFCPU_WAKER_UNSEEN = 0,    /* a blocked period whose wakeup was not recorded (counted) */
  OFFCPU_WAKER_TASK = 1,      /* a thread woke it, from its own (process) context */
  OFFCPU_WAKER_IRQ = 2,       /* woken from an interrupt or softirq (a timer, a device):
                                 current was only interrupted; no user stack, no waker id.
                                 Set by the front-end from the kernel stack (BPF records
                                 every wakeup as TASK) */
  OFFCPU_WAKER_PREEMPTED = 3, /* switched out runnable: nobody had to wake it */
};
struct offcpu_waker {
  __u32 tgid;            /* OFFCPU_WAKER_TASK only (else 0) */
  __u32 tid;
  __s32 user_stack_id;   /* as offcpu_key's; -14: none (a kernel thread) */
  __s32 kernel_stack_id; /* captured with -U too (it tells an interrupt) */
  __u64 user_hash;       /* --unwind=dwarf and the waker's process has tables (0: none) */
  char comm[OFFCPU_COMM_LEN]; /* OFFCPU_WAKER_TASK only */
  __u32 kind;            /* enum offcpu_waker_kind */
  __u32 pad;
};

/* --waker's aggregation key: the period's key and its waker. */
struct offcpu_wkey {
  struct offcpu_key k;
  struct offcpu_waker w;
};

/* Per-thread state stored at switch-out, consumed at switch-in (which marks it closed:
 * entries stay while the thread lives). */
#define OFFCPU_START_CLOSED 2
struct offcpu_start {
  __u64 ts;
  __u32 tgid;
  __s32 user_stack_id;
  __s32 kernel_stack_id;
  __u16 skip;     /* 1: the thread matched the pid/tid filters but not --state;
                     OFFCPU_START_CLOSED: the period ended (the thread is on a CPU) */
  __u16 runnable; /* 1: switched out in state TASK_RUNNING (preempted or yielded) */
  char comm[OFFCPU_COMM_LEN];
  __u64 user_hash;
  __u64 arrivals; /* the thread's arrivals on a CPU so far (bpf_sources/arrival.h) */
  __u64 declared; /* the declared wait in flight (0: none) */
};

/* Slots of the data-quality counters (bpf_sources/common.h `dq_counters`), mapped
 * to data_quality keys by the table in tools/offcputime/run.cpp. */
enum offcpu_counter {
  OFFCPU_CNT_STACK_LOST = 0,   /* lost_stacks: no stack id (table and overflow full) */
  OFFCPU_CNT_START_FULL,       /* map_full: start map full, switch-out not recorded */
  OFFCPU_CNT_COUNTS_FULL,      /* map_full: counts map full, off-CPU period dropped */
  OFFCPU_CNT_UNMATCHED_IN,     /* unmatched_end: switch-in with no switch-out seen */
  OFFCPU_CNT_SEEN_FULL,        /* seen_full: a new process not announced (symbols) */
  OFFCPU_CNT_STACK_OVERFLOW,   /* overflow_stacks: stacks kept in the overflow map */
  OFFCPU_CNT_PERIOD_DROPPED,   /* dropped_periods: a switch-out found the thread's last
                                  period still open (its switch-in was never seen), or a
                                  switch-in came before its switch-out's timestamp */
  OFFCPU_CNT_PERIOD_RECOVERED, /* recovered_periods: a period whose switch-in was never
                                  seen, ended at the arrival the scheduler recorded */
  OFFCPU_CNT_DECL_STALE,       /* stale_begins: a declared wait left without its end */
  OFFCPU_CNT_WAKER_FULL,       /* map_full: --waker: the wakers map was full, a wakeup not recorded */
  OFFCPU_CNT_WAKER_UNSEEN,     /* waker_unseen: --waker: a blocked period counted with no
                                  wakeup recorded for it (its waker shows as [unknown]) */
  OFFCPU_CNT_MAX
};

#endif
