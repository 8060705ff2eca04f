/* lockstat: lock waits in user space (futex syscalls or pthread uprobes) and in the
 * kernel (lock:contention_begin/end), aggregated in kernel maps.
 *
 * Selected with -D flags from the front-end:
 *   USER_FUTEX       futex waits: sys_enter/exit_futex (+ HAVE_FUTEX_WAIT, HAVE_FUTEX_WAITV)
 *   USER_PTHREAD     pthread_mutex_*lock uprobes (on_lock/on_lock_ret); futex entries
 *                    only mark the in-flight call as blocked
 *   CALIB            USER_PTHREAD: lockstat's calibration child (PID in calib_pid) is
 *                    timed into `calib`
 *   KERNEL_LOCKS     lock:contention_begin/end
 *   TGID_OK(x), TID_OK(x)  -p / --tid filters as constant expressions (default: 1)
 *   FILTER_ADDRS     use the addr_filter map (ADDR_FILTER_ENTRIES: sized from -L)
 *   MIN_WAIT_NS      waits shorter than this are counted in dq_counters[LS_CNT_BELOW_MIN] only
 *   OFF_TASK_MM, OFF_MM_MMAP_LOCK, MMAP_LOCK_SIZE, OFF_TASK_SIGHAND, OFF_SIGHAND_SIGLOCK
 *                    (BTF offsets,
 *                    optional) name mmap_lock and siglock for kernel locks
 *   OFF_TASK_STACK, THREAD_SIZE  where the user registers are (top of the task's kernel
 *                    stack), to scan the user stack at futex waits (optional; fp mode)
 *   UW_DWARF (+ unwind.h's)  --unwind=dwarf: waiters' user stacks unwound from .eh_frame
 *                    tables by uw_lockstat_futex_tail / uw_lockstat_pthread_tail,
 *                    programs of their own that the user-space handlers tail-call;
 *                    keyed by their hash (lockstat_key.user_hash), no scan needed
 *   STATS_ENTRIES, HIST_ENTRIES, STACK_ENTRIES, START_ENTRIES, KSTART_ENTRIES  map sizes
 *   USTATS_ENTRIES, UHIST_ENTRIES  user-space waits' own maps when kernel locks are
 *                    traced too (ustats, uhist)
 *   HIST_PER_THREAD  --per-thread: the histogram is keyed by thread too (each thread's
 *                    percentiles); otherwise by lock only (a lock's percentiles are all
 *                    the lock view shows: per thread it would be locks x threads x
 *                    buckets entries, 16,000 x ~8 for 16 threads on 1000 mutexes)
 *   DECL_BEGINS      futex mode: how many declared_begin_N programs (declared.h; default all)
 *   WAKERS           futex mode: sched_waking notes who woke each futex waiter
 *   GO_WAITS         goroutine waits of Go targets: go_park/go_resume uprobes inside
 *                    runtime.gopark (LS_KIND_GO keys)
 *   (futex mode) a Java thread of a JVM the front-end found in jvm_layouts waits for
 *                    the Java object jstack would name (jvm.h): LS_KIND_JAVA keys
 *
 * The front-end drains stats/hist each interval (atomic lookup-and-delete per key),
 * and several threads can update one value: waits of kernel idle tasks and IRQ
 * context all carry tid 0. So the sums are updated with atomic adds.
 */
#include "filters.h"
#include <uapi/linux/ptrace.h>
#include "hist.h"
#include "lockstat_shared.h"
#define DQ_NCOUNTERS LS_CNT_MAX
#include "common.h"
#define STACKS_SIZE STACK_ENTRIES
#define STACKS_DQ_OVERFLOW LS_CNT_OVERFLOW_STACKS
#include "stacks.h"
#ifdef UW_DWARF
#include "unwind.h"
#endif

/* struct futex_start, klock_frame, klock_task, plock_start: lockstat_shared.h (the
 * front-end reads the stack ids of waits in flight from them) */

/* record() runs in lock:contention_end too (any context, interrupts off): preallocated
 * then; otherwise only from syscalls and uprobes. */
#ifdef KERNEL_LOCKS
#define LS_RECORD_HASH BPFDIAG_HASH
#else
#define LS_RECORD_HASH BPFDIAG_HASH_LAZY
#endif
LS_RECORD_HASH(stats, struct lockstat_key, struct lockstat_val, STATS_ENTRIES);
LS_RECORD_HASH(hist, struct lockstat_hkey, u64, HIST_ENTRIES);
#if defined(KERNEL_LOCKS) && (defined(USER_FUTEX) || defined(USER_PTHREAD))
/* With kernel locks, user-space waits (recorded from syscalls and uprobes only) have
 * maps of their own, allocated on insert: --uprobes makes a row per (mutex, caller,
 * thread), far more than kernel locks need, and preallocating that many was not
 * affordable. stats and hist then hold the kernel's waits. */
BPFDIAG_HASH_LAZY(ustats, struct lockstat_key, struct lockstat_val, USTATS_ENTRIES);
BPFDIAG_HASH_LAZY(uhist, struct lockstat_hkey, u64, UHIST_ENTRIES);
#define LS_USER_MAPS 1
#endif
LS_RECORD_HASH(comms, u32, struct lockstat_comm, 65536);
#ifdef WAKERS
BPFDIAG_HASH(wakers, struct lockstat_wkey, u64, STATS_ENTRIES);
#endif
#ifdef FILTER_ADDRS
BPFDIAG_HASH_LAZY(addr_filter, u64, u8, ADDR_FILTER_ENTRIES);
#endif

/* lockstat's own PID (never traced), set before attach: a map, not a constant, so the
 * compiled program is the same for every run (common/bpf_object.h's cache) */
BPF_ARRAY(self_pid, u32, 1);

