/* lockstat: lock waits in user space (futex syscalls or pthread uprobes) and in the
 * kernel (lock:contention_begin/end), aggregated in kernel maps.
 *
 * Selected with -D flags from the front-end:
 *   USER_FUTEX       futex waits: sys_enter/exit_futex (+ HAVE_FUTEX_WAIT, HAVE_FUTEX_WAITV)
 *   USER_PTHREAD     pthread_mutex_*lock uprobes (on_lock/on_lock_ret); futex entries
 *                    only mark the in-flight call as blocked
 *   KERNEL_LOCKS     lock:contention_begin/end
 *   TGID_OK(x), TID_OK(x)  -p / --tid filters as constant expressions (default: 1)
 *   FILTER_ADDRS     use the addr_filter map (ADDR_FILTER_ENTRIES: sized from -L)
 *   SELF_PID         lockstat's own PID, never traced
 *   MIN_WAIT_NS      waits shorter than this are counted in counters[LS_CNT_BELOW_MIN] only
 *   OFF_TASK_MM, OFF_MM_MMAP_LOCK, MMAP_LOCK_SIZE, OFF_TASK_SIGHAND, OFF_SIGHAND_SIGLOCK
 *                    (BTF offsets,
 *                    optional) name mmap_lock and siglock for kernel locks
 *   OFF_TASK_STACK, THREAD_SIZE  where the user registers are (top of the task's kernel
 *                    stack), to scan the user stack at futex waits (optional)
 *   STATS_ENTRIES, HIST_ENTRIES, STACK_ENTRIES, START_ENTRIES  map sizes
 *
 * The front-end drains stats/hist each interval (atomic lookup-and-delete per key),
 * and several threads can update one value: waits of kernel idle tasks and IRQ
 * context all carry tid 0. So the sums are updated with atomic adds.
 */
#include "filters.h"
#include <uapi/linux/ptrace.h>
#include <linux/sched.h>
#include "hist.h"
#include "lockstat_shared.h"

struct futex_start {
  u64 ts;
  u64 uaddr;
  s32 stack_id;
  u32 flags;
};

struct klock_key {
  u64 addr;
  u32 tid;
  u32 pad;
};

struct klock_start {
  u64 ts;
  s32 stack_id;
  u32 flags;
};

struct plock_start {
  u64 ts;
  u64 mutex;
  u64 caller; /* return address of the lock call */
  u32 blocked;
  u32 pad;
};

BPF_HASH(stats, struct lockstat_key, struct lockstat_val, STATS_ENTRIES);
BPF_HASH(hist, struct lockstat_hkey, u64, HIST_ENTRIES);
BPF_HASH(comms, u32, struct lockstat_comm, 65536);
BPF_STACK_TRACE(stacks, STACK_ENTRIES);
BPF_ARRAY(counters, u64, LS_CNT_MAX);
#ifdef FILTER_ADDRS
BPF_HASH(addr_filter, u64, u8, ADDR_FILTER_ENTRIES);
#endif

static inline void count(u32 slot) {
  u64 *v = counters.lookup(&slot);
  if (v)
    __sync_fetch_and_add(v, 1);
}

static inline int filtered_out(u32 pid, u32 tid, u64 addr) {
  if (pid == SELF_PID)
    return 1;
  if (!TGID_OK(pid) || !TID_OK(tid))
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
    count(LS_CNT_MAP_FULL);
}

/* Adds one wait of `delta` ns (blocked: did it wait in the kernel) to the maps. */
static inline void record(struct lockstat_key *k, u64 delta, u32 blocked) {
  if (delta < MIN_WAIT_NS) {
    count(LS_CNT_BELOW_MIN);
    return;
  }
  struct lockstat_val zero = {};
  struct lockstat_val *v = stats.lookup_or_try_init(k, &zero);
  if (!v) {
    count(LS_CNT_MAP_FULL);
    return;
  }
  /* atomic: tid 0 (idle tasks of every CPU, IRQ context) shares one key */
  __sync_fetch_and_add(&v->count, 1);
  __sync_fetch_and_add(&v->total_ns, delta);
  if (blocked)
    __sync_fetch_and_add(&v->blocked, blocked);
  /* a racing larger max can be overwritten by a smaller one only when two CPUs
   * finish waits on the same key at the same instant; the sums stay exact */
  if (delta > v->max_ns)
    v->max_ns = delta;

  struct lockstat_hkey hk = {};
  hk.addr = k->addr;
  hk.pid = k->pid;
  hk.tid = k->tid;
  hk.kind = k->kind;
  hk.bucket = hist_fine_index(delta);
  u64 one = 0, *h = hist.lookup_or_try_init(&hk, &one);
  if (h)
    __sync_fetch_and_add(h, 1);
  else
    count(LS_CNT_MAP_FULL);
  remember_comm(k->tid);
}

