/* profile: on-CPU stack sampling. A software CPU-clock perf event on every CPU runs
 * do_perf_event at the requested frequency; each sample of a selected thread adds 1
 * to the count of its (thread, user stack, kernel stack), aggregated in the kernel.
 *
 * Injected by the front-end (-D):
 *   TGID_OK(t), TID_OK(t)     process/thread filters (default: 1)
 *   INCLUDE_IDLE              count the idle task (pid 0) too (-I)
 *   CAPTURE_USER, CAPTURE_KERNEL
 *   STACK_STORAGE_SIZE, COUNTS_SIZE
 *   ANNOUNCE, SEEN_SIZE       system-wide with user stacks: each sampled process is
 *                             announced (announce.h) so its mappings are read while it
 *                             runs, and again after its exec
 *   UW_DWARF (+ unwind.h's)  --unwind=dwarf: user stacks unwound from .eh_frame tables
 *                             by uw_profile_tail, a program of its own that
 *                             do_perf_event tail-calls; keyed by their hash
 *
 * Stack ids (bpf_sources/stacks.h): -EFAULT means "no such part" (a kernel thread has
 * no user stack, a sample taken in user mode no kernel stack) and is not a loss; any
 * other error is a missing stack, and -EEXIST or -ENOMEM (stack table bucket taken and
 * the overflow map full) also mean the stack storage is too small (--stack-storage-size).
 */
#include <uapi/linux/bpf_perf_event.h>
#include "filters.h"
#include "profile_shared.h"
#define DQ_NCOUNTERS PROFILE_CNT_MAX
#include "common.h"
#define STACKS_SIZE STACK_STORAGE_SIZE
#define STACKS_DQ_OVERFLOW PROFILE_CNT_STACK_OVERFLOW
#include "stacks.h"
#ifdef UW_DWARF
#include "unwind.h"
#endif
#ifdef ANNOUNCE
#define ANNOUNCE_DQ_FULL PROFILE_CNT_SEEN_FULL
#include "announce.h"
#endif

BPFDIAG_HASH_LAZY(counts, struct profile_key, u64, COUNTS_SIZE);
#if defined(CAPTURE_USER) && defined(UW_DWARF)
BPF_PERCPU_ARRAY(sample_key, struct profile_key, 1); /* do_perf_event -> uw_profile_tail */
#endif

static inline __attribute__((always_inline)) void add_sample(struct profile_key *key) {
  u64 zero = 0;
  u64 *v = counts.lookup_or_try_init(key, &zero);
  if (!v) {
    dq_count(PROFILE_CNT_COUNTS_FULL);
    return;
  }
  __sync_fetch_and_add(v, 1);
}

static inline __attribute__((always_inline)) void count_stack_error(int id, u32 missing_slot) {
  if (id >= 0 || id == -14 /* EFAULT: no such part */)
    return;
  dq_count(missing_slot);
  if (id == -17 /* EEXIST */ || id == -12 /* ENOMEM */)
    dq_count(PROFILE_CNT_STORAGE_FULL);
}

int do_perf_event(struct bpf_perf_event_data *ctx) {
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id, tgid = id >> 32;
  if (tid == 0) {
#ifndef INCLUDE_IDLE
    dq_count(PROFILE_CNT_IDLE);
    return 0;
#endif
  } else if (!(TGID_OK(tgid) && TID_OK(tid))) {
    return 0;
  }
  if (!CGROUP_OK()) /* --cgroup: the sampled (current) task's cgroup, by the kernel */
    return 0;
#ifdef ANNOUNCE
  if (tgid)
    announce(ctx, tgid);
#endif
  struct profile_key key = {};
  key.tgid = tgid;
  key.tid = tid;
  bpf_get_current_comm(&key.comm, sizeof(key.comm));
#if defined(CAPTURE_USER) && defined(UW_DWARF)
  key.user_stack_id = -14; /* "no such part" here: the user part is key.user_hash (uw_profile_tail) */
#elif defined(CAPTURE_USER)
  key.user_stack_id = bpfdiag_stack_id(&ctx->regs, BPF_F_USER_STACK);
  count_stack_error(key.user_stack_id, PROFILE_CNT_USER_MISSING);
#else
  key.user_stack_id = -1;
#endif
#ifdef CAPTURE_KERNEL
  key.kernel_stack_id = bpfdiag_stack_id(&ctx->regs, 0);
  count_stack_error(key.kernel_stack_id, PROFILE_CNT_KERNEL_MISSING);
#else
  key.kernel_stack_id = -1;
#endif
#if defined(CAPTURE_USER) && defined(UW_DWARF)
  u32 k0 = 0;
  struct profile_key *sk = sample_key.lookup(&k0);
  if (sk) {
    *sk = key;
    uw_progs.call(ctx, UW_PROG_UNWIND); /* does not return when it runs */
  }
  dq_count(PROFILE_CNT_USER_MISSING); /* counted without its user stack */
  key.user_hash = UW_HASH_LOST;
#endif
  add_sample(&key);
  return 0;
}

#if defined(CAPTURE_USER) && defined(UW_DWARF)
/* The DWARF unwinder, reached by a tail call from do_perf_event (a program of its own:
 * see unwind.h). The user registers at the top of the kernel stack are the sampled
 * thread's user state (where the sample interrupted user mode, or its last kernel
 * entry). The sample's key comes through sample_key (per CPU, written just before). */
int uw_profile_tail(struct bpf_perf_event_data *ctx) {
  u32 k0 = 0;
  struct profile_key *sk = sample_key.lookup(&k0);
  if (!sk)
    return 0;
  struct profile_key key = *sk;
  /* 0: no user context (kernel thread); UW_HASH_LOST (uw_stacks full) is counted by
   * the unwinder, as lost_stacks */
  key.user_hash = uw_unwind_user(key.tgid);
  add_sample(&key);
  return 0;
}
#endif

#ifdef ANNOUNCE
/* After exec the process's mappings are new: announced again (announce.h) */
RAW_TRACEPOINT_PROBE(sched_process_exec) {
  announce_exec();
  return 0;
}

/* An executable mapping: announced again at its next sample (announce.h) */
TRACEPOINT_PROBE(syscalls, sys_enter_mmap) {
  announce_mmap(args->prot);
  return 0;
}

/* Its group leader exits: the process leaves `seen` (announce.h) */
RAW_TRACEPOINT_PROBE(sched_process_exit) {
  u64 id = bpf_get_current_pid_tgid();
  announce_exit(id >> 32, (u32)id);
  return 0;
}
#endif
