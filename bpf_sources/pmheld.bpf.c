/* pmheld: pthread mutex hold times, from the successful return of
 * pthread_mutex_lock/trylock/timedlock/clocklock to pthread_mutex_unlock.
 *
 * pthread_cond_*wait(cond, mutex) releases the mutex while it waits and re-acquires it
 * before returning: its entry ends the current hold (like an unlock) and its return
 * starts a new one, so condition-variable waits never count as holding.
 *
 * --contended (CONTENDED defined): no uprobes. Contended holds are seen from the futex
 * protocol of glibc's mutexes alone (syscalls:sys_enter/exit_futex): a thread that
 * finds the mutex taken sets its word to 2 and blocks in FUTEX_WAIT(_BITSET) with value
 * 2; the holder's unlock swaps 0 in, sees 2 and calls FUTEX_WAKE(word, 1). So per
 * (process, word) a hold is known under way from the first waiter's FUTEX_WAIT entry
 * (or, when the holder itself got the mutex by returning from FUTEX_WAIT, from that
 * return: its whole hold) to the holder's FUTEX_WAKE; the holder is the waking thread
 * and its stack there is the unlock site. Uncontended holds make no syscall and are
 * not seen. Words waited on with another value (condition variables, semaphores,
 * rwlocks, joins) are not mutexes: their waits and wakes are counted, not timed.
 *
 * Compile-time options (-D):
 *   NO_STACKS          do not record the acquiring user stack (cheaper)
 *   STACK_ENTRIES=N    stack table size
 *   MAX_LOCKS=N        held/stat map size
 *   HIST_ENTRIES=N     histogram map size
 *   UW_DWARF (+ unwind.h's)  --unwind=dwarf: acquiring stacks unwound from .eh_frame
 *                      tables by uw_pmheld_tail, a program of its own that the lock and
 *                      cond-wait return probes tail-call; keyed by their hash
 *                      (--contended: uw_pmheld_wake_tail, the unlock's stack, then
 *                      pmheld_wake_record records the hold)
 *   CONTENDED          --contended (above)
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
#ifndef CONTENDED
BPF_PERCPU_ARRAY(acquiring, struct pmheld_held_key, 1); /* return probe -> uw_pmheld_tail */
#endif
#endif

#ifndef MAX_LOCKS
#define MAX_LOCKS 10240
#endif
#ifndef HIST_ENTRIES
#define HIST_ENTRIES 65536
#endif

BPFDIAG_HASH_LAZY(stats, struct pmheld_stat_key, struct pmheld_stat, MAX_LOCKS);
BPFDIAG_HASH_LAZY(hist, struct pmheld_hist_key, u64, HIST_ENTRIES);

/* One ended hold of `delta` ns into the stats and the histogram. */
static inline void add_hold(struct pmheld_stat_key *sk, u64 delta) {
  struct pmheld_stat zero = {};
  struct pmheld_stat *s = stats.lookup_or_try_init(sk, &zero);
  if (s) {
    __sync_fetch_and_add(&s->count, 1);
    __sync_fetch_and_add(&s->total_ns, delta);
    if (delta > s->max_ns)
      s->max_ns = delta; /* racy by design: a concurrent larger max may be overwritten */
  } else {
    dq_count(PMHELD_C_MAP_FULL);
  }
  struct pmheld_hist_key hk = {};
  hk.tgid = sk->tgid;
  hk.bucket = hist_fine_index(delta);
  hk.lock = sk->lock;
  u64 one = 0, *c = hist.lookup_or_try_init(&hk, &one);
  if (c)
    __sync_fetch_and_add(c, 1);
  else
    dq_count(PMHELD_C_MAP_FULL);
}

#ifndef CONTENDED
/* ---- default mode: uprobes on pthread_mutex_* and pthread_cond_*wait --------------- */
BPF_HASH(pending, u32, u64, MAX_LOCKS);                      /* tid -> mutex being locked */
BPF_HASH(held, struct pmheld_held_key, struct pmheld_held, MAX_LOCKS);

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
  add_hold(&sk, delta);
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
#endif /* !CONTENDED */

#ifdef CONTENDED
/* ---- --contended: holds seen from the futex hand-off (no uprobes) ------------------- */
BPF_HASH(contv, struct pmheld_held_key, struct pmheld_contv, MAX_LOCKS);
/* LRU: a word or thread state pushed out by newer ones costs one hold, counted as an
 * other_wake or an untimed hold, never a stale time */
