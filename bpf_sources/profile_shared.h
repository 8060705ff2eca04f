/* Shared between profile.bpf.c and the profile front-end. */
#ifndef BPFDIAG_PROFILE_SHARED_H
#define BPFDIAG_PROFILE_SHARED_H

#define PROFILE_COMM_LEN 16

/* Aggregation key: one entry per thread and (user, kernel) stack pair; the value is
 * the number of samples (__u64). */
struct profile_key {
  __u32 tgid;
  __u32 tid;
  __s32 user_stack_id;   /* < 0: not captured (-EFAULT: no user stack) or lost */
  __s32 kernel_stack_id; /* -EFAULT: the sample hit user mode (no kernel stack) */
  char comm[PROFILE_COMM_LEN];
  __u64 user_hash; /* --unwind=dwarf: the user stack in uw_stacks (unwind.h); user_stack_id
                    * is then -1. 0: no user context (a kernel thread) */
};

/* Slots of the data-quality counters (bpf_sources/common.h `dq_counters`), mapped
 * to data_quality keys by the table in tools/profile/run.cpp. */
enum profile_counter {
  PROFILE_CNT_COUNTS_FULL = 0,       /* lost_samples / map_full: counts map full */
  PROFILE_CNT_USER_MISSING,      /* user_stack_missing: user stack wanted, not stored */
  PROFILE_CNT_KERNEL_MISSING,    /* kernel_stack_missing: kernel stack wanted, not stored */
  PROFILE_CNT_STORAGE_FULL,      /* stack_storage_full: -EEXIST/-ENOMEM from the stack map */
  PROFILE_CNT_IDLE,              /* idle_samples: the idle task (pid 0), left out without -I */
  PROFILE_CNT_STACK_OVERFLOW,    /* overflow_stacks: stacks kept in the overflow map (stacks.h) */
  PROFILE_CNT_SEEN_FULL,         /* seen_full: a new process not announced (announce.h) */
  PROFILE_CNT_MAX
};

#endif