/* lockstat itself, or a thread -p/-t/--cgroup leave out (the current thread's) */
static inline int untraced(u32 pid, u32 tid) {
  u32 zero = 0;
  u32 *self = self_pid.lookup(&zero);
  return (self && pid == *self) || !TGID_OK(pid) || !TID_OK(tid) || !CGROUP_OK();
}

static inline int filtered_out(u32 pid, u32 tid, u64 addr) {
  if (untraced(pid, tid))
    return 1;
#ifdef FILTER_ADDRS
  if (!addr_filter.lookup(&addr))
    return 1;
#endif
  return 0;
}

static inline void remember_comm(u32 tid) {
  if (comms.lookup(&tid))
    return;
  struct lockstat_comm c = {};
  bpf_get_current_comm(&c.comm, sizeof(c.comm));
  if (comms.update(&tid, &c))
    dq_count(LS_CNT_MAP_FULL);
}

/* Adds one wait of `delta` ns (blocked: did it wait in the kernel; timedout: it
 * ended by its timeout) to the maps. */
static inline void record(struct lockstat_key *k, u64 delta, u32 blocked, u32 timedout) {
  if (delta < MIN_WAIT_NS) {
    dq_count(LS_CNT_BELOW_MIN);
    return;
  }
  struct lockstat_val zero = {};
#ifdef LS_USER_MAPS
  struct lockstat_val *v =
      k->kind == LS_KIND_KERNEL ? stats.lookup_or_try_init(k, &zero) : ustats.lookup_or_try_init(k, &zero);
#else
  struct lockstat_val *v = stats.lookup_or_try_init(k, &zero);
#endif
  if (!v) {
    dq_count(LS_CNT_MAP_FULL);
    return;
  }
  /* atomic: tid 0 (idle tasks of every CPU, IRQ context) shares one key */
  __sync_fetch_and_add(&v->count, 1);
  __sync_fetch_and_add(&v->total_ns, delta);
  if (blocked)
    __sync_fetch_and_add(&v->blocked, blocked);
  if (timedout)
    __sync_fetch_and_add(&v->timedout, 1);
  /* a racing larger max can be overwritten by a smaller one only when two CPUs
   * finish waits on the same key at the same instant; the sums stay exact */
  if (delta > v->max_ns)
    v->max_ns = delta;

  struct lockstat_hkey hk = {};
  hk.addr = k->addr;
  hk.pid = k->pid;
#ifdef HIST_PER_THREAD
  hk.tid = k->tid; /* --per-thread: each thread's percentiles */
#endif
  hk.kind = k->kind;
  hk.bucket = hist_fine_index(delta);
  hk.spin = k->kind == LS_KIND_KERNEL && ls_kernel_spins(k->flags);
#ifdef LS_USER_MAPS
  u64 one = 0, *h = k->kind == LS_KIND_KERNEL ? hist.lookup_or_try_init(&hk, &one) : uhist.lookup_or_try_init(&hk, &one);
#else
  u64 one = 0, *h = hist.lookup_or_try_init(&hk, &one);
#endif
  if (h)
    __sync_fetch_and_add(h, 1);
  else
    dq_count(LS_CNT_MAP_FULL);
  remember_comm(k->tid);
}

/* ---- user space: futex waits ---------------------------------------------------- */
#if defined(USER_FUTEX) || defined(USER_PTHREAD)
BPFDIAG_HASH_LAZY(futex_start, u32, struct futex_start, START_ENTRIES);
#endif
#ifdef USER_FUTEX
#include "jvm.h"
#endif
#ifdef USER_PTHREAD
BPFDIAG_HASH_LAZY(plock_start, u32, struct plock_start, START_ENTRIES);
#ifdef UW_DWARF
struct plock_wait {
  struct lockstat_key k;
  u64 delta;
};
BPF_PERCPU_ARRAY(plock_wait, struct plock_wait, 1); /* on_lock_ret -> its unwinder */
#endif
#endif

#if defined(USER_FUTEX) && defined(OFF_TASK_STACK) && defined(THREAD_SIZE) && !defined(UW_DWARF)
BPFDIAG_HASH_LAZY(scans, s32, struct lockstat_scan, STACK_ENTRIES);
BPF_PERCPU_ARRAY(scan_scratch, struct lockstat_scan, 1); /* too big for the BPF stack */

/* Saves the top of the user stack the first time a stack id is seen. The user
 * registers sit at the top of the task's kernel stack (x86-64: no padding); the
 * syscall number in orig_ax confirms the location before anything is trusted. */
static inline void scan_user_stack(s32 stack_id, long nr) {
  if (stack_id < 0 || scans.lookup(&stack_id))
    return;
  void *task = (void *)bpf_get_current_task();
  void *stack = NULL;
  bpf_probe_read_kernel(&stack, sizeof(stack), task + OFF_TASK_STACK);
  if (!stack)
    return;
  struct pt_regs *regs = (struct pt_regs *)(stack + THREAD_SIZE) - 1;
  unsigned long orig_ax = 0, sp = 0;
  bpf_probe_read_kernel(&orig_ax, sizeof(orig_ax), &regs->orig_ax);
  bpf_probe_read_kernel(&sp, sizeof(sp), &regs->sp);
  if (orig_ax != nr || !sp) {
    dq_count(LS_CNT_SCAN_FAILED);
    return;
  }
  u32 zero = 0;
  struct lockstat_scan *sc = scan_scratch.lookup(&zero);
  if (!sc)
    return;
  if (bpf_probe_read_user(sc->words, sizeof(sc->words), (void *)sp) == 0)
    if (scans.update(&stack_id, sc))
      dq_count(LS_CNT_MAP_FULL);
}
#define SCAN_USER_STACK(id, nr) scan_user_stack(id, nr)
#else
#define SCAN_USER_STACK(id, nr)
#endif

#if defined(USER_FUTEX) && !defined(USER_PTHREAD)
/* Writes `s` as thread `tid`'s wait in flight, with its user stack (the futex's callers
 * scanned when `nr` is a futex syscall's number, -1 for none); 0 when written. With the
 * DWARF unwinder the stack is left to the caller's tail call, which stamps the start
 * again after unwinding. */