BPF_TABLE("lru_hash", struct pmheld_held_key, struct pmheld_word, words, MAX_LOCKS);
BPF_TABLE("lru_hash", u32, struct pmheld_waiting, waiting, MAX_LOCKS);
BPF_TABLE("lru_hash", struct pmheld_acq_key, u64, acquired, MAX_LOCKS);
/* pmheld's own PID (never traced), set before attach: a map, so the compiled program
 * is the same for every run (common/bpf_object.h's cache) */
BPF_ARRAY(self_pid, u32, 1);
#ifdef UW_DWARF
BPF_PERCPU_ARRAY(releasing, struct pmheld_release, 1); /* wake -> uw_pmheld_wake_tail */
#endif

static inline int traced(u32 pid) {
  u32 zero = 0;
  u32 *self = self_pid.lookup(&zero);
  return !(self && pid == *self) && TGID_OK(pid) && CGROUP_OK();
}

/* A contended hold of `delta` ns ended, with `waiters` threads blocked at the unlock. */
static inline void record_contended(struct pmheld_stat_key *sk, u64 delta, u64 waiters, u64 exact) {
  add_hold(sk, delta);
  struct pmheld_held_key k = {};
  k.tgid = sk->tgid;
  k.lock = sk->lock;
  struct pmheld_contv zero = {};
  struct pmheld_contv *v = contv.lookup_or_try_init(&k, &zero);
  if (!v) {
    dq_count(PMHELD_C_MAP_FULL);
    return;
  }
  __sync_fetch_and_add(&v->waiters_sum, waiters);
  __sync_fetch_and_add(&v->exact, exact);
  if (waiters > v->waiters_max)
    v->waiters_max = waiters;
}

/* FUTEX_WAIT(_BITSET) with value 2 on `uaddr`: a thread blocks on a held mutex. */
static inline int mutex_wait(u32 pid, u32 tid, u64 uaddr) {
  u64 now = bpf_ktime_get_ns();
  struct pmheld_held_key k = {};
  k.tgid = pid;
  k.lock = uaddr;
  struct pmheld_word zero = {};
  struct pmheld_word *w = words.lookup_or_try_init(&k, &zero);
  if (!w) {
    dq_count(PMHELD_C_MAP_FULL);
    return PASS;
  }
  __sync_fetch_and_add(&w->waiters, 1);
  if (!w->first_wait_ns)
    w->first_wait_ns = now;
  w->last_wait_ns = now;
  struct pmheld_waiting wt = {};
  wt.lock = uaddr;
  wt.ts = now;
  waiting.update(&tid, &wt);
  struct pmheld_acq_key ak = {};
  ak.tid = tid;
  ak.lock = uaddr;
  acquired.delete(&ak); /* waiting again: it did not get the mutex */
  return PASS;
}

/* FUTEX_WAKE(uaddr, nr): on a mutex word with nr 1, the holder's unlock found waiters. */
static inline int mutex_wake(void *ctx, u32 pid, u32 tid, u64 uaddr, u32 nr) {
  u64 now = bpf_ktime_get_ns();
  struct pmheld_held_key k = {};
  k.tgid = pid;
  k.lock = uaddr;
  struct pmheld_word *w = words.lookup(&k);
  if (!w || nr != 1) {
    dq_count(PMHELD_C_OTHER_WAKES);
    return PASS;
  }
  struct pmheld_acq_key ak = {};
  ak.tid = tid;
  ak.lock = uaddr;
  u64 acq = 0, *a = acquired.lookup(&ak);
  if (a) {
    acq = *a;
    acquired.delete(&ak);
  }
  if (acq < w->last_wake_ns)
    acq = 0; /* stale: from before the last hand-off */
  u64 waiters = w->waiters, first = w->first_wait_ns, last = w->last_wait_ns;
  w->first_wait_ns = 0;
  w->last_wait_ns = 0;
  w->last_wake_ns = now;
  /* contended: someone blocks now, or blocked after the holder took the mutex (glibc
   * leaves the word at 2 after a contended acquisition, so its next unlock wakes even
   * when nobody waits: that wake is not a contended hold) */
  if (!waiters && !(last && last > acq)) {
    dq_count(PMHELD_C_UNCONTENDED_WAKES);
    return PASS;
  }
  u64 start = acq ? acq : first;
  if (!start || start > now) {
    dq_count(PMHELD_C_UNTIMED);
    return PASS;
  }
  struct pmheld_stat_key sk = {};
  sk.tgid = pid;
  sk.lock = uaddr;
  sk.stack_id = -1;
  u64 delta = now - start, exact = acq ? 1 : 0;
#if defined(UW_DWARF) && !defined(NO_STACKS)
  u32 zero = 0;
  struct pmheld_release *r = releasing.lookup(&zero);
  if (r) {
    r->sk = sk;
    r->delta = delta;
    r->waiters = waiters;
    r->exact = exact;
    uw_progs.call(ctx, UW_PROG_UNWIND); /* does not return when it runs */
  }
  dq_count(PMHELD_C_LOST_STACKS);
  sk.user_hash = UW_HASH_LOST;
#elif !defined(NO_STACKS)
  sk.stack_id = bpfdiag_stack_id(ctx, BPF_F_USER_STACK);
  if (sk.stack_id < 0 && sk.stack_id != -14 /* EFAULT: no user stack */)
    dq_count(PMHELD_C_LOST_STACKS);
#endif
  record_contended(&sk, delta, waiters, exact);
  return PASS;
}

