/* pmheld: pthread mutex hold times, from the successful return of
 * pthread_mutex_lock/trylock/timedlock/clocklock to pthread_mutex_unlock.
 *
 * pthread_cond_*wait(cond, mutex) releases the mutex while it waits and re-acquires it
 * before returning: its entry ends the current hold (like an unlock) and its return
 * starts a new one, so condition-variable waits never count as holding.
 *
 * Compile-time options (-D):
 *   NO_STACKS          do not record the acquiring user stack (cheaper)
 *   STACK_ENTRIES=N    stack table size
 *   MAX_LOCKS=N        held/stat map size
 *   HIST_ENTRIES=N     histogram map size
 *   UW_DWARF (+ unwind.h's)  --unwind=dwarf: acquiring stacks unwound from .eh_frame
 *                      tables by uw_pmheld_tail, a program of its own that the lock and
 *                      cond-wait return probes tail-call; keyed by their hash
 */
#include <uapi/linux/ptrace.h>
#include "filters.h" /* CGROUP_OK(): --cgroup/--container, tested at each entry probe */
#include "hist.h"
#include "pmheld_shared.h"
#define DQ_NCOUNTERS PMHELD_NCOUNTERS
#include "common.h"
#ifndef NO_STACKS
#define STACKS_SIZE STACK_ENTRIES
#define STACKS_DQ_OVERFLOW PMHELD_C_OVERFLOW_STACKS
#include "stacks.h"
#endif
#ifdef UW_DWARF
#include "unwind.h"
BPF_PERCPU_ARRAY(acquiring, struct pmheld_held_key, 1); /* return probe -> uw_pmheld_tail */
#endif

#ifndef MAX_LOCKS
#define MAX_LOCKS 10240
#endif
#ifndef HIST_ENTRIES
#define HIST_ENTRIES 65536
#endif

BPF_HASH(pending, u32, u64, MAX_LOCKS);                      /* tid -> mutex being locked */
BPF_HASH(held, struct pmheld_held_key, struct pmheld_held, MAX_LOCKS);
BPF_HASH(stats, struct pmheld_stat_key, struct pmheld_stat, MAX_LOCKS);
BPF_HASH(hist, struct pmheld_hist_key, u64, HIST_ENTRIES);

/* A hold starts. Returns 1 when a new hold was stored (not a recursive re-lock). */
static inline int acquired(struct pt_regs *ctx, u64 lock) {
  u64 id = bpf_get_current_pid_tgid();
  struct pmheld_held_key key = {};
  key.tgid = id >> 32;
  key.lock = lock;
  struct pmheld_held *h = held.lookup(&key);
  if (h) {
    if (h->tid == (u32)id && h->depth > 0) {
      h->depth++; /* recursive mutex taken again by its owner */
      return 0;
    }
    dq_count(PMHELD_C_REACQUIRED);
  }
  struct pmheld_held val = {};
  val.acquire_ns = bpf_ktime_get_ns();
  val.tid = (u32)id;
  val.depth = 1;
#if defined(NO_STACKS)
  val.stack_id = -1;
#elif defined(UW_DWARF)
  val.stack_id = -1;
  val.user_hash = UW_HASH_LOST; /* until uw_pmheld_tail has run */
#else
  val.stack_id = bpfdiag_stack_id(ctx, BPF_F_USER_STACK);
  if (val.stack_id < 0 && val.stack_id != -14 /* EFAULT: no user stack */)
    dq_count(PMHELD_C_LOST_STACKS);
#endif
  if (held.update(&key, &val)) {
    dq_count(PMHELD_C_MAP_FULL);
    return 0;
  }
  return 1;
}

/* After a new hold was stored: its acquiring stack (--unwind=dwarf). */
static inline void unwind_acquiring(struct pt_regs *ctx, u64 lock) {
#ifdef UW_DWARF
  u32 zero = 0;
  struct pmheld_held_key *k = acquiring.lookup(&zero);
  if (k) {
    k->tgid = bpf_get_current_pid_tgid() >> 32;
    k->lock = lock;
    uw_progs.call(ctx, UW_PROG_UNWIND); /* does not return when it runs */
  }
  dq_count(PMHELD_C_LOST_STACKS);
#endif
}

#ifdef UW_DWARF
/* The DWARF unwinder, reached by a tail call from a lock or cond-wait return probe (a
 * program of its own: see unwind.h). On return the user registers are the caller's,
 * at the call site. The hold starts after the unwinding: its cost is not holding. */
