/* offcputime: off-CPU time by thread and by (user, kernel) stack, from the
 * sched_switch raw tracepoint (no kprobes, no fentry).
 *
 * args: [0] bool preempt, [1] struct task_struct *prev, [2] struct task_struct *next.
 * At sched_switch the current task is still prev, so bpf_get_stackid() captures the
 * stacks prev blocked in; they are kept in `start` until prev is switched in again,
 * where the off-CPU time is added to `counts` (aggregated in the kernel).
 *
 * Injected by the front-end (-D):
 *   OFF_TASK_PID, OFF_TASK_TGID, OFF_TASK_FLAGS, OFF_TASK_STATE  (BTF offsets)
 *   TGID_OK(t), TID_OK(t)     process/thread filters (default: 1)
 *   BPFDIAG_CGROUP            --cgroup/--container: CGROUP_OK(), CGROUP_TASK_OK(t) (filters.h)
 *   USER_THREADS_ONLY / KERNEL_THREADS_ONLY
 *   STATE_EQ=v (state == v) or STATE_MASK=m (state & m): task state filter; a
 *                             preempted task counts as state 0 (TASK_RUNNING)
 *   MIN_NS, MAX_NS            block time bounds
 *   CAPTURE_USER, CAPTURE_KERNEL
 *   STACK_STORAGE_SIZE, OVERFLOW_STORAGE_SIZE, START_SIZE, COUNTS_SIZE, SEEN_SIZE
 *   OFF_TASK_SCHED_INFO ... (arrival.h's) when the kernel has them
 *   UW_DWARF (+ unwind.h's)  --unwind=dwarf: user stacks unwound from .eh_frame tables
 *                             (bpf_sources/unwind.h) by uw_offcpu_tail, a program of
 *                             its own that sched_switch tail-calls; keyed by their hash
 *   DECL_BEGINS               how many declared_begin_N programs (declared.h; default all)
 *   DECLARED_WAITS            declared waits (USDT begin/done pairs) were found and are
 *                             attached: a switch-out looks its thread up in decl_now
 *   WAKER, OFF_TASK_STACK, THREAD_SIZE
 *                             --waker: sched_waking records who woke each thread (its
 *                             comm and stacks) and the switch-in adds it to the
 *                             period's key (struct offcpu_wkey)
 *
 * Stack tables: bpf_sources/stacks.h (the stack table and its collision overflow map).
 */
#include "filters.h"
#include "offcputime_shared.h"
#define DQ_NCOUNTERS OFFCPU_CNT_MAX
#include "common.h"
#define STACKS_SIZE STACK_STORAGE_SIZE
#define STACKS_DQ_OVERFLOW OFFCPU_CNT_STACK_OVERFLOW
#include "stacks.h"
#include "arrival.h"
#ifdef UW_DWARF
#include "unwind.h"
#endif

#define PF_KTHREAD 0x00200000
#define TASK_DEAD 0x00000080

BPFDIAG_HASH_LAZY(start, u32, struct offcpu_start, START_SIZE);
#if defined(BPFDIAG_ID_MAP_TGID_OK) || defined(BPFDIAG_ID_MAP_TID_OK)
/* With -p/-t lists each filter test is a hash lookup, and telling whom a task is needs
 * a helper call (bpf_get_current_pid_tgid for prev, a bpf_probe_read_kernel for next).
 * Each task's verdict (the -p/-t filters and -u/-k) is kept here instead, keyed by the
 * task_struct's address, which the raw tracepoint hands over as is: a switch where
 * neither prev nor next is traced, by far the most common one with -p, costs two array
 * reads (inlined by the verifier) and no helper call. An entry is the task's address
 * with its verdict in bit 0 (task_structs are cache-line aligned): one 8-byte word,
 * written and read whole, so CPUs need no lock to share it; a slot another task took
 * is a miss, and the filters are asked again. The verdict of a task never changes while
 * it lives (its tgid is fixed; an exec that changes its tid clears it,
 * sched_process_exec); its address is reused only after it is freed, which clears its
 * entry (sched_process_free, an RCU grace period after its last switch). */