/* ---- user space: futex waits ---------------------------------------------------- */
#if defined(USER_FUTEX) || defined(USER_PTHREAD)
BPF_HASH(futex_start, u32, struct futex_start, START_ENTRIES);
#endif
#ifdef USER_PTHREAD
BPF_HASH(plock_start, u32, struct plock_start, START_ENTRIES);
#endif

#if defined(USER_FUTEX) && defined(OFF_TASK_STACK) && defined(THREAD_SIZE)
BPF_HASH(scans, s32, struct lockstat_scan, STACK_ENTRIES);

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
    count(LS_CNT_SCAN_FAILED);
    return;
  }
  struct lockstat_scan sc = {};
  if (bpf_probe_read_user(&sc.words, sizeof(sc.words), (void *)sp) == 0)
    if (scans.update(&stack_id, &sc))
      count(LS_CNT_MAP_FULL);
}
#define SCAN_USER_STACK(id, nr) scan_user_stack(id, nr)
#else
#define SCAN_USER_STACK(id, nr)
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
  return 0;
#else
  if (filtered_out(pid, tid, uaddr))
    return 0;
  struct futex_start s = {};
  s.ts = bpf_ktime_get_ns();
  s.uaddr = uaddr;
  s.flags = flags;
  s.stack_id = stacks.get_stackid(ctx, BPF_F_USER_STACK);
  if (s.stack_id < 0 && s.stack_id != -14 /* -EFAULT: no stack to take */)
    count(LS_CNT_LOST_USTACK);
  SCAN_USER_STACK(s.stack_id, nr);
  if (futex_start.update(&tid, &s))
    count(LS_CNT_MAP_FULL);
  return 0;
#endif
}

static inline int futex_end(void) {
#ifdef USER_FUTEX
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id;
  struct futex_start *s = futex_start.lookup(&tid);
  if (!s)
    return 0; /* a wake, a non-waiting op, or a wait that began before tracing */
  u64 delta = bpf_ktime_get_ns() - s->ts;
  struct lockstat_key k = {};
  k.addr = s->uaddr;
  k.pid = id >> 32;
  k.tid = tid;
  k.stack_id = s->stack_id;
  k.kind = LS_KIND_FUTEX;
  k.flags = s->flags;
  futex_start.delete(&tid);
  record(&k, delta, 1);
#endif
  return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_futex) {
  u32 flags;
  switch (args->op & 127) { /* FUTEX_CMD_MASK */
  case 0:                    /* FUTEX_WAIT */
    flags = args->val == 2 ? LS_FUTEX_LOCKWORD : 0;
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
    return 0;
  }
  return futex_begin(args, (u64)args->uaddr, flags, args->__syscall_nr);
}

TRACEPOINT_PROBE(syscalls, sys_exit_futex) {
  return futex_end();
}

#ifdef HAVE_FUTEX_WAIT
TRACEPOINT_PROBE(syscalls, sys_enter_futex_wait) {
  return futex_begin(args, (u64)args->uaddr, LS_FUTEX_WAIT2, args->__syscall_nr);
}
TRACEPOINT_PROBE(syscalls, sys_exit_futex_wait) {
  return futex_end();
}
#endif

#ifdef HAVE_FUTEX_WAITV
TRACEPOINT_PROBE(syscalls, sys_enter_futex_waitv) {
  u64 uaddr = 0; /* struct futex_waitv { u64 val; u64 uaddr; u32 flags; u32 rsvd; } */
  bpf_probe_read_user(&uaddr, sizeof(uaddr), (void *)args->waiters + 8);
  return futex_begin(args, uaddr, LS_FUTEX_WAITV, args->__syscall_nr);
}
TRACEPOINT_PROBE(syscalls, sys_exit_futex_waitv) {
  return futex_end();
}
#endif
#endif /* USER_FUTEX || USER_PTHREAD */

/* ---- user space: exact pthread mode (uprobes) -------------------------------------- */
#ifdef USER_PTHREAD
/* At the probe point the stack pointer still points at the return address (the
 * front-end only moves the probe past instructions that leave %rsp alone). */
int on_lock(struct pt_regs *ctx) {
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
  u64 mutex = PT_REGS_PARM1(ctx);
  if (filtered_out(pid, tid, mutex))
    return 0;
  struct plock_start s = {};
  s.mutex = mutex;
  bpf_probe_read_user(&s.caller, sizeof(s.caller), (void *)PT_REGS_SP(ctx));
  s.ts = bpf_ktime_get_ns();
  if (plock_start.update(&tid, &s))
    count(LS_CNT_MAP_FULL);
  return 0;
}

