/* Shared between threadpool.bpf.c and the threadpool front-end (plain C).
 *
 * Per-thread state accounting lives in BPF maps (no per-event output): each pool
 * thread has a tp_thread entry with its current scheduler state, when it began and
 * cumulative on-CPU / runnable / blocked times. Blocked time is further split by the
 * wait it was in (syscall number, futex command, futex word) in the `waits` map.
 * Requests on accepted sockets are tracked per {tgid, fd} and reported through a
 * perf buffer, one event per response.
 */
#ifndef BPFDIAG_THREADPOOL_SHARED_H
#define BPFDIAG_THREADPOOL_SHARED_H

/* map sizes: the front-end passes -D values sized from the target (--max-threads) */
#ifndef TP_MAX_THREADS
#define TP_MAX_THREADS 4096
#endif
#ifndef TP_MAX_WAITS
#define TP_MAX_WAITS 65536
#endif
#ifndef TP_MAX_HIST
#define TP_MAX_HIST 65536
#endif
#ifndef TP_MAX_CONNS
#define TP_MAX_CONNS 65536
#endif
#ifndef TP_MAX_PROCS
#define TP_MAX_PROCS 4096 /* the pool's processes (the -p limit; children join) */
#endif

/* `pool` map values: what a pool process is */
#define TP_POOL_CHILDREN 1 /* the processes it forks join the pool */
#define TP_POOL_LEADER 2   /* its main thread is the pool's main thread (the one whose
                              wake-ups are TP_W_MAIN: a master, a submitter) */

/* `gids` values: group id * 4 + role; role TP_GID_MAIN marks the pool's main thread */
#define TP_GID_ROLE_MASK 3
#define TP_GID_MAIN 1

/* Who ended a wait (what it was, not which syscall): the thread that woke the waiter
 * (sched_waking runs in the waker's context) relative to the waiter's group, or the
 * wait's own timeout (futex -ETIMEDOUT, poll/epoll/select returning 0). The group ids
 * come from user space (`gids` map); threads without one are outside every pool. */
#define TP_W_PEER 0    /* a thread of the waiter's own group (a peer releasing a lock) */
#define TP_W_PROC 1    /* another thread of the pool's processes (a producer outside the pool) */
#define TP_W_OTHER 2   /* another process, a kernel thread or interrupt (I/O, signals) */
#define TP_W_TIMEOUT 3 /* the wait timed out: nobody ended it early */
#define TP_W_UNSEEN 4  /* the wake-up was not seen (or the wait is still in progress) */
#define TP_W_MAIN 5    /* the pool's main thread (its leader process's, TID == PID), when not
                          the waiter's peer */
#define TP_NWAKE 6

#define TP_ETIMEDOUT 110

/* thread states */
#define TP_ST_UNKNOWN 0  /* not seen yet */
#define TP_ST_RUNNING 1  /* on a CPU */
#define TP_ST_RUNNABLE 2 /* woken or preempted, waiting for a CPU */
#define TP_ST_BLOCKED 3  /* sleeping (in w_nr) */
#define TP_ST_DEAD 4

#define TP_NO_SYSCALL (-1)

/* x86_64 syscall numbers the BPF side needs (request tracking, futex words) */
#define TP_NR_READ 0
#define TP_NR_WRITE 1
#define TP_NR_CLOSE 3
#define TP_NR_READV 19
#define TP_NR_WRITEV 20
#define TP_NR_SENDFILE 40
#define TP_NR_ACCEPT 43
#define TP_NR_SENDTO 44
#define TP_NR_RECVFROM 45
#define TP_NR_SENDMSG 46
#define TP_NR_RECVMSG 47
#define TP_NR_POLL 7
#define TP_NR_SELECT 23
#define TP_NR_FUTEX 202
#define TP_NR_EPOLL_WAIT 232
#define TP_NR_PSELECT6 270
#define TP_NR_PPOLL 271
#define TP_NR_EPOLL_PWAIT 281
#define TP_NR_EPOLL_PWAIT2 441
#define TP_NR_ACCEPT4 288
#define TP_NR_RECVMMSG 299
#define TP_NR_SENDMMSG 307

#define TP_FUTEX_CMD_MASK 127
/* futex commands that wait (their sites are unwound once per wait key) */
#define TP_FUTEX_WAIT 0
#define TP_FUTEX_LOCK_PI 6
#define TP_FUTEX_WAIT_BITSET 9
#define TP_FUTEX_WAIT_REQUEUE_PI 11
#define TP_FUTEX_LOCK_PI2 13

