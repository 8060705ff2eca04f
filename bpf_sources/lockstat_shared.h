/* Shared between lockstat.bpf.c and the lockstat front-end (plain C). */
#ifndef BPFDIAG_LOCKSTAT_SHARED_H
#define BPFDIAG_LOCKSTAT_SHARED_H

/* lockstat_key.kind */
#define LS_KIND_FUTEX 1   /* user-space futex wait (sys_enter/exit_futex*) */
#define LS_KIND_KERNEL 2  /* kernel lock (lock:contention_begin/end) */
#define LS_KIND_PTHREAD 3 /* pthread_mutex_*lock call (uprobes) */
#define LS_KIND_DECLARED 4 /* a wait the software declares with USDT probes (futex mode) */
#define LS_KIND_JAVA 5     /* a futex wait of a Java thread for a Java object (futex mode;
                            * jvm.h): addr is the object (an ObjectMonitor * or the park
                            * blocker), caller its class (a Klass *), jvm_kind what for */
#define LS_KIND_GO 6       /* a goroutine parked by the Go runtime (GO_WAITS; common/go_runtime.h):
                            * addr is gopark's lock argument | waitReason << LS_GO_REASON_SHIFT,
                            * flags the waitReason, caller gopark's caller (a return address) */
#define LS_GO_REASON_SHIFT 56
/* lockstat_key.tid of a goroutine's wait: its g's address bits, top bit set */
#define LS_GO_WAITER(g) (0x80000000u | (__u32)((g) >> 3))

/* lockstat_key.flags for LS_KIND_FUTEX: what kind of futex wait it was */
#define LS_FUTEX_LOCKWORD 0x1 /* FUTEX_WAIT with val 2: glibc's lll_lock convention (mutex) */
#define LS_FUTEX_BITSET 0x2   /* FUTEX_WAIT_BITSET (condvars, rwlocks, ...) */
#define LS_FUTEX_PI 0x4       /* FUTEX_LOCK_PI / LOCK_PI2 (PI mutex) */
#define LS_FUTEX_REQUEUE 0x8  /* FUTEX_WAIT_REQUEUE_PI */
#define LS_FUTEX_WAIT2 0x10   /* futex_wait() (futex2) */
#define LS_FUTEX_WAITV 0x20   /* futex_waitv(): keyed by the first futex */
#define LS_FUTEX_PLAIN 0x40   /* FUTEX_WAIT with val != 2 (custom locks, e.g. InnoDB's) */
#define LS_FUTEX_TIMED 0x80   /* the wait had a timeout argument */
/* futex_start.flags of a declared wait in flight (its futex waits are part of it);
 * bits 24-31: declared waits nested inside it (begun and not yet done) */
#define LS_FUTEX_DECLARED 0x100
#define LS_DECL_INNER 0x200 /* begun inside another declared wait (saved in decl_outer) */
#define LS_DECL_DEPTH_ONE 0x1000000u


/* lockstat_key.flags for LS_KIND_KERNEL: contention_begin flags (kernel's LCB_F_*),
 * OR-ed over the begins of one wait, plus identities found from the waiter's task */
#define LS_LCB_SPIN 0x1
#define LS_LCB_READ 0x2
#define LS_LCB_WRITE 0x4
#define LS_LCB_RT 0x8
#define LS_LCB_PERCPU 0x10
#define LS_LCB_MUTEX 0x20
#define LS_KID_MMAP_LOCK 0x10000 /* lock_addr inside current->mm->mmap_lock (offset below) */
#define LS_KID_SIGLOCK 0x20000   /* lock_addr == &current->sighand->siglock */
#define LS_KID_OFFSET_SHIFT 20   /* bits 20-31: byte offset inside mmap_lock (its wait_lock) */

/* A kernel wait that spins (spinlock, rwlock; a mutex's optimistic spin is part of the
 * mutex wait). Spinning and sleeping waits at one address are different locks to the
 * report: struct semaphore's own spinlock sits at the semaphore's address and is taken
 * inside its waits (merged, the semaphore's sleeps became "spinlock" waits of seconds). */
static inline int ls_kernel_spins(__u32 flags) {
  return (flags & LS_LCB_SPIN) && !(flags & LS_LCB_MUTEX);
}

/* dq_counters slots (bpf_sources/common.h), mapped to data_quality keys in run.cpp */
#define LS_CNT_LOST_USTACK 0
#define LS_CNT_LOST_KSTACK 1
#define LS_CNT_MAP_FULL 2
#define LS_CNT_UNMATCHED_END 3
#define LS_CNT_BELOW_MIN 4
#define LS_CNT_SCAN_FAILED 5 /* user registers not found where expected */
#define LS_CNT_STALE_BEGIN 6 /* kernel begin whose end was never seen (replaced/dropped) */
#define LS_CNT_NEST_OVERFLOW 7 /* kernel waits nested deeper than LS_KNEST */
#define LS_CNT_OVERFLOW_STACKS 8 /* stacks kept in the overflow map (stacks.h) */
#define LS_CNT_MAX 9