#define VERDICT_CACHE 1
#define VERDICT_SLOTS_LOG2 11
BPF_ARRAY(task_verdict, u64, 1 << VERDICT_SLOTS_LOG2);
#endif
#ifdef WAKER
#define COUNTS_KEY struct offcpu_wkey
/* Per wakee, its latest wakeup (sched_waking), taken by its next switch-in. */
BPFDIAG_HASH(wakers, u32, struct offcpu_waker, START_SIZE);
#else
#define COUNTS_KEY struct offcpu_key
#endif
/* a ceiling (allocated as used): MariaDB under sysbench filled 32,768 keys in 25 s */
BPFDIAG_HASH_LAZY(counts, COUNTS_KEY, struct offcpu_val, COUNTS_SIZE);
#define ANNOUNCE_DQ_FULL OFFCPU_CNT_SEEN_FULL
/* seen, new_procs: processes the front-end reads while they run (pasted) */
#include "announce.h"

static inline __attribute__((always_inline)) int thread_kind_ok(void *task) {
#if defined(USER_THREADS_ONLY) || defined(KERNEL_THREADS_ONLY)
  unsigned int flags = 0;
  bpf_probe_read_kernel(&flags, sizeof(flags), task + OFF_TASK_FLAGS);
#ifdef USER_THREADS_ONLY
  return !(flags & PF_KTHREAD);
#else
  return (flags & PF_KTHREAD) != 0;
#endif
#else
  return 1;
#endif
}

#ifdef VERDICT_CACHE
static inline __attribute__((always_inline)) u64 *verdict_entry(void *task) {
  u32 i = ((u64)task * 0x9E3779B97F4A7C15ULL) >> (64 - VERDICT_SLOTS_LOG2);
  return task_verdict.lookup(&i);
}
/* 1: traced, 0: not, -1: not known here */
static inline __attribute__((always_inline)) int verdict_of(u64 *e, void *task) {
  if (!e)
    return -1;
  u64 v = *e;
  return (v & ~1ULL) == (u64)task ? (int)(v & 1) : -1;
}
static inline __attribute__((always_inline)) void verdict_put(u64 *e, void *task, int ok) {
  if (e)
    *e = (u64)task | (ok ? 1 : 0);
}
/* `task` is gone (or is no longer whom its entry says): forget its verdict */
static inline __attribute__((always_inline)) void verdict_forget(void *task) {
  u64 *e = verdict_entry(task);
  if (e && (*e & ~1ULL) == (u64)task)
    *e = 0;
}
#endif

/* One off-CPU period of thread `tid`, switched out as `s` says, `delta` ns long;
 * --waker: `w` is its wakeup (NULL: none recorded). */
static inline __attribute__((always_inline)) void add_period(u32 tid, struct offcpu_start *s, u64 delta,
                                                             void *w) {
  if (delta < MIN_NS || delta > MAX_NS)
    return;
  COUNTS_KEY key = {};
#ifdef WAKER
  struct offcpu_key *k = &key.k;
  if (s->runnable) /* preempted or yielded: a wakeup seen meanwhile did not end this period */
    key.w.kind = OFFCPU_WAKER_PREEMPTED;
  else if (w)
    __builtin_memcpy(&key.w, w, sizeof(key.w));
  else
    dq_count(OFFCPU_CNT_WAKER_UNSEEN); /* kind OFFCPU_WAKER_UNSEEN */
#else
  struct offcpu_key *k = &key;
#endif
  k->tgid = s->tgid;
  k->tid = tid;
  k->user_stack_id = s->user_stack_id;
  k->kernel_stack_id = s->kernel_stack_id;
  k->user_hash = s->user_hash;
  k->declared = s->declared;
  k->runnable = s->runnable;
  __builtin_memcpy(&k->comm, &s->comm, sizeof(k->comm));
  struct offcpu_val zero = {};
  struct offcpu_val *v = counts.lookup_or_try_init(&key, &zero);
  if (!v) {
    dq_count(OFFCPU_CNT_COUNTS_FULL);
    return;
  }
  __sync_fetch_and_add(&v->total_ns, delta);
  __sync_fetch_and_add(&v->count, 1);
  if (delta > v->max_ns)
    v->max_ns = delta; /* racy max: two CPUs rarely update one thread's key at once */
}