static inline int start_wait(void *ctx, u32 tid, struct futex_start *s, long nr) {
#ifdef UW_DWARF
  s->stack_id = -1;
  s->user_hash = UW_HASH_LOST; /* until the unwinder's tail call has run */
#else
  s->stack_id = bpfdiag_stack_id(ctx, BPF_F_USER_STACK);
  if (s->stack_id < 0 && s->stack_id != -14 /* -EFAULT: no stack to take */)
    dq_count(LS_CNT_LOST_USTACK);
  if (nr >= 0) {
    SCAN_USER_STACK(s->stack_id, nr);
  }
#endif
  s->ts = bpf_ktime_get_ns(); /* after the stack walk and scan: overhead, not waiting */
  if (futex_start.update(&tid, s)) {
    dq_count(LS_CNT_MAP_FULL);
    return -1;
  }
  return 0;
}
#endif

#if defined(USER_FUTEX) || defined(USER_PTHREAD)
static inline int futex_begin(void *ctx, u64 uaddr, u32 flags, long nr) {
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
#ifdef USER_PTHREAD
  /* exact pthread mode: only note that the in-flight lock call blocked */
  struct plock_start *p = plock_start.lookup(&tid);
  if (p)
    p->blocked = 1;
  return PASS;
#else
  if (filtered_out(pid, tid, uaddr))
    return PASS;
  struct futex_start *o = futex_start.lookup(&tid);
  if (o && (o->flags & LS_FUTEX_DECLARED))
    return PASS; /* inside a wait the software declared: part of it (declared_done) */
  struct futex_start s = {};
  s.uaddr = uaddr;
  s.flags = flags;
  struct jvm_wait jw = {};
  jvm_wait_of(pid, tid, &jw); /* a Java thread: the object it waits for (jstack's) */
  if (jw.kind != JVM_WAIT_NONE) {
    s.jvm_kind = jw.kind;
    s.jvm_obj = jw.obj;
    s.jvm_klass = jw.klass;
  }
  if (start_wait(ctx, tid, &s, nr))
    return PASS;
#ifdef UW_DWARF
  uw_progs.call(ctx, UW_PROG_UNWIND); /* does not return when it runs */
  dq_count(LS_CNT_LOST_USTACK);
#endif
  return PASS;
#endif
}

#if defined(UW_DWARF) && defined(USER_FUTEX)
/* The DWARF unwinder for futex waits, reached by a tail call from futex_begin (a
 * program of its own: see unwind.h). Current is the waiter in its futex syscall; its
 * futex_start entry was just written. */
static inline int futex_unwound(void) {
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id;
  u64 h = uw_unwind_user(id >> 32);
  struct futex_start *s = futex_start.lookup(&tid);
  if (!s) { /* cannot happen (written just before the tail call): counted if it does */
    dq_count(LS_CNT_LOST_USTACK);
    return 0;
  }
  s->user_hash = h;
  if (h == 0) /* no user registers (a syscall always has them): lost */
    dq_count(LS_CNT_LOST_USTACK);
  s->ts = bpf_ktime_get_ns(); /* after the unwinding: overhead, not waiting */
  return 0;
}
int uw_lockstat_futex_tail(void *ctx) {
  return futex_unwound();
}
#ifndef USER_PTHREAD
/* The same for declared waits (their begin is a uprobe: a tail call stays within one
 * program type, so they have a table and a copy of their own). */
BPF_PROG_ARRAY(decl_progs, UW_PROG_SLOTS);
int decl_walk_begin(struct pt_regs *ctx) {
  int r = uw_begin();
  if (r > 0)
    decl_progs.call(ctx, UW_PROG_WALK);
  if (r >= 0)
    uw_finish();
  decl_progs.call(ctx, UW_PROG_TOOL);
  return 0;
}
int decl_walk_step(struct pt_regs *ctx) {
  if (uw_chunk())
    decl_progs.call(ctx, UW_PROG_WALK);
  uw_finish();
  decl_progs.call(ctx, UW_PROG_TOOL);
  return 0;
}
int uw_lockstat_declared_tail(struct pt_regs *ctx) {
  return futex_unwound();
}
#endif
#endif

static inline int futex_end(long ret) {
#ifdef USER_FUTEX
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id;
  struct futex_start *s = futex_start.lookup(&tid);
  if (!s)
    return PASS; /* a wake, a non-waiting op, or a wait that began before tracing */
  if (s->flags & LS_FUTEX_DECLARED)
    return PASS; /* a futex wait inside a declared wait: not recorded on its own */
  u64 delta = bpf_ktime_get_ns() - s->ts;
  struct lockstat_key k = {};
  k.addr = s->uaddr;
  k.pid = id >> 32;
  k.tid = tid;
  k.stack_id = s->stack_id;
  k.user_hash = s->user_hash;
  k.kind = LS_KIND_FUTEX;
  k.flags = s->flags;
  if (s->jvm_kind != JVM_WAIT_NONE) { /* the Java object is the lock, not the thread's own word */
    k.kind = LS_KIND_JAVA;
    k.addr = s->jvm_obj;
    k.caller = s->jvm_klass;
    k.jvm_kind = s->jvm_kind;
  }
  u32 waker = s->waker;
  futex_start.delete(&tid);
  u32 timedout = ret == -110; /* -ETIMEDOUT */
  record(&k, delta, 1, timedout);
#ifdef WAKERS
  if (ret == 0 && delta >= MIN_WAIT_NS) { /* woken by a wake, not a timeout or signal */
    struct lockstat_wkey wk = {};
    wk.addr = k.addr;
    wk.pid = k.pid;
    wk.waker = waker & 0x80000000u ? 0 : waker;
    u64 zero = 0, *n = wakers.lookup_or_try_init(&wk, &zero);
    if (n)
      __sync_fetch_and_add(n, 1);
    else
      dq_count(LS_CNT_MAP_FULL);
  }
#endif
#endif
  return PASS;
}