int on_lock_ret(struct pt_regs *ctx) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  u32 tid = (u32)id;
  struct plock_start *s = plock_start.lookup(&tid);
  if (!s)
    return 0;
  struct lockstat_key k = {};
  k.addr = s->mutex;
  k.caller = s->caller;
  k.pid = id >> 32;
  k.tid = tid;
  k.kind = LS_KIND_PTHREAD;
  u32 blocked = s->blocked;
  u64 delta = now - s->ts;
  plock_start.delete(&tid);
  /* The stack is taken here, on return, and only for calls that blocked: walking it
   * costs ~1.6 us, more than the rest of the probe, and uncontended calls are already
   * placed by their caller. On return %rip is in the caller and %rbp its frame, so
   * the frame-pointer walk starts at the exact call site. */
  k.stack_id = -1;
  if (blocked) {
    k.stack_id = stacks.get_stackid(ctx, BPF_F_USER_STACK);
    if (k.stack_id < 0 && k.stack_id != -14)
      count(LS_CNT_LOST_USTACK);
  }
  record(&k, delta, blocked);
  return 0;
}
#endif

/* ---- kernel locks ------------------------------------------------------------------ */
#ifdef KERNEL_LOCKS
BPF_HASH(klock_start, struct klock_key, struct klock_start, START_ENTRIES);

static inline u32 thread_key(u32 tid) {
  /* idle tasks all have tid 0: keep CPUs apart */
  return tid ? tid : 0x80000000u | bpf_get_smp_processor_id();
}

TRACEPOINT_PROBE(lock, contention_begin) {
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
  u64 addr = (u64)args->lock_addr;
  if (filtered_out(pid, tid, addr))
    return 0;
  struct klock_key kk = {};
  kk.addr = addr;
  kk.tid = thread_key(tid);
  struct klock_start *old = klock_start.lookup(&kk);
  if (old) { /* e.g. a mutex that spun, then sleeps: one wait, first timestamp */
    old->flags |= args->flags;
    return 0;
  }
  struct klock_start s = {};
  s.flags = args->flags;
#if defined(OFF_TASK_MM) && defined(OFF_MM_MMAP_LOCK)
  {
    void *task = (void *)bpf_get_current_task();
    u64 mm = 0;
    bpf_probe_read_kernel(&mm, sizeof(mm), task + OFF_TASK_MM);
    u64 lo = mm + OFF_MM_MMAP_LOCK;
    if (mm && addr >= lo && addr - lo < MMAP_LOCK_SIZE) /* the rwsem or a lock inside it */
      s.flags |= LS_KID_MMAP_LOCK | ((u32)(addr - lo) << LS_KID_OFFSET_SHIFT);
  }
#endif
#if defined(OFF_TASK_SIGHAND) && defined(OFF_SIGHAND_SIGLOCK)
  {
    void *task = (void *)bpf_get_current_task();
    u64 sh = 0;
    bpf_probe_read_kernel(&sh, sizeof(sh), task + OFF_TASK_SIGHAND);
    if (sh && addr == sh + OFF_SIGHAND_SIGLOCK)
      s.flags |= LS_KID_SIGLOCK;
  }
#endif
  s.stack_id = stacks.get_stackid(args, 0);
  if (s.stack_id < 0 && s.stack_id != -14 /* -EFAULT: no stack to take */)
    count(LS_CNT_LOST_KSTACK);
  s.ts = bpf_ktime_get_ns();
  if (klock_start.update(&kk, &s))
    count(LS_CNT_MAP_FULL);
  return 0;
}

TRACEPOINT_PROBE(lock, contention_end) {
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid();
  u32 pid = id >> 32, tid = (u32)id;
  u64 addr = (u64)args->lock_addr;
  struct klock_key kk = {};
  kk.addr = addr;
  kk.tid = thread_key(tid);
  struct klock_start *s = klock_start.lookup(&kk);
  if (!s) {
    if (!filtered_out(pid, tid, addr))
      count(LS_CNT_UNMATCHED_END);
    return 0;
  }
  struct lockstat_key k = {};
  k.addr = addr;
  k.pid = pid;
  k.tid = tid;
  k.stack_id = s->stack_id;
  k.kind = LS_KIND_KERNEL;
  k.flags = s->flags;
  u64 delta = now - s->ts;
  klock_start.delete(&kk);
  record(&k, delta, 1);
  return 0;
}
#endif /* KERNEL_LOCKS */