/* ---- waits the software declares (USDT begin/done pairs, declared.h) ----------------
 * Per thread, the innermost declared wait in flight (and the one it is nested in): the
 * switch-out takes its identity into the period's key, so the off-CPU time carries the
 * software's own name for what it waits on. A begin no deeper in the stack than the wait
 * in flight means that wait was left without its end (a longjmp out of it). */
#include "declared.h"
#include "jvm.h"
struct decl_state {
  u64 raw, sp;             /* innermost */
  u64 outer_raw, outer_sp; /* the wait it is nested in (0: none) */
  u32 depth;               /* nested deeper still: counted, not tracked */
  u32 pad;
};
BPFDIAG_HASH_LAZY(decl_now, u32, struct decl_state, START_SIZE);

static inline int on_declared_begin(struct pt_regs *ctx, u32 slot) {
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id, tgid = id >> 32;
  if (!TGID_OK(tgid) || !TID_OK(tid) || !CGROUP_OK())
    return 0;
  u64 sp = PT_REGS_SP(ctx);
  u64 raw = declared_raw(ctx, slot, tgid, OFFCPU_CNT_COUNTS_FULL);
  if (!raw)
    return 0;
  struct decl_state *d = decl_now.lookup(&tid);
  if (d && sp >= d->sp) { /* the wait in flight was left: back to its outer one, or none */
    dq_count(OFFCPU_CNT_DECL_STALE);
    if (d->outer_raw && sp < d->outer_sp) {
      d->raw = d->outer_raw, d->sp = d->outer_sp;
      d->outer_raw = 0, d->depth = 0;
    } else {
      decl_now.delete(&tid);
      d = NULL;
    }
  }
  if (d) {
    if (!d->outer_raw && !d->depth) {
      d->outer_raw = d->raw, d->outer_sp = d->sp;
      d->raw = raw, d->sp = sp;
    } else {
      d->depth++;
    }
    return 0;
  }
  struct decl_state n = {};
  n.raw = raw;
  n.sp = sp;
  if (decl_now.update(&tid, &n))
    dq_count(OFFCPU_CNT_START_FULL);
  return 0;
}

int declared_done(struct pt_regs *ctx) {
  u32 tid = (u32)bpf_get_current_pid_tgid();
  struct decl_state *d = decl_now.lookup(&tid);
  if (!d)
    return 0;
  if (d->depth) {
    d->depth--;
  } else if (d->outer_raw) {
    d->raw = d->outer_raw, d->sp = d->outer_sp;
    d->outer_raw = 0;
  } else {
    decl_now.delete(&tid);
  }
  return 0;
}
DECLARED_PROGRAMS()

#ifdef WAKER
/* Thread tid's recorded wakeup, moved to *w (1) or none (0). Taken at every switch-in
 * of a traced thread, so a record never outlives the period it ended. */
static inline __attribute__((always_inline)) int waker_take(u32 tid, struct offcpu_waker *w) {
  struct offcpu_waker *wp = wakers.lookup(&tid);
  if (!wp)
    return 0;
  __builtin_memcpy(w, wp, sizeof(*w));
  wakers.delete(&tid);
  return 1;
}
#endif

/* Switch-in: next gets the CPU; its off-CPU period (if tracked) is counted. The
 * filters first: a thread they leave out has no `start` entry to look up. `known`:
 * next's verdict from task_verdict (-1: not known; `ve` its entry, or 0). */