#ifdef WAKERS
/* Runs in the waker's context (sched_wakeup may run on the wakee's CPU instead). */
TRACEPOINT_PROBE(sched, sched_waking) {
  u32 wakee = args->pid;
  struct futex_start *s = futex_start.lookup(&wakee);
  if (!s || s->waker)
    return PASS;
  u32 tid = (u32)bpf_get_current_pid_tgid();
  s->waker = tid ? tid : 0x80000000u | bpf_get_smp_processor_id();
  return PASS;
}
#endif

/* x86-64 syscall numbers: futex_wait and futex_waitv enter here too (every sys_enter_*
 * tracepoint has this layout: __syscall_nr, then each argument in 8 bytes; their first
 * argument is at uaddr's place), so futex_begin is compiled once, not three times. */
#define LS_NR_FUTEX_WAITV 449
#define LS_NR_FUTEX_WAIT 455
TRACEPOINT_PROBE(syscalls, sys_enter_futex) {
  long nr = args->__syscall_nr;
  u64 uaddr = (u64)args->uaddr;
  u32 flags;
  if (0) {
#ifdef HAVE_FUTEX_WAIT
  } else if (nr == LS_NR_FUTEX_WAIT) {
    flags = LS_FUTEX_WAIT2;
#endif
#ifdef HAVE_FUTEX_WAITV
  } else if (nr == LS_NR_FUTEX_WAITV) {
    /* args->uaddr is futex_waitv's `waiters`: struct futex_waitv { u64 val; u64 uaddr;
     * u32 flags; u32 rsvd; } */
    uaddr = 0;
    bpf_probe_read_user(&uaddr, sizeof(uaddr), (void *)args->uaddr + 8);
    flags = LS_FUTEX_WAITV;
#endif
  } else {
    switch (args->op & 127) { /* FUTEX_CMD_MASK */
    case 0:                    /* FUTEX_WAIT */
      flags = args->val == 2 ? LS_FUTEX_LOCKWORD : LS_FUTEX_PLAIN;
      break;
    case 9: /* FUTEX_WAIT_BITSET */
      flags = LS_FUTEX_BITSET;
      break;
    case 6:  /* FUTEX_LOCK_PI */
    case 13: /* FUTEX_LOCK_PI2 */
      flags = LS_FUTEX_PI;
      break;
    case 11: /* FUTEX_WAIT_REQUEUE_PI */
      flags = LS_FUTEX_REQUEUE;
      break;
    default: /* wakes, requeues, trylock_pi, unlock_pi: no wait */
      return PASS;
    }
    if (args->utime)
      flags |= LS_FUTEX_TIMED;
  }
  return futex_begin(args, uaddr, flags, nr);
}

/* Also attached to sys_exit_futex_wait and sys_exit_futex_waitv (every sys_exit_*
 * tracepoint has this layout: __syscall_nr, ret): one copy of futex_end, not three. */
TRACEPOINT_PROBE(syscalls, sys_exit_futex) {
  return futex_end(args->ret);
}
#endif /* USER_FUTEX || USER_PTHREAD */

/* ---- user space: waits the software declares (USDT begin/done pairs) --------------- */
#if defined(USER_FUTEX) && !defined(USER_PTHREAD)
#include "declared.h"
BPFDIAG_HASH_LAZY(decl_outer, u32, struct futex_start, START_ENTRIES); /* outer waits set aside */

static inline int on_declared_begin(struct pt_regs *ctx, u32 slot) {
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
  if (untraced(pid, tid))
    return PASS;
  /* A wait declared inside another (PostgreSQL re-takes its lock manager's LWLock while
   * it waits for a heavyweight lock) is the inner one's time, as the software's own
   * wait state says: the outer wait is set aside in decl_outer and resumes, shifted by
   * the inner wait's length, when the inner one is done. Deeper nesting is counted.
   * A begin is nested only if it is deeper in the stack than the wait in flight: else
   * that wait's frame is gone, left without its end (PostgreSQL's errors longjmp out
   * of a lock wait on a timeout or a cancel), and it is dropped and counted. */
  u64 sp = PT_REGS_SP(ctx);
  u32 inner = 0;
  struct futex_start *o = futex_start.lookup(&tid);
  if (o && (o->flags & LS_FUTEX_DECLARED) && sp >= o->sp) {
    dq_count(LS_CNT_STALE_BEGIN);
    struct futex_start *out = (o->flags & LS_DECL_INNER) ? decl_outer.lookup(&tid) : NULL;
    if (out && sp < out->sp) { /* the outer wait is still under way */
      struct futex_start back = *out;
      futex_start.update(&tid, &back);
    } else {
      futex_start.delete(&tid);
    }
    decl_outer.delete(&tid);
    o = futex_start.lookup(&tid);
  }
  if (o && (o->flags & LS_FUTEX_DECLARED)) {
    if (!(o->flags & LS_DECL_INNER) && o->flags < LS_DECL_DEPTH_ONE) {
      struct futex_start outer = *o;
      if (decl_outer.update(&tid, &outer) == 0)
        inner = LS_DECL_INNER;
    }
    if (!inner) {
      if (o->flags < 0xff000000u)
        o->flags += LS_DECL_DEPTH_ONE;
      else
        dq_count(LS_CNT_NEST_OVERFLOW);
      return PASS;
    }
  }
  u64 raw = declared_raw(ctx, slot, pid, LS_CNT_MAP_FULL);
  if (!raw)
    return PASS;
  struct futex_start s = {};
  s.uaddr = raw;
  s.flags = LS_FUTEX_DECLARED | inner;
  s.sp = sp;
  if (start_wait(ctx, tid, &s, -1))
    return PASS;
#ifdef UW_DWARF
  decl_progs.call(ctx, UW_PROG_UNWIND); /* does not return when it runs */
  dq_count(LS_CNT_LOST_USTACK);
#endif
  return PASS;
}