struct tp_thread {
  __u64 ts;       /* CLOCK_MONOTONIC ns when the current state began */
  __u64 on_ns;    /* cumulative time on CPU */
  __u64 rq_ns;    /* cumulative time runnable (dispatch latency) */
  __u64 blk_ns;   /* cumulative time blocked */
  __u64 rq_count; /* completed runnable periods */
  __u64 w_obj;    /* wait object of the current/last block: futex word & ~7, else 0 */
  __u64 sys_arg0; /* first argument of the syscall in progress */
  __s32 sys_nr;   /* syscall in progress, TP_NO_SYSCALL if none */
  __u32 sys_arg1; /* second argument (futex op) */
  __s32 w_nr;     /* syscall of the current/last block */
  __u32 w_op;     /* futex command (op & 127) of the current/last block */
  __u32 state;    /* TP_ST_* */
  __u32 w_pending; /* 1: runnable after a wakeup from the recorded block */
  __u32 w_wake;    /* TP_W_* of the last wake-up from the recorded block */
  __u32 born;      /* which thread holds this TID: set at fork (never 0), 0 when user space
                      added the entry from /proc; a TID reused by a new thread gets a new
                      value, and its waits (tp_wait_key.born) are not the old thread's */
  __u64 w_blk;     /* blocked time of the last wake-up, moved to TP_W_TIMEOUT if the
                      syscall then reports a timeout; 0 once the syscall returned */
  __u64 w_rq;      /* runnable time after that wake-up (same) */
  __u64 arrivals;  /* the thread's arrivals on a CPU at its last switch-out (arrival.h) */
  /* With the scheduler's own times (arrival.h SCHED_TIMES_KNOWN), at the last switch-out: */
  __u64 k_exec;    /* se.sum_exec_runtime */
  __u64 k_delay;   /* sched_info.run_delay */
  __s64 carry;     /* wall time of the last on-CPU span the scheduler did not charge to the
                      thread (negative: charged beyond the span), added to the gap after it */
  __u32 k_ok;      /* 1: k_exec and k_delay are set */
  __u32 pad;
  /* Hand-off: the last condition-style futex wait (FUTEX_WAIT_BITSET) since the thread's
   * last response, credited (tp_wait_val.took) when the thread then takes a request */
  __u64 cw_obj;
  __u32 cw_op;
  __u32 cw_set;
  __u64 blk_at_resp; /* blk_ns at the thread's last response */
  __u32 resp_seen;   /* 1: blk_at_resp is set */
  __u32 pad2;
};

struct tp_wait_key {
  __u64 obj;
  __u32 tid;
  __s32 nr;
  __u32 op;
  __u32 born; /* tp_thread.born of the thread that waited */
};

struct tp_wait_val {
  __u64 blk_ns[TP_NWAKE];     /* time blocked in this wait, by who ended it */
  __u64 wake_rq_ns[TP_NWAKE]; /* time runnable right after being woken from it */
  __u64 count;                /* blocks */
  __u64 took;                 /* requests the thread took right after this wait (hand-off) */
};

struct tp_hist_key {
  __u32 tid;
  __u32 idx; /* hist_fine_index(dispatch latency ns) */
};

struct tp_conn_key {
  __u32 tgid;
  __u32 fd;
};

#define TP_CONN_ACCEPTED 1  /* accepted, not yet read by anyone (queued) */
#define TP_CONN_READING 2   /* a request is being served */
#define TP_CONN_RESPONDED 3 /* response sent; a later read starts a new request */

struct tp_conn {
  __u64 accept_ts;
  __u64 read_ts;
  __u32 reader;
  __u32 phase;
  __u64 gap_blk;  /* the reader's blocked time between its last response and this read */
  __u32 gap_known; /* 1: the reader had responded before (gap_blk is set) */
  __u32 pad;
};

/* one completed request (first response write after a read) */
struct tp_req_event {
  __u64 accept_ts; /* 0 for later requests on a kept-alive connection */
  __u64 read_ts;   /* first read by a worker */
  __u64 resp_ts;   /* response write returned */
  __u32 fd;
  __u32 reader;    /* tid that read first */
  __u32 writer;    /* tid that wrote the response */
  __u32 gap_known; /* 1: gap_blk is set (the reader had answered a request before) */
  __u64 gap_blk;   /* the reader's blocked time between its previous response and this read:
                      0 when it took the request without waiting (work was queued) */
};

/* data-quality counters (bpf_sources/common.h dq_counters), mapped to data_quality
 * keys by the front-end's counter table */
#define TP_C_THREADS_FULL 0
#define TP_C_WAITS_FULL 1
#define TP_C_HIST_FULL 2
#define TP_C_CONNS_FULL 3
#define TP_C_CLOSED_UNREAD 4     /* accepted, closed before any read */
#define TP_C_CLOSED_UNANSWERED 5 /* read, closed before a response */
#define TP_C_FD_REUSED 6         /* accept returned an fd still tracked */
#define TP_C_DROPPED 7           /* a switch-out of a thread whose switch-in was never
                                    seen, its arrival unknown: time since lost */
#define TP_C_RECOVERED 8         /* the same, ended at the arrival the scheduler
                                    recorded (bpf_sources/arrival.h): nothing lost */
#define TP_C_PROCS_FULL 9         /* a forked child could not join (pool map full) */
#define TP_NCOUNTERS 10

#endif