static inline __attribute__((always_inline)) int switch_in(void *next, u64 *now, int known, u64 *ve) {
  if (known == 0)
    return 0;
  u32 ntid = 0, ntgid = 0;
#if OFF_TASK_TGID == OFF_TASK_PID + 4 /* task_struct's pid and tgid side by side: one read */
  u64 ids = 0;
  bpf_probe_read_kernel(&ids, sizeof(ids), next + OFF_TASK_PID);
  ntid = (u32)ids;
  ntgid = ids >> 32;
#else
  bpf_probe_read_kernel(&ntid, sizeof(ntid), next + OFF_TASK_PID);
  bpf_probe_read_kernel(&ntgid, sizeof(ntgid), next + OFF_TASK_TGID);
#endif
  if (known < 0) {
#ifdef VERDICT_CACHE
    known = ntid != 0 && TGID_OK(ntgid) && TID_OK(ntid) && thread_kind_ok(next);
    verdict_put(ve, next, known);
#else
    known = ntid != 0 && TGID_OK(ntgid) && TID_OK(ntid);
#endif
    if (!known)
      return 0;
  }
  struct offcpu_start *sp = start.lookup(&ntid);
  if (!sp) {
    /* Count only threads we would have tracked: off-CPU since before tracing
     * started, or whose switch-out was dropped. (--cgroup: next is not current, so its
     * cgroup is found by walking up from its own; only here, for threads with no
     * period open, which every tracked thread has.) */
    if (thread_kind_ok(next) && CGROUP_TASK_OK(next))
      dq_count(OFFCPU_CNT_UNMATCHED_IN);
#ifdef WAKER
    wakers.delete(&ntid); /* a wakeup of a period we did not see begin */
#endif
    return 0;
  }
  struct offcpu_start s = *sp;
  if (s.skip == OFFCPU_START_CLOSED) { /* its switch-out was not seen (as no entry, above) */
    if (CGROUP_TASK_OK(next))
      dq_count(OFFCPU_CNT_UNMATCHED_IN);
#ifdef WAKER
    wakers.delete(&ntid);
#endif
    return 0;
  }
  /* closed, and kept: the thread's next switch-out rewrites it in place (a delete here
   * and an insert there were two bucket-locked hash updates per switch) */
  sp->skip = OFFCPU_START_CLOSED;
  void *wp = 0;
#ifdef WAKER
  struct offcpu_waker w;
  if (waker_take(ntid, &w))
    wp = &w;
#endif
  if (s.skip)
    return 0;
  *now = bpf_ktime_get_ns();
  if (*now < s.ts) {
    dq_count(OFFCPU_CNT_PERIOD_DROPPED);
    return 0;
  }
  add_period(ntid, &s, *now - s.ts, wp);
  return 0;
}

/* Thread `tid` (prev) is switching out. A period of its still open here means its
 * switch-in never reached this program: the task that switched to it ran where no BPF
 * program runs (arrival.h). The scheduler recorded when it arrived: if that was its
 * only arrival since the period began, the period ends there; otherwise it is lost, and
 * counted. Returns the thread's arrivals so far (0: unknown). */
static inline __attribute__((always_inline)) u64 close_unseen(void *prev, u32 tid, u64 now,
                                                              struct offcpu_start **entry) {
  struct offcpu_start *open = start.lookup(&tid);
  *entry = open;
#ifdef ARRIVAL_KNOWN
  struct arrival a = task_arrival(prev, now);
  if (open && !open->skip) {
    struct offcpu_start o = *open;
    if (a.ns && a.count == o.arrivals + 1 && a.ns >= o.ts) {
      void *wp = 0;
#ifdef WAKER
      struct offcpu_waker w;
      if (waker_take(tid, &w))
        wp = &w;
#endif
      add_period(tid, &o, a.ns - o.ts, wp);
      dq_count(OFFCPU_CNT_PERIOD_RECOVERED);
    } else {
      dq_count(OFFCPU_CNT_PERIOD_DROPPED);
    }
  }
  return a.count;
#else
  if (open && !open->skip)
    dq_count(OFFCPU_CNT_PERIOD_DROPPED);
  return 0;
#endif
}