int declared_done(struct pt_regs *ctx) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
  if (untraced(pid, tid))
    return PASS;
  struct futex_start *s = futex_start.lookup(&tid);
  if (!s || !(s->flags & LS_FUTEX_DECLARED)) { /* began before tracing */
    dq_count(LS_CNT_UNMATCHED_END);
    return PASS;
  }
  if (s->flags >= LS_DECL_DEPTH_ONE) { /* a nested wait's end */
    s->flags -= LS_DECL_DEPTH_ONE;
    return PASS;
  }
  struct lockstat_key k = {};
  k.addr = s->uaddr;
  k.pid = pid;
  k.tid = tid;
  k.stack_id = s->stack_id;
  k.user_hash = s->user_hash;
  k.kind = LS_KIND_DECLARED;
  u64 began = s->ts;
  u32 inner = s->flags & LS_DECL_INNER;
  u64 delta = now > began ? now - began : 0;
  futex_start.delete(&tid);
  record(&k, delta, 1, 0);
  if (inner) { /* the outer wait resumes, without the inner one's time */
    struct futex_start *outer = decl_outer.lookup(&tid);
    if (outer) {
      struct futex_start resumed = *outer;
      resumed.ts += delta;
      if (futex_start.update(&tid, &resumed))
        dq_count(LS_CNT_MAP_FULL);
      decl_outer.delete(&tid);
    }
  }
  return PASS;
}
DECLARED_PROGRAMS()
#endif

/* ---- user space: exact pthread mode (uprobes) -------------------------------------- */
#ifdef USER_PTHREAD
/* Probe cost. Each timed call also contains part of its own probes' cost: from the
 * entry handler's clock read to the return handler's (leaving the entry trap, the
 * return-probe trap into the kernel). At startup a child of lockstat (calib_pid)
 * makes uncontended lock calls under the same probes; calib is a histogram of their
 * times (10 ns buckets), and the front-end seeds every CPU's probe_cost with its
 * median. That cost is not one number: it moved between 935 and 1315 ns from one run
 * to the next on an idle box, and a target's calls cost up to 30% more than the
 * calibration child's (two threads on two CPUs). So each CPU's estimate then follows
 * the median of the targets' own calls that did not block (the uncontended fast path:
 * probe cost plus ~20-40 ns), a streaming median that moves LS_COST_STEP ns towards
 * each such call. Every timed call is recorded that much shorter (never below 0). */
#define LS_CALIB_BUCKETS 1024
#define LS_COST_STEP 2
struct probe_cost_est {
  u64 ns;    /* current estimate (0: not calibrated, nothing taken off) */
  u64 calls; /* uncontended calls that moved it */
};
BPF_PERCPU_ARRAY(probe_cost, struct probe_cost_est, 1);
#ifdef CALIB
BPF_ARRAY(calib, u64, LS_CALIB_BUCKETS);
/* the calibration child's PID, set before the probes attach (a map, not a constant:
 * the compiled program stays the same across runs) */
BPF_ARRAY(calib_pid, u32, 1);
static inline int is_calib(u32 pid) {
  u32 zero = 0;
  u32 *p = calib_pid.lookup(&zero);
  return p && *p && pid == *p;
}
#define IS_CALIB(pid) is_calib(pid)
#else
#define IS_CALIB(pid) 0
#endif

/* At the probe point the stack pointer still points at the return address (the
 * front-end only moves the probe past instructions that leave %rsp alone). */
int on_lock(struct pt_regs *ctx) {
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
  u64 mutex = PT_REGS_PARM1(ctx);
  if (!IS_CALIB(pid) && filtered_out(pid, tid, mutex))
    return PASS;
  struct plock_start s = {};
  s.mutex = mutex;
  bpf_probe_read_user(&s.caller, sizeof(s.caller), (void *)PT_REGS_SP(ctx));
  s.ts = bpf_ktime_get_ns();
  if (plock_start.update(&tid, &s))
    dq_count(LS_CNT_MAP_FULL);
  return PASS;
}

int on_lock_ret(struct pt_regs *ctx) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id;
  struct plock_start *s = plock_start.lookup(&tid);
  if (!s)
    return PASS;
  struct lockstat_key k = {};
  k.addr = s->mutex;
  k.caller = s->caller;
  k.pid = id >> 32;
  k.tid = tid;
  k.kind = LS_KIND_PTHREAD;
  u32 blocked = s->blocked;
  u64 delta = now - s->ts;
  plock_start.delete(&tid);
#ifdef CALIB
  if (IS_CALIB(k.pid)) {
    u32 b = delta / 10;
    if (b >= LS_CALIB_BUCKETS)
      b = LS_CALIB_BUCKETS - 1;
    u64 *slot = calib.lookup(&b);
    if (slot)
      __sync_fetch_and_add(slot, 1);
    return PASS;
  }
#endif
  u32 zero = 0;
  struct probe_cost_est *cost = probe_cost.lookup(&zero);
  if (cost && cost->ns) {
    if (!blocked) {
      if (delta > cost->ns)
        cost->ns += LS_COST_STEP;
      else if (cost->ns > LS_COST_STEP)
        cost->ns -= LS_COST_STEP;
      cost->calls++;
    }
    delta = delta > cost->ns ? delta - cost->ns : 0;
  }
  /* The stack is taken here, on return, and only for calls that blocked: walking it
   * costs ~1.6 us, more than the rest of the probe, and uncontended calls are already
   * placed by their caller. On return %rip is in the caller and %rbp its frame, so
   * the frame-pointer walk starts at the exact call site. */
  k.stack_id = -1;
  if (blocked) {
#ifdef UW_DWARF
    /* the unwinder records the wait with its stack (uw_lockstat_pthread_tail) */
    struct plock_wait *w = plock_wait.lookup(&zero);
    if (w) {
      w->k = k;
      w->delta = delta;
      uw_progs.call(ctx, UW_PROG_UNWIND); /* does not return when it runs */
    }
    dq_count(LS_CNT_LOST_USTACK);
    k.user_hash = UW_HASH_LOST;
#else
    k.stack_id = bpfdiag_stack_id(ctx, BPF_F_USER_STACK);
    if (k.stack_id < 0 && k.stack_id != -14)
      dq_count(LS_CNT_LOST_USTACK);
#endif
  }
  record(&k, delta, blocked, 0);
  return PASS;
}