/* lockstat_key.stack_id of a kernel wait whose stack was not taken: stacks are sampled
 * (lockstat.bpf.c "Kernel stacks"); not an errno, never counted as lost */
#define LS_STACK_UNSAMPLED (-65536)

/* kernel waits in flight per task: a spinlock inside a sleeping lock's slow path,
 * an interrupt contending while the task spins */
#define LS_KNEST 4

struct lockstat_key {
  __u64 addr;     /* futex uaddr, kernel lock address or pthread_mutex_t * */
  __u64 caller;   /* return address of the lock call (uprobes), else 0 */
  __u32 pid;      /* tgid of the waiter */
  __u32 tid;      /* waiting thread */
  __s32 stack_id; /* user (futex/pthread) or kernel stack; < 0: none (see counters) */
  __u32 kind;     /* LS_KIND_* */
  __u32 flags;    /* LS_FUTEX_* or LS_LCB_* | LS_KID_* */
  __u32 jvm_kind; /* LS_KIND_JAVA: JVM_WAIT_* (jvm_shared.h) */
  __u64 user_hash; /* --unwind=dwarf: the waiter's user stack in uw_stacks (unwind.h);
                    * stack_id is then -1. 0: none taken */
};

struct lockstat_val {
  __u64 count;     /* waits (futex/kernel) or lock calls (pthread) */
  __u64 total_ns;
  __u64 max_ns;
  __u64 blocked;   /* pthread: calls that waited in the kernel; else == count */
  __u64 timedout;  /* futex: waits that ended with ETIMEDOUT (nobody woke them) */
};

/* Futex mode: who woke the waiters of a lock (sched_waking's current task while the
 * waiter was in a futex wait that then returned 0). */
struct lockstat_wkey {
  __u64 addr;
  __u32 pid;   /* the waiters' process */
  __u32 waker; /* waking thread; 0: interrupt/idle context */
};

/* Per-lock fine histogram of wait times (bucket: hist_fine_index()); per thread too
 * (tid) only with --per-thread (HIST_PER_THREAD), else tid is 0. */
struct lockstat_hkey {
  __u64 addr;
  __u32 pid;
  __u32 tid;
  __u32 kind;
  __u32 bucket;
  __u32 spin; /* kernel: ls_kernel_spins(flags) of the wait */
  __u32 pad;
};

/* Futex mode: the first words of the user stack at the first wait seen with a given
 * stack id. Frame-pointer walks skip the frame that called the lock function when
 * the C library has no frame pointers; the front-end finds that caller's return
 * address among these words (the first one that is code outside the C library). */
#define LS_SCAN_WORDS 48
struct lockstat_scan {
  __u64 words[LS_SCAN_WORDS];
};

struct lockstat_comm {
  char comm[16];
};

/* Waits in flight, per thread (maps futex_start, klock_start, plock_start, keyed by
 * tid). Shared so the front-end can keep their stacks when it clears the stack table
 * after a report, and forget the entries of threads that exited mid-wait. */
struct futex_start {
  __u64 ts;
  __u64 uaddr;
  __s32 stack_id;
  __u32 flags;
  __u32 waker; /* set by sched_waking: 0 none yet, else tid or 0x80000000|cpu */
  __u32 jvm_kind; /* a Java thread waiting for a Java object: JVM_WAIT_* (jvm.h) */
  __u64 user_hash; /* UW_DWARF: set by uw_lockstat_futex_tail */
  __u64 sp;        /* a declared wait: the user stack pointer at its begin */
  __u64 jvm_obj;   /* jvm_kind: the object (ObjectMonitor * or park blocker) */
  __u64 jvm_klass; /* jvm_kind: its class (Klass *) */
};

/* One kernel wait in flight. `flags` are OR-ed over the begins of the wait, `last`
 * is the latest begin's flags (a mutex begins again after each sleep). */
struct klock_frame {
  __u64 addr;
  __u64 ts;
  __s32 stack_id;
  __u32 flags;
  __u32 last;
  __u32 cpu; /* where the wait began */
};

/* The kernel waits a task has in flight, innermost last. */
struct klock_task {
  __u32 depth;
  __u32 pad;
  struct klock_frame f[LS_KNEST];
};

struct plock_start {
  __u64 ts;
  __u64 mutex;
  __u64 caller; /* return address of the lock call */
  __u32 blocked;
  __u32 pad;
};

/* A parked goroutine (GO_WAITS), keyed by its g and process (Go's heap addresses are
 * the same in every process of a static binary). */
struct go_key {
  __u64 g;
  __u32 pid;
  __u32 pad;
};
struct go_start {
  __u64 ts;
  __u64 lock;     /* gopark's lock argument (RBX): &chan.lock, the semaRoot, ... */
  __u64 caller;   /* gopark's return address ([rsp] at the park point) */
  __s32 stack_id; /* user stack at the park point (frame pointers) */
  __u32 reason;   /* waitReason (CL) */
};

#endif