RAW_TRACEPOINT_PROBE(sched_switch) {
  void *prev = (void *)ctx->args[1];
  void *next = (void *)ctx->args[2];
  /* whether prev and next pass the filters (-1: to be asked) */
  int prev_v = -1, next_v = -1;
  u64 *next_e = 0;
#ifdef VERDICT_CACHE
  u64 *prev_e = verdict_entry(prev);
  next_e = verdict_entry(next);
  prev_v = verdict_of(prev_e, prev);
  next_v = verdict_of(next_e, next);
  if (prev_v == 0 && next_v == 0)
    return 0; /* neither is traced: the common case of -p/-t, done here */
#endif
  u32 tid = 0, tgid = 0;
  if (prev_v != 0) {
    u64 id = bpf_get_current_pid_tgid(); /* prev */
    tid = (u32)id, tgid = id >> 32;
    if (prev_v < 0) {
      prev_v = tid != 0 && TGID_OK(tgid) && TID_OK(tid) && thread_kind_ok(prev);
#ifdef VERDICT_CACHE
      verdict_put(prev_e, prev, prev_v);
#endif
    }
  }
  /* --cgroup: prev is current, so the kernel's own test (CGROUP_OK) decides it (a task
   * can move between cgroups: not cached); a thread outside the cgroup never opens a
   * period, so its switch-in finds none */
  int prev_ok = prev_v && CGROUP_OK();
  u64 now = 0; /* read once, when a tracked thread needs it */
  /* next first: the switch-out part may end in a tail call (--unwind=dwarf) */
  switch_in(next, &now, next_v, next_e);

  /* ---- switch-out: prev leaves the CPU ---- */
  if (prev_ok) {
    if (!now)
      now = bpf_ktime_get_ns();
    struct offcpu_start s = {};
    s.ts = now;
    s.tgid = tgid;
    unsigned int state = 0;
    bpf_probe_read_kernel(&state, sizeof(state), prev + OFF_TASK_STATE);
    if (state & TASK_DEAD) { /* exiting: it will never be switched in again */
      struct offcpu_start *last = 0;
      close_unseen(prev, tid, now, &last); /* its last period, if that switch-in went unseen */
      start.delete(&tid);
      return 0;
    }
    if (ctx->args[0]) /* preempted: still runnable, whatever __state says */
      state = 0;
    s.runnable = state == 0;
#if defined(STATE_EQ)
    s.skip = state != STATE_EQ;
#elif defined(STATE_MASK)
    s.skip = (state & STATE_MASK) == 0;
#endif
    if (!s.skip) {
#if defined(CAPTURE_USER) && defined(UW_DWARF)
      s.user_stack_id = -14; /* the user part is s.user_hash, set by uw_offcpu_tail */
      s.user_hash = UW_HASH_LOST; /* until the unwinder has run */
#elif defined(CAPTURE_USER)
      s.user_stack_id = bpfdiag_stack_id(ctx, BPF_F_USER_STACK);
      if (s.user_stack_id < 0 && s.user_stack_id != -14 /* EFAULT: no user stack */)
        dq_count(OFFCPU_CNT_STACK_LOST);
#else
      s.user_stack_id = -1;
#endif
#ifdef CAPTURE_KERNEL
      s.kernel_stack_id = bpfdiag_stack_id(ctx, 0);
      if (s.kernel_stack_id < 0 && s.kernel_stack_id != -14)
        dq_count(OFFCPU_CNT_STACK_LOST);
#else
      s.kernel_stack_id = -1;
#endif
      bpf_get_current_comm(&s.comm, sizeof(s.comm));
#ifdef DECLARED_WAITS /* the front-end found declared waits to attach (else decl_now stays empty) */
      struct decl_state *d = decl_now.lookup(&tid);
      s.declared = d ? d->raw : 0;
#endif
      if (!s.declared && !s.runnable) /* a Java thread: what the JVM says it waits for */
        s.declared = jvm_declared_raw(tgid, tid);
      announce(ctx, tgid);
    }
    struct offcpu_start *open = 0;
    s.arrivals = close_unseen(prev, tid, now, &open);
    if (open) {
      *open = s; /* the thread's own entry: only its own switches write it */
    } else if (start.update(&tid, &s) != 0) {
      dq_count(OFFCPU_CNT_START_FULL);
      return 0;
    }
#if defined(CAPTURE_USER) && defined(UW_DWARF)
    if (!s.skip) {
      uw_progs.call(ctx, UW_PROG_UNWIND); /* does not return when it runs */
      dq_count(OFFCPU_CNT_STACK_LOST);
    }
#endif
  }
  return 0;
}

#ifdef WAKER
/* ---- --waker: who wakes a traced thread ------------------------------------------------
 * sched_waking runs in try_to_wake_up's caller, on its CPU (sched_wakeup may run later,
 * on the wakee's CPU, in whatever task is current there): current is the waker, unless
 * the wakeup comes from an interrupt or softirq (a timer, a device), which merely
 * interrupted current. Which one it was is read from the waker's kernel stack by the
 * front-end (an interrupt's entry frames: tools/offcputime/model.cpp), so that stack is
 * always captured, -U or not: here no context test is reliable (an interrupt from user
 * mode runs on the task's own stack, and the verifier may give this program a private
 * stack). The record is per wakee; a later wakeup before its switch-in replaces it (the
 * kernel traces sched_waking only when the wakee's state matches, so a second one is
 * rare: the latest one wins). */