#ifdef UW_DWARF
/* The DWARF unwinder for blocked pthread lock calls, reached by a tail call from
 * on_lock_ret (a program of its own: see unwind.h). On return the user registers are
 * the caller's, at the call site. The wait, timed before the unwinding, comes
 * through plock_wait (per CPU: written just before the tail call). */
int uw_lockstat_pthread_tail(struct pt_regs *ctx) {
  u32 zero = 0;
  struct plock_wait *w = plock_wait.lookup(&zero);
  if (!w)
    return 0;
  u64 h = uw_unwind_user(w->k.pid);
  if (h == 0) /* no user registers (a uretprobe always has them): lost */
    dq_count(LS_CNT_LOST_USTACK);
  w = plock_wait.lookup(&zero);
  if (!w)
    return 0;
  w->k.user_hash = h;
  /* recorded by a program of its own: inlined here, record() was verified once per
   * state the unwinder leaves (574,251 insns, 0.94 s; alone: under 300k) */
  uw_progs.call(ctx, UW_PROG_AFTER);
  dq_count(LS_CNT_LOST_USTACK); /* cannot happen (installed before attaching): counted if it does */
  return 0;
}

/* ... and records the wait with its stack (tail-called by the unwinder). */
int ls_pthread_record(struct pt_regs *ctx) {
  u32 zero = 0;
  struct plock_wait *w = plock_wait.lookup(&zero);
  if (!w)
    return 0;
  struct lockstat_key k = w->k;
  record(&k, w->delta, 1, 0);
  return 0;
}
#endif
#endif

/* ---- goroutines parked by the Go runtime (GO_WAITS) -------------------------------- */
#ifdef GO_WAITS
/* A Go program's goroutines wait without a futex each: the runtime parks them in
 * runtime.gopark and runs another goroutine on the thread. The front-end
 * (common/go_runtime) finds two instructions of gopark per binary and attaches:
 *   go_park    at the jcc of gopark's stack check: g = R14, lock = RBX, waitReason = CL
 *              (Go >= 1.17 amd64 register ABI); [rsp] is gopark's caller
 *   go_resume  after `call runtime.mcall`, where a parked goroutine resumes (R14 = g)
 * The stack is walked at the park (frame pointers: Go keeps them; the walk skips
 * gopark's caller, which [rsp] gives) and the clock read after it. go_parks counts the
 * parks for the front-end's rate guard (a channel ping-pong parks millions of times a
 * second; each park and resume is a trap into the kernel). */
BPFDIAG_HASH_LAZY(go_start, struct go_key, struct go_start, START_ENTRIES);
BPF_PERCPU_ARRAY(go_parks, u64, 1);

int go_park(struct pt_regs *ctx) {
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
  if (untraced(pid, tid))
    return PASS;
  u32 zero = 0;
  u64 *n = go_parks.lookup(&zero);
  if (n)
    (*n)++;
  struct go_key k = {};
  k.g = ctx->r14;
  k.pid = pid;
  struct go_start s = {};
  s.lock = ctx->bx;
  s.reason = ctx->cx & 0xff;
  bpf_probe_read_user(&s.caller, sizeof(s.caller), (void *)ctx->sp);
  s.stack_id = bpfdiag_stack_id(ctx, BPF_F_USER_STACK);
  if (s.stack_id < 0 && s.stack_id != -14)
    dq_count(LS_CNT_LOST_USTACK);
  s.ts = bpf_ktime_get_ns(); /* after the stack walk: overhead, not waiting */
  if (go_start.update(&k, &s))
    dq_count(LS_CNT_MAP_FULL);
  return PASS;
}

int go_resume(struct pt_regs *ctx) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  struct go_key gk = {};
  gk.g = ctx->r14;
  gk.pid = id >> 32;
  struct go_start *s = go_start.lookup(&gk);
  if (!s)
    return PASS; /* parked before tracing, or not a target */
  struct lockstat_key k = {};
  k.addr = (s->lock & ((1ULL << LS_GO_REASON_SHIFT) - 1)) | ((u64)s->reason << LS_GO_REASON_SHIFT);
  k.caller = s->caller;
  k.pid = gk.pid;
  /* the waiter is the goroutine, not the OS thread it happens to run on: its g's
   * address bits with the top bit set (never a kernel tid), named after the thread */
  k.tid = LS_GO_WAITER(gk.g);
  k.stack_id = s->stack_id;
  k.kind = LS_KIND_GO;
  k.flags = s->reason;
  u64 delta = now > s->ts ? now - s->ts : 0;
  go_start.delete(&gk);
  record(&k, delta, 1, 0);
  return PASS;
}
#endif

