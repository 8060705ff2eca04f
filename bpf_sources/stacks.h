/* Stack capture shared by every stack tool (offcputime, profile, pmheld, lockstat):
 * the stack table, its collision overflow map and bpfdiag_stack_id().
 *
 * Pasted into the program text in place of its `#include "stacks.h"` line by
 * common/bpf_text (libbcc rewrites map calls only in the main file). Define before
 * that line:
 *   STACKS_SIZE          entries of the stack table (the tool's injected size macro)
 *   STACKS_DQ_OVERFLOW   dq_counters slot counted once per stack kept in the overflow map
 *   OVERFLOW_STORAGE_SIZE (optional) entries of the overflow map; default STACKS_SIZE/2
 *                        within [4096, 65536] (preallocated, ~580 bytes each)
 * and include common.h first (dq_count).
 *
 * Why an overflow map: the kernel's stack map keeps one stack per hash bucket and
 * refuses (-EEXIST) a new stack whose bucket holds another one, so with D distinct
 * stacks in N buckets about D*D/2N stacks collide however large N is (and a second
 * stack map would not help: the bucket is jhash(ips, seed 0) & (N-1) in every map). A
 * stack refused by `stack_traces` goes to `overflow_ids`, a hash map keyed by the
 * stack's frames themselves (no collisions), which numbers it; its ids carry
 * BPFDIAG_OVERFLOW_BIT. It is lost only when that map is full.
 *
 * bpfdiag_stack_id(ctx, flags) returns: an id >= 0 (read back by common/stack_reader),
 * -14 (EFAULT: no such stack, e.g. a kernel thread's user stack; not a loss), -12
 * (ENOMEM: both maps full) or another negative errno (the walk failed). The caller
 * counts the negative ids other than -14 as lost, in its own slot.
 *
 * bpfdiag_stack_id_in_lock(ctx, flags): the stack table only, no overflow path (a
 * collided stack is lost, -17), for a probe that runs while the traced thread holds
 * the lock: a rwsem writer's lock:contention_end holds mmap_lock, and the overflow
 * path's bpf_get_stack + frame-keyed hash lengthened those holds enough that lockstat's
 * window read 3.5x perf's rwsem waits and 12x their p90 (test_lockstat, 2 of 4 runs).
 */
#ifndef BPFDIAG_STACKS_H
#define BPFDIAG_STACKS_H
#include "stacks_shared.h"

#ifndef STACKS_SIZE
#error "define STACKS_SIZE before including stacks.h"
#endif
#ifndef STACKS_DQ_OVERFLOW
#error "define STACKS_DQ_OVERFLOW (a dq_counters slot) before including stacks.h"
#endif
#ifndef OVERFLOW_STORAGE_SIZE
#define OVERFLOW_STORAGE_SIZE \
  ((STACKS_SIZE) / 2 < 4096 ? 4096 : (STACKS_SIZE) / 2 > 65536 ? 65536 : (STACKS_SIZE) / 2)
#endif

BPF_STACK_TRACE(stack_traces, STACKS_SIZE);
/* preallocated: a stack's user and kernel parts may both come here in one event, and
 * offcputime --waker takes them in sched_waking, where one hard interrupt can wake
 * many tasks; an allocate-on-insert map fails then (common.h) */
BPFDIAG_HASH(overflow_ids, struct bpfdiag_stack, u32, OVERFLOW_STORAGE_SIZE);
BPF_PERCPU_ARRAY(overflow_scratch, struct bpfdiag_stack, 1);
BPF_PERCPU_ARRAY(overflow_next, u32, 1); /* per-CPU id counter: ids need no atomics */

static inline __attribute__((always_inline)) int bpfdiag_stack_id_in_lock(void *ctx, u64 flags) {
  return stack_traces.get_stackid(ctx, flags);
}

/* Stack id in the stack table, else in the overflow map (flagged), else < 0. */
static inline __attribute__((always_inline)) int bpfdiag_stack_id(void *ctx, u64 flags) {
  int id = stack_traces.get_stackid(ctx, flags);
  if (id != -17 /* EEXIST: bucket taken by another stack */)
    return id;
  int zero = 0;
  struct bpfdiag_stack *buf = overflow_scratch.lookup(&zero);
  u32 *next = overflow_next.lookup(&zero);
  if (!buf || !next)
    return -17;
  __builtin_memset(buf, 0, sizeof(*buf)); /* the whole key: unused frames are 0 */
  if (bpf_get_stack(ctx, buf, sizeof(*buf), flags) <= 0)
    return -17;
  u32 *known = overflow_ids.lookup(buf);
  if (known)
    return *known | BPFDIAG_OVERFLOW_BIT;
  u32 nid = (bpf_get_smp_processor_id() << BPFDIAG_OVERFLOW_CPU_SHIFT) |
            (*next & ((1 << BPFDIAG_OVERFLOW_CPU_SHIFT) - 1));
  int err = overflow_ids.insert(buf, &nid);
  if (err == -17) { /* another CPU stored the same stack just now */
    known = overflow_ids.lookup(buf);
    return known ? (*known | BPFDIAG_OVERFLOW_BIT) : -17;
  }
  if (err)
    return -12; /* full: lost */
  (*next)++;
  dq_count(STACKS_DQ_OVERFLOW);
  return nid | BPFDIAG_OVERFLOW_BIT;
}

#endif
