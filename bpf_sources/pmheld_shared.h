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
/* --contended (futex hand-offs, no uprobes): what is not a timed mutex hold */
#define PMHELD_C_OTHER_WAITS 7     /* FUTEX_WAIT(_BITSET) with a value other than 2: not a mutex wait */
#define PMHELD_C_OTHER_WAKES 8     /* wakes on words never seen as mutex words, or waking more than 1 */
#define PMHELD_C_UNCONTENDED_WAKES 9 /* FUTEX_WAKE on a mutex word nobody waited on during the hold */
#define PMHELD_C_UNTIMED 10        /* contended hold whose start was not seen (waiters queued earlier) */
#define PMHELD_C_PI_OPS 11         /* priority-inheritance futex calls (PI mutexes: not followed) */
#define PMHELD_NCOUNTERS 12

/* --contended: one futex word of a traced process (key: struct pmheld_held_key). */
struct pmheld_word {
  __u64 waiters;       /* threads now inside FUTEX_WAIT(2) on the word */
  __u64 first_wait_ns; /* first FUTEX_WAIT(2) entry since the last wake (0: none) */
  __u64 last_wait_ns;  /* latest FUTEX_WAIT(2) entry since the last wake */
  __u64 last_wake_ns;  /* the last FUTEX_WAKE on the word */
};

/* --contended: a thread inside FUTEX_WAIT(2), until the syscall returns. */
struct pmheld_waiting {
  __u64 lock;
  __u64 ts;
};

/* --contended: a thread that returned from FUTEX_WAIT(2) on `lock` (and so took the
 * mutex, unless it waits again): key of `acquired`, whose value is the return time. */
struct pmheld_acq_key {
  __u32 tid;
  __u32 pad;
  __u64 lock;
};

/* --contended: per process and mutex, the waiters seen at each contended unlock. */
struct pmheld_contv {
  __u64 waiters_max; /* most threads blocked on it at one unlock */
  __u64 waiters_sum; /* summed over its contended holds */
  __u64 exact;       /* holds timed from the holder's own acquisition (it had waited) */
};

/* --contended --unwind=dwarf: a hold ended by a FUTEX_WAKE, until its stack is unwound. */
struct pmheld_release {
  struct pmheld_stat_key sk;
  __u64 delta;
  __u64 waiters;
  __u64 exact;
};

#endif