/* ---- kernel locks ------------------------------------------------------------------ */
#ifdef KERNEL_LOCKS
/* Per task (idle tasks: per CPU), a stack of the kernel waits in flight. Begins and
 * ends nest: a semaphore's slow path re-takes its own spinlock (same address) while
 * the semaphore wait is open, a rwsem or mutex slow path spins on its wait_lock, an
 * interrupt can contend while the task spins, and a mutex begins again after each
 * sleep without an end in between. An end closes the innermost open wait on its
 * address.
 * A begin whose end is never seen leaves a stale wait on the stack; an end whose begin
 * was not seen would then close that stale wait and report a spinlock "wait" of
 * hundreds of ms. Ends are attached before begins (run.cpp), so no wait can begin
 * traced and end untraced at startup, but the kernel still skips BPF programs that
 * would recurse, so the stack is kept honest with what a spinning task can do: it
 * spins with preemption off, so a spin wait opened on another CPU is stale, and
 * nothing sleeps while spinning, so a sleeping lock's begin makes every open spin wait
 * stale. A begin on an open address that cannot continue it restarts it; waits left
 * open above a closed one are dropped. All of these count as stale_begins. When the
 * stack is full the oldest wait is dropped (nest_overflow), never the new begin (its
 * end would close an older wait on the same address). */
BPFDIAG_HASH(klock_start, u32, struct klock_task, KSTART_ENTRIES);

static inline u32 thread_key(u32 tid) {
  /* idle tasks all have tid 0: keep CPUs apart */
  return tid ? tid : 0x80000000u | bpf_get_smp_processor_id();
}

static inline u32 kernel_identity(u64 addr) {
  u32 flags = 0;
#if defined(OFF_TASK_MM) && defined(OFF_MM_MMAP_LOCK)
  {
    void *task = (void *)bpf_get_current_task();
    u64 mm = 0;
    bpf_probe_read_kernel(&mm, sizeof(mm), task + OFF_TASK_MM);
    u64 lo = mm + OFF_MM_MMAP_LOCK;
    if (mm && addr >= lo && addr - lo < MMAP_LOCK_SIZE) /* the rwsem or a lock inside it */
      flags |= LS_KID_MMAP_LOCK | ((u32)(addr - lo) << LS_KID_OFFSET_SHIFT);
  }
#endif
#if defined(OFF_TASK_SIGHAND) && defined(OFF_SIGHAND_SIGLOCK)
  {
    void *task = (void *)bpf_get_current_task();
    u64 sh = 0;
    bpf_probe_read_kernel(&sh, sizeof(sh), task + OFF_TASK_SIGHAND);
    if (sh && addr == sh + OFF_SIGHAND_SIGLOCK)
      flags |= LS_KID_SIGLOCK;
  }
#endif
  return flags;
}

#if defined(OFF_TASK_CFS_RQ) && defined(OFF_CFS_RQ_RQ) && defined(OFF_RQ_LOCK) && defined(OFF_RQ_CPU) && defined(RQ_CPUS)
/* Each CPU's run-queue lock address, for the front-end to name rq_lock (perf does the
 * same with bpf_this_cpu_ptr(&runqueues), which needs a typed ksym; `runqueues` is
 * not in kallsyms here). The running task's cfs_rq is on this CPU's run queue:
 * current->se.cfs_rq->rq. Filled once per CPU, at its first spin begin. */
BPF_ARRAY(rq_locks, u64, RQ_CPUS);

static inline void note_rq_lock(void) {
  u32 cpu = bpf_get_smp_processor_id();
  u64 *slot = rq_locks.lookup(&cpu);
  if (!slot || *slot)
    return;
  void *task = (void *)bpf_get_current_task();
  u64 cfs = 0, rq = 0;
  bpf_probe_read_kernel(&cfs, sizeof(cfs), task + OFF_TASK_CFS_RQ);
  if (!cfs)
    return;
  bpf_probe_read_kernel(&rq, sizeof(rq), (void *)cfs + OFF_CFS_RQ_RQ);
  if (!rq)
    return;
  /* only this CPU's own run queue: a test run named three rq_lock addresses on two
   * CPUs (a task's cfs_rq read while it moved between CPUs) */
  int rq_cpu = -1;
  bpf_probe_read_kernel(&rq_cpu, sizeof(rq_cpu), (void *)rq + OFF_RQ_CPU);
  if (rq_cpu == (int)cpu)
    *slot = rq + OFF_RQ_LOCK;
}
#define NOTE_RQ_LOCK() note_rq_lock()
#else
#define NOTE_RQ_LOCK()
#endif

/* Both ends of a wait are timed first thing in their probes; the kernel stack (~1-5 us
 * to walk) and the lock's identity are taken at the end, after the wait is timed: the
 * end is reached from the same slow-path function as the begin, so the stack is the
 * same, and no tracing work falls inside the wait (it falls inside the critical
 * section instead: see "Kernel stacks are sampled" below). Measured under MariaDB +
 * sysbench (16 threads): with the walk in the begin probe and the timestamp after it,
 * spinlock totals were 0.52x a perf record pairing of the same tracepoints. */
static inline void kframe_init(struct klock_frame *f, u64 now, u64 addr, u32 flags) {
  f->addr = addr;
  f->flags = flags;
  f->last = flags;
  f->stack_id = -1;
  f->cpu = bpf_get_smp_processor_id();
  f->ts = now;
}

/* 0: continue the open wait; 1: push a nested wait; 2: restart (stale begin) */
static inline int begin_action(struct klock_frame *top, u64 addr, u32 nf) {
  if (top->addr != addr)
    return 1;
  if ((top->flags & LS_LCB_MUTEX) && (nf & LS_LCB_MUTEX)) {
    /* a mutex begins with MUTEX|SPIN, then MUTEX when it sleeps, then MUTEX|SPIN
     * again after a wakeup; two spin begins in a row mean a new wait */
    if ((nf & LS_LCB_SPIN) && (top->last & LS_LCB_SPIN))
      return 2;
    return 0;
  }
  if ((nf & LS_LCB_SPIN) && !(top->flags & LS_LCB_SPIN))
    return 1; /* a spinlock at a sleeping lock's address (struct semaphore's lock) */
  return 2;
}

/* Frames `drop` (bit i: frame i) removed, the others kept in order; the new depth. */
static inline u32 kstack_compact(struct klock_task *t, u32 d, u32 drop) {
  u32 n = 0;
#pragma unroll
  for (int i = 0; i < LS_KNEST; ++i) {
    if ((u32)i < d && !(drop & (1u << i))) {
      if (n != (u32)i)
        t->f[n & (LS_KNEST - 1)] = t->f[i];
      n++;
    }
  }
  return n;
}

