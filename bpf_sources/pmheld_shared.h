/* Shared between pmheld.bpf.c and the pmheld front-end. Plain C. */
#ifndef BPFDIAG_PMHELD_SHARED_H
#define BPFDIAG_PMHELD_SHARED_H

#define PMHELD_EOWNERDEAD 130 /* robust mutex acquired from a dead owner: still held */

/* A mutex currently held, keyed by process and mutex address. */
struct pmheld_held_key {
  __u32 tgid;
  __u32 pad;
  __u64 lock;
};

struct pmheld_held {
  __u64 acquire_ns; /* bpf_ktime_get_ns() when the lock/trylock/timedlock returned */
  __u32 tid;        /* acquiring thread */
  __s32 stack_id;   /* acquiring user stack, or < 0 */
  __u32 depth;      /* recursive mutexes: nested acquisitions by the owner */
  __u32 pad;
  __u64 user_hash;  /* --unwind=dwarf: acquiring user stack in uw_stacks (unwind.h) */
};

/* Hold statistics per process, mutex and acquiring stack. */
struct pmheld_stat_key {
  __u32 tgid;
  __s32 stack_id;
  __u64 lock;
  __u64 user_hash; /* --unwind=dwarf (stack_id is then -1); 0 otherwise */
};

struct pmheld_stat {
  __u64 count;
  __u64 total_ns;
  __u64 max_ns;
};

/* One fine histogram bucket (hist.h) of one mutex's hold times. */
struct pmheld_hist_key {
  __u32 tgid;
  __u32 bucket;
  __u64 lock;
};

/* Slots of `dq_counters` (bpf_sources/common.h): data-quality and event counters. */
#define PMHELD_C_UNMATCHED_END 0  /* unlock of a mutex not seen acquired */
#define PMHELD_C_LOST_STACKS 1    /* no stack id (stack table and overflow map) */
#define PMHELD_C_MAP_FULL 2       /* an update was dropped: map full */
#define PMHELD_C_REACQUIRED 3     /* acquired again without an unlock seen (stale hold dropped) */
#define PMHELD_C_COND_WAITS 4     /* pthread_cond_*wait calls (holds ended/restarted) */
#define PMHELD_C_FAILED_LOCKS 5   /* trylock/timedlock/lock returned an error */
#define PMHELD_C_OVERFLOW_STACKS 6 /* stacks kept in the overflow map (stacks.h) */
#define PMHELD_NCOUNTERS 7

#endif