#if defined(CAPTURE_USER) && defined(UW_DWARF)
BPF_PERCPU_ARRAY(waker_pending, u32, 1); /* the wakee whose waker uw_offcpu_tail unwinds */
#endif

#ifdef CAPTURE_USER
/* Current entered the kernel from user mode by an interrupt (the user registers saved at
 * the top of its kernel stack: a user cs and orig_ax < 0, which no syscall or fault
 * leaves): this wakeup is that interrupt's, and current's user stack is not worth
 * walking. An interrupt that hit current in the kernel (in a syscall) is not seen
 * here: the front-end tells it by its frames and drops the user stack then. */
static inline __attribute__((always_inline)) int waker_user_interrupted(void) {
  void *stack = 0;
  bpf_probe_read_kernel(&stack, sizeof(stack), (void *)bpf_get_current_task() + OFF_TASK_STACK);
  if (!stack)
    return 0;
  u64 r[3] = {}; /* struct pt_regs (x86-64, 21 words) at THREAD_SIZE: orig_ax, ip, cs */
  if (bpf_probe_read_kernel(r, sizeof(r), stack + THREAD_SIZE - 21 * 8 + 15 * 8))
    return 0;
  return r[2] == 0x33 && (s64)r[0] < 0;
}
#endif

RAW_TRACEPOINT_PROBE(sched_waking) {
  void *p = (void *)ctx->args[0]; /* TP_PROTO(struct task_struct *p) */
  int known = -1;
#ifdef VERDICT_CACHE
  u64 *ve = verdict_entry(p);
  known = verdict_of(ve, p);
  if (known == 0)
    return 0;
#endif
  u32 wtid = 0, wtgid = 0;
  bpf_probe_read_kernel(&wtid, sizeof(wtid), p + OFF_TASK_PID);
  bpf_probe_read_kernel(&wtgid, sizeof(wtgid), p + OFF_TASK_TGID);
  /* the filters select the wakee; the waker may be anyone */
  if (known < 0) {
    known = wtid != 0 && TGID_OK(wtgid) && TID_OK(wtid) && thread_kind_ok(p);
#ifdef VERDICT_CACHE
    verdict_put(ve, p, known);
#endif
    if (!known)
      return 0;
  }
  struct offcpu_waker w = {};
  int unwind = 0;
  u64 id = bpf_get_current_pid_tgid();
  w.kind = OFFCPU_WAKER_TASK; /* the front-end makes it OFFCPU_WAKER_IRQ by its kernel frames */
  w.tgid = id >> 32;
  w.tid = (u32)id;
  bpf_get_current_comm(&w.comm, sizeof(w.comm));
#ifdef CAPTURE_USER
  /* an interrupt's wakeup (from user mode, or in the idle task, pid 0, whose user
   * stack the kernel refuses with -1 rather than -14): no user stack */
  if (w.tid == 0 || waker_user_interrupted()) {
    w.user_stack_id = -14;
    unwind = -1;
  }
#ifdef UW_DWARF
  if (!unwind && uw_procs.lookup(&w.tgid)) { /* a traced process: its tables are loaded */
    w.user_stack_id = -14;         /* the user part is w.user_hash (uw_offcpu_tail) */
    w.user_hash = UW_HASH_LOST;    /* until the unwinder has run */
    unwind = 1;
  }
#endif
  if (!unwind) { /* frame pointers (a process without tables, or --unwind fp) */
    w.user_stack_id = bpfdiag_stack_id(ctx, BPF_F_USER_STACK);
    if (w.user_stack_id < 0 && w.user_stack_id != -14)
      dq_count(OFFCPU_CNT_STACK_LOST);
  }
  if (unwind > 0 || w.user_stack_id >= 0)
    announce(ctx, w.tgid); /* its user frames are named from its mappings */
#else
  w.user_stack_id = -1;
#endif
  w.kernel_stack_id = bpfdiag_stack_id(ctx, 0); /* with -U too: it tells an interrupt */
  if (w.kernel_stack_id < 0 && w.kernel_stack_id != -14)
    dq_count(OFFCPU_CNT_STACK_LOST);
  if (wakers.update(&wtid, &w)) {
    dq_count(OFFCPU_CNT_WAKER_FULL);
    return 0;
  }
#if defined(CAPTURE_USER) && defined(UW_DWARF)
  if (unwind > 0) {
    u32 zero = 0;
    u32 *pending = waker_pending.lookup(&zero);
    if (pending) {
      *pending = wtid;
      uw_progs.call(ctx, UW_PROG_UNWIND); /* does not return when it runs */
      *pending = 0;
    }
    dq_count(OFFCPU_CNT_STACK_LOST);
  }
#endif
  (void)unwind;
  return 0;
}
#endif