/* Open spin waits that cannot still be in progress (see above): begun on another
 * CPU, or any spin wait when a sleeping lock begins. Counted as stale begins. */
static inline u32 kstack_stale(struct klock_task *t, u32 d, u32 cpu, int sleeping) {
  u32 m = 0;
#pragma unroll
  for (int i = 0; i < LS_KNEST; ++i)
    if ((u32)i < d && ls_kernel_spins(t->f[i].flags) && (sleeping || t->f[i].cpu != cpu)) {
      m |= 1u << i;
      dq_count(LS_CNT_STALE_BEGIN);
    }
  return m;
}

TRACEPOINT_PROBE(lock, contention_begin) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
  u64 addr = (u64)args->lock_addr;
  u32 nf = args->flags;
  if (nf & LS_LCB_SPIN)
    NOTE_RQ_LOCK();
  if (filtered_out(pid, tid, addr))
    return PASS;
  u32 key = thread_key(tid);
  struct klock_task *t = klock_start.lookup(&key);
  if (!t) {
    struct klock_task z = {};
    z.depth = 1;
    kframe_init(&z.f[0], now, addr, nf);
    if (klock_start.update(&key, &z))
      dq_count(LS_CNT_MAP_FULL);
    return PASS;
  }
  u32 d = t->depth;
  if (d > LS_KNEST)
    d = LS_KNEST;
  u32 cpu = bpf_get_smp_processor_id();
  u32 stale = kstack_stale(t, d, cpu, !ls_kernel_spins(nf));
  if (stale)
    d = kstack_compact(t, d, stale);
  if (d > 0) {
    struct klock_frame *top = &t->f[(d - 1) & (LS_KNEST - 1)];
    int act = begin_action(top, addr, nf);
    if (act == 0) {
      top->flags |= nf;
      top->last = nf;
      t->depth = d;
      return PASS;
    }
    if (act == 2) {
      dq_count(LS_CNT_STALE_BEGIN);
      kframe_init(top, now, addr, nf);
      t->depth = d;
      return PASS;
    }
  }
  if (d >= LS_KNEST) {
    dq_count(LS_CNT_NEST_OVERFLOW);
    d = kstack_compact(t, d, 1); /* the oldest wait goes */
  }
  kframe_init(&t->f[d & (LS_KNEST - 1)], now, addr, nf);
  t->depth = d + 1;
  return PASS;
}

/* Kernel stacks are sampled. The end probe runs inside the critical section just
 * acquired, and walking the kernel stack there (~5 us of the probe's ~7 us) made every
 * other waiter of the lock wait that much longer: under mmap_storm + mutex_crowd a
 * page-table lock's p50 wait was 2.1-2.4x, its p90 2.4-3.0x a perf record pairing of
 * the same tracepoints; without the walk 1.03-1.10x and 0.6-1.08x. So the stack is
 * taken for the first wait of each (lock, process) and then for at most one wait per
 * LS_KWALK_INTERVAL_NS; the other waits are timed and counted in full with
 * LS_STACK_UNSAMPLED, and the report scales the sampled sites to the lock's totals. */
#define LS_KWALK_INTERVAL_NS 10000000ULL
struct kwalk_key {
  u64 addr;
  u32 pid;
  u32 pad;
};
BPF_TABLE("lru_hash", struct kwalk_key, u64, kwalk_last, STATS_ENTRIES);

TRACEPOINT_PROBE(lock, contention_end) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
  u64 addr = (u64)args->lock_addr;
  u32 key = thread_key(tid);
  struct klock_task *t = klock_start.lookup(&key);
  int found = -1;
  u32 d = 0;
  if (t) {
    d = t->depth;
    if (d > LS_KNEST)
      d = LS_KNEST;
    u32 stale = kstack_stale(t, d, bpf_get_smp_processor_id(), 0);
    if (stale) {
      d = kstack_compact(t, d, stale);
      t->depth = d;
    }
    /* innermost open wait on this address */
#pragma unroll
    for (int i = LS_KNEST - 1; i >= 0; --i)
      if (found < 0 && (u32)i < d && t->f[i].addr == addr)
        found = i;
  }
  if (found < 0) {
    if (t && d == 0)
      klock_start.delete(&key);
    if (!filtered_out(pid, tid, addr))
      dq_count(LS_CNT_UNMATCHED_END);
    return PASS;
  }
  struct klock_frame *f = &t->f[found & (LS_KNEST - 1)];
  struct lockstat_key k = {};
  k.addr = addr;
  k.pid = pid;
  k.tid = tid;
  k.kind = LS_KIND_KERNEL;
  k.flags = f->flags;
  u64 delta = now - f->ts;
  /* waits opened above this one never ended: drop them */
  for (u32 j = found + 1; j < d && j < LS_KNEST; ++j)
    dq_count(LS_CNT_STALE_BEGIN);
  if (found == 0)
    klock_start.delete(&key);
  else
    t->depth = found;
  k.flags |= kernel_identity(addr);
  k.stack_id = LS_STACK_UNSAMPLED;
  struct kwalk_key wk = {.addr = addr, .pid = pid};
  u64 *last = kwalk_last.lookup(&wk);
  if (!last || now - *last >= LS_KWALK_INTERVAL_NS) {
    k.stack_id = bpfdiag_stack_id_in_lock(args, 0); /* the waiter holds the lock now */
    if (k.stack_id < 0 && k.stack_id != -14 /* -EFAULT: no stack to take */)
      dq_count(LS_CNT_LOST_KSTACK);
    kwalk_last.update(&wk, &now);
  }
  record(&k, delta, 1, 0);
  return PASS;
}
#endif /* KERNEL_LOCKS */