#if defined(UW_DWARF) && !defined(NO_STACKS)
/* The DWARF unwinder for the unlock's stack, reached by a tail call from the FUTEX_WAKE
 * handler (a program of its own: see unwind.h); the hold was timed before. */
int uw_pmheld_wake_tail(void *ctx) {
  u32 zero = 0;
  struct pmheld_release *r = releasing.lookup(&zero);
  if (!r)
    return 0;
  u64 h = uw_unwind_user(r->sk.tgid);
  r = releasing.lookup(&zero);
  if (!r)
    return 0;
  r->sk.user_hash = h;
  if (h == 0) /* no user registers (a syscall always has them): lost */
    dq_count(PMHELD_C_LOST_STACKS);
  uw_progs.call(ctx, UW_PROG_AFTER);
  dq_count(PMHELD_C_LOST_STACKS); /* cannot happen (installed before attaching) */
  return 0;
}

/* ... and records the hold with its stack (tail-called by the unwinder). */
int pmheld_wake_record(void *ctx) {
  u32 zero = 0;
  struct pmheld_release *r = releasing.lookup(&zero);
  if (!r)
    return 0;
  struct pmheld_stat_key sk = r->sk;
  record_contended(&sk, r->delta, r->waiters, r->exact);
  return 0;
}
#endif

TRACEPOINT_PROBE(syscalls, sys_enter_futex) {
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
  if (!traced(pid))
    return PASS;
  u64 uaddr = (u64)args->uaddr;
  switch (args->op & 127) { /* FUTEX_CMD_MASK: private and clock flags off */
  case 0:                    /* FUTEX_WAIT */
  case 9:                    /* FUTEX_WAIT_BITSET (pthread_mutex_timedlock) */
    if (args->val == 2)
      return mutex_wait(pid, tid, uaddr);
    dq_count(PMHELD_C_OTHER_WAITS);
    return PASS;
  case 1: /* FUTEX_WAKE */
    return mutex_wake(args, pid, tid, uaddr, args->val);
  case 4:  /* FUTEX_CMP_REQUEUE */
  case 5:  /* FUTEX_WAKE_OP */
  case 10: /* FUTEX_WAKE_BITSET */
    dq_count(PMHELD_C_OTHER_WAKES);
    return PASS;
  case 6:  /* FUTEX_LOCK_PI */
  case 7:  /* FUTEX_UNLOCK_PI */
  case 8:  /* FUTEX_TRYLOCK_PI */
  case 13: /* FUTEX_LOCK_PI2 */
    dq_count(PMHELD_C_PI_OPS);
    return PASS;
  }
  return PASS;
}

/* The end of a FUTEX_WAIT(2): 0 (woken), EAGAIN (the word changed) or EINTR: the
 * thread now retries the mutex and holds it unless it waits again. */
TRACEPOINT_PROBE(syscalls, sys_exit_futex) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id;
  struct pmheld_waiting *wt = waiting.lookup(&tid);
  if (!wt)
    return PASS;
  struct pmheld_held_key k = {};
  k.tgid = id >> 32;
  k.lock = wt->lock;
  waiting.delete(&tid);
  struct pmheld_word *w = words.lookup(&k);
  if (w && w->waiters)
    __sync_fetch_and_add(&w->waiters, -1);
  long ret = args->ret;
  if (ret == 0 || ret == -11 /* EAGAIN */ || ret == -4 /* EINTR */) {
    struct pmheld_acq_key ak = {};
    ak.tid = tid;
    ak.lock = k.lock;
    acquired.update(&ak, &now);
  }
  return PASS;
}
#endif /* CONTENDED */