#if defined(CAPTURE_USER) && defined(UW_DWARF)
/* The DWARF unwinder, a program of its own reached by a tail call from sched_switch
 * (verified separately: inlined into the handler it exceeded the verifier's
 * 1M-instruction limit). Current is still prev; its `start` entry was just written. */
int uw_offcpu_tail(struct bpf_raw_tracepoint_args *ctx) {
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id, tgid = id >> 32;
  u64 h = uw_unwind_user(tgid);
#ifdef WAKER
  /* called by sched_waking: current is the waker, the stack goes to the wakee's record */
  u32 zero = 0;
  u32 *pending = waker_pending.lookup(&zero);
  if (pending && *pending) {
    u32 wakee = *pending;
    *pending = 0;
    struct offcpu_waker *w = wakers.lookup(&wakee);
    if (!w || h == 0) { /* taken meanwhile (the wakee ran already), or no user registers */
      dq_count(OFFCPU_CNT_STACK_LOST);
      return 0;
    }
    w->user_hash = h;
    return 0;
  }
#endif
  struct offcpu_start *sp = start.lookup(&tid);
  if (!sp) { /* cannot happen (written just before the tail call): counted if it does */
    dq_count(OFFCPU_CNT_STACK_LOST);
    return 0;
  }
  sp->user_hash = h;
  /* 0: no user registers. A user thread then has no user stack in its sample: lost.
   * (UW_HASH_LOST, uw_stacks full, is counted by the unwinder.) */
  if (h == 0) {
    unsigned int flags = 0;
    bpf_probe_read_kernel(&flags, sizeof(flags), (void *)bpf_get_current_task() + OFF_TASK_FLAGS);
    if (!(flags & PF_KTHREAD))
      dq_count(OFFCPU_CNT_STACK_LOST);
  }
  return 0;
}
#endif

/* An executable mapping: announced again at its next switch-out (announce.h) */
TRACEPOINT_PROBE(syscalls, sys_enter_mmap) {
  announce_mmap(args->prot);
  return 0;
}

/* After exec the process's mappings are new: announced again (announce.h) */
RAW_TRACEPOINT_PROBE(sched_process_exec) {
  announce_exec();
#ifdef VERDICT_CACHE
  /* a thread other than the leader that execs takes the leader's tid: -t may now say
   * otherwise (TP_PROTO(struct task_struct *p, ...): p is current) */
  verdict_forget((void *)ctx->args[0]);
#endif
  return 0;
}

/* A task is freed (an RCU grace period after its last switch): its address may be
 * reused by a new task, whose verdict is not its own. Attached with -p/-t only, before
 * sched_switch. TP_PROTO(struct task_struct *p). */
RAW_TRACEPOINT_PROBE(sched_process_free) {
#ifdef VERDICT_CACHE
  verdict_forget((void *)ctx->args[0]);
#endif
  return 0;
}

/* A thread exits (current is the exiting task); its process is gone when its group
 * leader exits (announce.h). */
RAW_TRACEPOINT_PROBE(sched_process_exit) {
  u64 id = bpf_get_current_pid_tgid();
  u32 tgid = id >> 32, tid = (u32)id;
  decl_now.delete(&tid); /* a thread that exits inside a declared wait */
  /* its closed `start` entry (kept while it lives); a period it opens before its last
   * switch-out is deleted there (TASK_DEAD), this one is for a thread the filters no
   * longer take then (--cgroup: it moved out) */
  struct offcpu_start *st = start.lookup(&tid);
  if (st && st->skip == OFFCPU_START_CLOSED)
    start.delete(&tid);
#ifdef WAKER
  wakers.delete(&tid); /* woken while it was exiting */
#endif
  announce_exit(tgid, tid);
  return 0;
}
