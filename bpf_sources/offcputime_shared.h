/* Shared between offcputime.bpf.c and the offcputime front-end. */
#ifndef BPFDIAG_OFFCPUTIME_SHARED_H
#define BPFDIAG_OFFCPUTIME_SHARED_H

#define OFFCPU_COMM_LEN 16

/* Aggregation key: one entry per thread and (user, kernel) stack pair. */
struct offcpu_key {
  __u32 tgid;
  __u32 tid;
  __s32 user_stack_id;   /* < 0: not captured (-EFAULT: no user stack) or lost */
  __s32 kernel_stack_id;
  char comm[OFFCPU_COMM_LEN];
};

struct offcpu_val {
  __u64 total_ns;  /* summed off-CPU time */
  __u64 count;     /* number of off-CPU periods */
  __u64 max_ns;    /* longest single period */
};

/* Per-thread state stored at switch-out, consumed at switch-in. */
struct offcpu_start {
  __u64 ts;
  __u32 tgid;
  __s32 user_stack_id;
  __s32 kernel_stack_id;
  __u32 skip; /* 1: the thread matched the pid/tid filters but not --state */
  char comm[OFFCPU_COMM_LEN];
};

/* Per-CPU counters (BPF_PERCPU_ARRAY "stats"). */
enum offcpu_stat {
  OFFCPU_STAT_STACK_LOST = 0,   /* bpf_get_stackid failed (collision, table full) */
  OFFCPU_STAT_START_FULL,       /* start map full: switch-out not recorded */
  OFFCPU_STAT_COUNTS_FULL,      /* counts map full: off-CPU period dropped */
  OFFCPU_STAT_UNMATCHED_IN,     /* switch-in with no switch-out seen */
  OFFCPU_STAT_SEEN_FULL,        /* `seen` full: a new process not announced (symbols) */
  OFFCPU_STAT_SWITCHES,         /* switch-outs recorded */
  OFFCPU_STAT_MAX
};

#endif