int uw_pmheld_tail(struct pt_regs *ctx) {
  u32 zero = 0;
  struct pmheld_held_key *k = acquiring.lookup(&zero);
  if (!k)
    return 0;
  struct pmheld_held_key key = *k;
  u64 hash = uw_unwind_user(key.tgid);
  struct pmheld_held *h = held.lookup(&key);
  if (!h) { /* cannot happen (stored just before the tail call): counted if it does */
    dq_count(PMHELD_C_LOST_STACKS);
    return 0;
  }
  h->user_hash = hash;
  if (hash == 0) /* no user registers (a uretprobe always has them): lost */
    dq_count(PMHELD_C_LOST_STACKS);
  h->acquire_ns = bpf_ktime_get_ns();
  return 0;
}
#endif

static inline void released(u64 lock) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  struct pmheld_held_key key = {};
  key.tgid = id >> 32;
  key.lock = lock;
  struct pmheld_held *h = held.lookup(&key);
  if (!h) {
    dq_count(PMHELD_C_UNMATCHED_END);
    return;
  }
  if (h->depth > 1) {
    h->depth--;
    return;
  }
  u64 delta = now - h->acquire_ns;
  struct pmheld_stat_key sk = {};
  sk.tgid = key.tgid;
  sk.stack_id = h->stack_id;
  sk.lock = lock;
  sk.user_hash = h->user_hash;
  held.delete(&key);

  struct pmheld_stat zero = {};
  struct pmheld_stat *s = stats.lookup_or_try_init(&sk, &zero);
  if (s) {
    __sync_fetch_and_add(&s->count, 1);
    __sync_fetch_and_add(&s->total_ns, delta);
    if (delta > s->max_ns)
      s->max_ns = delta; /* racy by design: a concurrent larger max may be overwritten */
  } else {
    dq_count(PMHELD_C_MAP_FULL);
  }
  struct pmheld_hist_key hk = {};
  hk.tgid = key.tgid;
  hk.bucket = hist_fine_index(delta);
  hk.lock = lock;
  u64 one = 0, *c = hist.lookup_or_try_init(&hk, &one);
  if (c)
    __sync_fetch_and_add(c, 1);
  else
    dq_count(PMHELD_C_MAP_FULL);
}

/* The mutex a thread's lock call (or cond wait) is about to take, until it returns. */
static inline void set_pending(u64 lock) {
  u32 tid = (u32)bpf_get_current_pid_tgid();
  if (pending.update(&tid, &lock))
    dq_count(PMHELD_C_MAP_FULL);
}

/* ... taken out at the return; 0 when the call began before tracing started. */
static inline int take_pending(u64 *lock) {
  u32 tid = (u32)bpf_get_current_pid_tgid();
  u64 *lockp = pending.lookup(&tid);
  if (!lockp)
    return 0;
  *lock = *lockp;
  pending.delete(&tid);
  return 1;
}

/* pthread_mutex_lock/trylock/timedlock/clocklock entry: remember the mutex. */
int lock_entry(struct pt_regs *ctx) {
  if (!CGROUP_OK())
    return PASS;
  set_pending(PT_REGS_PARM1(ctx));
  return PASS;
}

/* ... and return: 0 (or EOWNERDEAD for robust mutexes) means acquired. */
int lock_return(struct pt_regs *ctx) {
  u64 lock;
  if (!take_pending(&lock))
    return PASS; /* entered before tracing started */
  int rc = (int)PT_REGS_RC(ctx);
  if (rc == 0 || rc == PMHELD_EOWNERDEAD) {
    if (acquired(ctx, lock))
      unwind_acquiring(ctx, lock);
  } else
    dq_count(PMHELD_C_FAILED_LOCKS);
  return PASS;
}

/* pthread_mutex_unlock(mutex) entry: the hold ends. */
int unlock_entry(struct pt_regs *ctx) {
  if (!CGROUP_OK())
    return PASS;
  released(PT_REGS_PARM1(ctx));
  return PASS;
}

/* pthread_cond_*wait(cond, mutex) entry: the mutex is released while waiting. */
int cond_entry(struct pt_regs *ctx) {
  u64 lock = PT_REGS_PARM2(ctx);
  if (!CGROUP_OK())
    return PASS;
  dq_count(PMHELD_C_COND_WAITS);
  released(lock);
  set_pending(lock);
  return PASS;
}

/* ... and return: the mutex is held again, whatever the result (timeouts included). */
int cond_return(struct pt_regs *ctx) {
  u64 lock;
  if (!take_pending(&lock))
    return PASS;
  if (acquired(ctx, lock))
    unwind_acquiring(ctx, lock);
  return PASS;
}
