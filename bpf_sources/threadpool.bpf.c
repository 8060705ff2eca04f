/* threadpool: scheduler-state accounting for the threads of a pool of processes (one
 * process, a PID list, or a parent and its children), plus request timing on their
 * accepted sockets. Raw tracepoints only (cheapest kind):
 *   sched_switch, sched_waking, sched_wakeup_new, sched_process_fork: thread states;
 *                        sched_waking runs in the waker's context, so it also says who
 *                        ended a wait (a pool peer, another thread, another process)
 *   sys_enter, sys_exit: syscall in progress (what a blocked thread waits in) and
 *                        accept -> first read -> response per {tgid, fd}
 *
 * The pool is the `pool` map (tgid -> TP_POOL_* flags), filled by user space before
 * anything is attached, so the compiled program is the same for every pool (the
 * compiled-object cache serves every run). A process forked by a pool process flagged
 * TP_POOL_CHILDREN joins it here, at fork (prefork servers replacing workers).
 * -D flags from the front-end:
 *   OFF_TASK_PID    task_struct.pid   (from kernel BTF)
 *   OFF_TASK_TGID   task_struct.tgid
 *   OFF_TASK_STATE  task_struct.__state (before 5.14: .state); read from prev
 *                   because sched_switch's prev_state argument exists only since 5.18
 *   OFF_TASK_SCHED_INFO ... (arrival.h's), when the kernel has them
 * The `threads` map is filled by user space with the pool's threads; new threads of
 * the pool's processes are added here at fork (user space then keeps or drops them). The
 * `gids` map (user space) holds each thread's group id, for the waker's class.
 * User space deletes an exited thread's entries here and in `gids`, `waits` and
 * `rqhist` after the report that covers its last interval (bounded maps under churn).
 * Map sizes: TP_MAX_* (threadpool_shared.h defaults, -D from --max-threads).
 */
#include <uapi/linux/ptrace.h>
#include "hist.h"
#include "threadpool_shared.h"
#define DQ_NCOUNTERS TP_NCOUNTERS
#include "common.h"
#include "arrival.h"
#ifdef UW_DWARF
#include "unwind.h"
#endif

BPFDIAG_HASH(threads, u32, struct tp_thread, TP_MAX_THREADS);
BPFDIAG_HASH(waits, struct tp_wait_key, struct tp_wait_val, TP_MAX_WAITS);
BPFDIAG_HASH(rqhist, struct tp_hist_key, u64, TP_MAX_HIST);
BPFDIAG_HASH_LAZY(conns, struct tp_conn_key, struct tp_conn, TP_MAX_CONNS);
BPFDIAG_HASH_LAZY(gids, u32, u32, TP_MAX_THREADS);
BPFDIAG_HASH_LAZY(pool, u32, u32, TP_MAX_PROCS);
BPF_PERF_OUTPUT(reqs);
#ifdef UW_DWARF
/* Wait sites: the waiter's user stack (uw_stacks hash, UW_HASH_LOST when not stored)
 * at the first futex wait call of each wait key (thread, op, word): unwound once per
 * key, not per wait. Inserted from sys_enter (task context). */
BPFDIAG_HASH_LAZY(sites, struct tp_wait_key, u64, TP_MAX_WAITS);
BPF_PERCPU_ARRAY(site_key, struct tp_wait_key, 1); /* sys_enter -> its unwinder */
#endif

#define TASK_RUNNING_STATE 0
#define TASK_DEAD_STATE 0x80

static inline u32 task_u32(void *task, u32 off) {
  u32 v = 0;
  bpf_probe_read_kernel(&v, sizeof(v), task + off);
  return v;
}

/* The pool flags of process `tgid`, NULL when it is not in the pool. */
static inline u32 *pool_flags(u32 tgid) { return pool.lookup(&tgid); }

static inline struct tp_wait_val *wait_of(u32 tid, struct tp_thread *t, int create) {
  struct tp_wait_key k = {};
  struct tp_wait_val zero = {};
  k.tid = tid;
  k.nr = t->w_nr;
  k.op = t->w_op;
  k.obj = t->w_obj;
  k.born = t->born;
  if (!create)
    return waits.lookup(&k);
  struct tp_wait_val *v = waits.lookup_or_try_init(&k, &zero);
  if (!v)
    dq_count(TP_C_WAITS_FULL);
  return v;
}

/* Adds to the wait the thread is in or was just woken from: `blk` blocked time (`first`:
 * a new block, counted), `rq` runnable time after the wake-up. */
static inline void add_wait(u32 tid, struct tp_thread *t, u64 blk, u64 rq, u32 wake_class, int first) {
  struct tp_wait_val *v = wait_of(tid, t, 1);
  u64 wake = wake_class; /* one register for the check and the index (the verifier) */
  if (!v || wake >= TP_NWAKE)
    return;
  if (blk)
    __sync_fetch_and_add(&v->blk_ns[wake], blk);
  if (first)
    __sync_fetch_and_add(&v->count, 1);
  if (rq)
    __sync_fetch_and_add(&v->wake_rq_ns[wake], rq);
}

static inline void count_dispatch(u32 tid, struct tp_thread *n, u64 d) {
  struct tp_hist_key hk = {};
  u64 zero = 0, *c;
  n->rq_ns += d;
  n->rq_count += 1;
  hk.tid = tid;
  hk.idx = hist_fine_index(d);
  c = rqhist.lookup_or_try_init(&hk, &zero);
  if (c)
    __sync_fetch_and_add(c, 1);
  else
    dq_count(TP_C_HIST_FULL);
}

/* Thread `tid` (`task`) got a CPU at `at`: its runnable (or, wake-up unseen, blocked)
 * time ends. The gap since its switch-out is split where the wake-up was seen; with the
 * scheduler's own times (arrival.h), where the scheduler queued it, so that the
 * runnable part is what schedstat's run_delay adds (a wake-up seen early or not at all
 * moves the split, not the total). */
static inline void switched_in(u32 tid, struct tp_thread *n, void *task, u64 at) {
  if (n->state == TP_ST_RUNNABLE || n->state == TP_ST_BLOCKED) {
    s64 gap = (s64)(at - n->ts) + n->carry;
    u64 g = gap > 0 ? (u64)gap : 0;
    /* a wait ends here: blocked since the switch-out (its wake-up unseen), or woken */
    int waited = n->state == TP_ST_BLOCKED || n->w_pending;
    /* woken: blocked until the wake-up, counted then */
    u64 prior = n->state == TP_ST_RUNNABLE && n->w_pending ? n->w_blk : 0;
    u64 rq = n->state == TP_ST_RUNNABLE ? g : 0;
#ifdef SCHED_TIMES_KNOWN
    if (waited && n->k_ok) {
      u64 d = task_delay_ns(task), k = d > n->k_delay ? d - n->k_delay : 0;
      rq = k < g + prior ? k : g + prior;
    }
#endif
    if (waited) {
      u32 wake = n->state == TP_ST_BLOCKED ? TP_W_UNSEEN : n->w_wake;
      s64 fix = (s64)(g + prior - rq) - (s64)prior; /* blocked time not counted yet */
      n->blk_ns += fix;
      n->w_blk = wake == TP_W_UNSEEN ? 0 : prior + fix;
      if (fix < 0) { /* taken back from the wait the wake-up added it to, if it did */
        struct tp_wait_val *v = wait_of(tid, n, 0);
        u64 w = wake; /* one register for the check and the index (the verifier) */
        if (v && w < TP_NWAKE)
          __sync_fetch_and_add(&v->blk_ns[w], fix);
        fix = 0;
      }
      add_wait(tid, n, fix, rq, wake, n->state == TP_ST_BLOCKED);
      n->w_rq = rq;
    }
    if (rq)
      count_dispatch(tid, n, rq);
    /* charged beyond the span and the gap after it: owed by the next gap */
    n->carry = gap < 0 ? gap : 0;
  } else {
    n->carry = 0;
  }
  n->w_pending = 0;
  n->state = TP_ST_RUNNING;
  n->ts = at;
}

RAW_TRACEPOINT_PROBE(sched_switch) {
  /* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next)
   * (5.18+ appends prev_state; older kernels refuse a program that reads that 4th argument,
   * so prev's state is read from task_struct instead) */
  u64 now = bpf_ktime_get_ns();
  u64 id = bpf_get_current_pid_tgid(); /* current == prev */
  u32 preempt = (u32)ctx->args[0];
  if (pool_flags(id >> 32)) {
    u32 tid = (u32)id;
    struct tp_thread *t = threads.lookup(&tid);
    if (t) {
      u32 prev_state = task_u32((void *)ctx->args[1], OFF_TASK_STATE);
      /* Running, but its switch-in was never seen: the task before it on this CPU ran
       * where no BPF program runs (arrival.h). With the scheduler's own times, the
       * CPU time charged since the last switch-out dates the arrival (however many
       * there were), and nothing is lost. Else end the wait at the arrival the
       * scheduler recorded, if that was the thread's only one since its last
       * switch-out; else the time since is lost, and counted. (Before the thread's
       * first switch-out its arrivals are unknown: nothing to compare.) */
      void *prev = (void *)ctx->args[1];
      int unseen = t->state == TP_ST_RUNNABLE || t->state == TP_ST_BLOCKED;
#ifdef SCHED_TIMES_KNOWN
      u64 exec = task_exec_ns(prev);
      u64 on = t->k_ok && exec > t->k_exec ? exec - t->k_exec : 0;
      if (unseen && t->k_ok) {
        /* ts moved past the arrival by a wake-up seen after it (the thread, already
         * running, was woken between setting its sleep state and calling schedule()) */
        switched_in(tid, t, prev, now - t->ts > on ? now - on : t->ts);
        dq_count(TP_C_RECOVERED);
        unseen = 0;
      }
#endif
#ifdef ARRIVAL_KNOWN
      struct arrival a = task_arrival(prev, now);
      if (unseen && t->arrivals) {
        if (a.ns && a.count == t->arrivals + 1) {
          switched_in(tid, t, prev, a.ns > t->ts ? a.ns : t->ts);
          dq_count(TP_C_RECOVERED);
        } else {
          dq_count(TP_C_DROPPED);
        }
      }
      t->arrivals = a.count;
#else
      if (unseen)
        dq_count(TP_C_DROPPED);
#endif
      if (t->state == TP_ST_RUNNING && now > t->ts) {
        u64 span = now - t->ts;
#ifdef SCHED_TIMES_KNOWN
        /* the CPU time the scheduler charged (what schedstat and top read); the rest of
         * the span, or what it charged beyond it, goes to the gap after it */
        if (t->k_ok) {
          if (on > 2 * span)
            on = 2 * span;
          t->carry += (s64)span - (s64)on;
          span = on;
        }
#endif
        t->on_ns += span;
      }
#ifdef SCHED_TIMES_KNOWN
      t->k_exec = exec;
      t->k_delay = task_delay_ns(prev);
      t->k_ok = 1;
#endif
      t->w_pending = 0;
      if (prev_state & TASK_DEAD_STATE) {
        t->state = TP_ST_DEAD;
      } else if (preempt || prev_state == TASK_RUNNING_STATE) {
        t->state = TP_ST_RUNNABLE;
      } else {
        t->state = TP_ST_BLOCKED;
        t->w_nr = t->sys_nr;
        if (t->sys_nr == TP_NR_FUTEX) {
          t->w_op = t->sys_arg1 & TP_FUTEX_CMD_MASK;
          t->w_obj = t->sys_arg0 & ~7ULL;
          if (t->w_op == TP_FUTEX_WAIT_BITSET) { /* a condition-style wait: hand-off candidate */
            t->cw_obj = t->w_obj;
            t->cw_op = t->w_op;
            t->cw_set = 1;
          }
        } else {
          t->w_op = 0;
          t->w_obj = 0;
        }
      }
      t->ts = now;
    }
  }

  void *next = (void *)ctx->args[2];
  if (!pool_flags(task_u32(next, OFF_TASK_TGID)))
    return 0;
  u32 ntid = task_u32(next, OFF_TASK_PID);
  struct tp_thread *n = threads.lookup(&ntid);
  if (n)
    switched_in(ntid, n, next, now);
  return 0;
}

/* Who is waking task `tid`: runs in the waker's context (sched_waking). A timer's
 * wake-up runs in an interrupt on whatever task was current; sys_exit then moves such
 * a wait to TP_W_TIMEOUT from the syscall's own result. The main thread is the pool
 * leader's (a group id with role TP_GID_MAIN; a leader's main thread outside every
 * group, e.g. left out by --threads, by its TID). */
static inline u32 waker_class(u32 tid) {
  u64 id = bpf_get_current_pid_tgid();
  u32 *f = pool_flags(id >> 32);
  if (!f || (u32)id == tid)
    return TP_W_OTHER;
  u32 wtid = (u32)id;
  u32 *a = gids.lookup(&wtid), *b = gids.lookup(&tid);
  if (a && b && *a == *b)
    return TP_W_PEER;
  if (a)
    return (*a & TP_GID_ROLE_MASK) == TP_GID_MAIN ? TP_W_MAIN : TP_W_PROC;
  return wtid == (u32)(id >> 32) && (*f & TP_POOL_LEADER) ? TP_W_MAIN : TP_W_PROC;
}

static inline int on_wakeup(void *p, int seen_waker) {
  u32 tid = task_u32(p, OFF_TASK_PID);
  struct tp_thread *t = threads.lookup(&tid);
  if (!t)
    return 0;
  u64 now = bpf_ktime_get_ns();
  if (t->state == TP_ST_BLOCKED) {
    u32 wake = seen_waker ? waker_class(tid) : TP_W_UNSEEN;
    u64 d = now > t->ts ? now - t->ts : 0;
    t->blk_ns += d;
    add_wait(tid, t, d, 0, wake, 1);
    t->w_wake = wake;
    t->w_blk = d;
    t->w_rq = 0;
    t->w_pending = 1;
    t->state = TP_ST_RUNNABLE;
    t->ts = now;
  } else if (t->state == TP_ST_UNKNOWN) {
    t->w_pending = 0;
    t->state = TP_ST_RUNNABLE;
    t->ts = now;
  }
  return 0;
}

RAW_TRACEPOINT_PROBE(sched_waking) { return on_wakeup((void *)ctx->args[0], 1); }
RAW_TRACEPOINT_PROBE(sched_wakeup_new) { return on_wakeup((void *)ctx->args[0], 0); }

RAW_TRACEPOINT_PROBE(sched_process_fork) {
  /* TP_PROTO(struct task_struct *parent, struct task_struct *child) */
  u32 ptgid = bpf_get_current_pid_tgid() >> 32;
  u32 *f = pool_flags(ptgid);
  if (!f)
    return 0;
  void *child = (void *)ctx->args[1];
  u32 ctgid = task_u32(child, OFF_TASK_TGID);
  if (ctgid != ptgid) { /* a child process: it joins when its parent's children do */
    if (!(*f & TP_POOL_CHILDREN))
      return 0;
    u32 nf = *f & ~TP_POOL_LEADER;
    if (pool.update(&ctgid, &nf)) {
      dq_count(TP_C_PROCS_FULL);
      return 0;
    }
  }
  u32 tid = task_u32(child, OFF_TASK_PID);
  struct tp_thread t = {};
  t.sys_nr = TP_NO_SYSCALL;
  t.w_nr = TP_NO_SYSCALL;
  t.state = TP_ST_UNKNOWN;
  t.ts = bpf_ktime_get_ns();
  /* a TID reused while the old thread's entry is still there (user space retires exited
   * threads after their last report) starts afresh, and is told apart by `born` */
  t.born = (u32)(t.ts >> 10) | 1;
  if (threads.update(&tid, &t))
    dq_count(TP_C_THREADS_FULL);
  return 0;
}

/* Thread `tid` takes a request on connection `c` (its first read): how long it was
 * blocked since its last response (0: the request was waiting for it), and the hand-off
 * credit of the condition-style wait it was woken from, if it had one since. */
static inline void request_taken(u32 tid, struct tp_thread *t, struct tp_conn *c) {
  if (!t) {
    c->gap_known = 0;
    return;
  }
  c->gap_known = t->resp_seen;
  c->gap_blk = t->blk_ns - t->blk_at_resp;
  if (t->cw_set) {
    struct tp_wait_key k = {};
    k.obj = t->cw_obj;
    k.tid = tid;
    k.nr = TP_NR_FUTEX;
    k.op = t->cw_op;
    k.born = t->born;
    struct tp_wait_val *v = waits.lookup(&k);
    if (v)
      __sync_fetch_and_add(&v->took, 1);
    t->cw_set = 0;
  }
}

static inline u64 reg_arg0(struct pt_regs *regs) {
  u64 v = 0;
  bpf_probe_read_kernel(&v, sizeof(v), &regs->di);
  return v;
}

static inline int is_read_nr(long nr) {
  return nr == TP_NR_READ || nr == TP_NR_READV || nr == TP_NR_RECVFROM || nr == TP_NR_RECVMSG ||
         nr == TP_NR_RECVMMSG;
}

static inline int is_write_nr(long nr) {
  return nr == TP_NR_WRITE || nr == TP_NR_WRITEV || nr == TP_NR_SENDTO || nr == TP_NR_SENDMSG ||
         nr == TP_NR_SENDMMSG || nr == TP_NR_SENDFILE;
}

/* The syscall reports that its wait ran out: a timed wait nobody ended early. */
static inline int is_timeout(long nr, long ret) {
  if (nr == TP_NR_FUTEX)
    return ret == -TP_ETIMEDOUT;
  return ret == 0 && (nr == TP_NR_POLL || nr == TP_NR_PPOLL || nr == TP_NR_SELECT ||
                      nr == TP_NR_PSELECT6 || nr == TP_NR_EPOLL_WAIT ||
                      nr == TP_NR_EPOLL_PWAIT || nr == TP_NR_EPOLL_PWAIT2);
}

/* Moves the last wake-up's blocked and runnable time to TP_W_TIMEOUT. */
static inline void to_timeout(u32 tid, struct tp_thread *t) {
  u32 from = t->w_wake;
  if (from >= TP_NWAKE || from == TP_W_TIMEOUT)
    return;
  struct tp_wait_val *v = wait_of(tid, t, 0);
  if (!v)
    return;
  __sync_fetch_and_add(&v->blk_ns[from], -t->w_blk);
  __sync_fetch_and_add(&v->blk_ns[TP_W_TIMEOUT], t->w_blk);
  if (t->w_rq) {
    __sync_fetch_and_add(&v->wake_rq_ns[from], -t->w_rq);
    __sync_fetch_and_add(&v->wake_rq_ns[TP_W_TIMEOUT], t->w_rq);
  }
  t->w_wake = TP_W_TIMEOUT;
}

RAW_TRACEPOINT_PROBE(sys_enter) {
  /* TP_PROTO(struct pt_regs *regs, long id) */
  u64 id = bpf_get_current_pid_tgid();
  if (!pool_flags(id >> 32))
    return 0;
  u32 tid = (u32)id;
  struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
  long nr = (long)ctx->args[1];

  struct tp_thread *t = threads.lookup(&tid);
  if (t) {
    t->sys_nr = (s32)nr;
    t->w_blk = 0; /* a new syscall: the last wake-up's outcome is settled */
    if (nr == TP_NR_FUTEX) { /* the wait object: futex word and op (si, di adjacent) */
      u64 si_di[2] = {};
      bpf_probe_read_kernel(si_di, sizeof(si_di), &regs->si);
      t->sys_arg0 = si_di[1];
      t->sys_arg1 = (u32)si_di[0];
#ifdef UW_DWARF
      u32 op = t->sys_arg1 & TP_FUTEX_CMD_MASK;
      if (op == TP_FUTEX_WAIT || op == TP_FUTEX_WAIT_BITSET || op == TP_FUTEX_LOCK_PI ||
          op == TP_FUTEX_WAIT_REQUEUE_PI || op == TP_FUTEX_LOCK_PI2) {
        struct tp_wait_key k = {};
        k.obj = t->sys_arg0 & ~7ULL;
        k.tid = tid;
        k.nr = TP_NR_FUTEX;
        k.op = op;
        k.born = t->born;
        if (!sites.lookup(&k)) { /* the first wait on this key: its site */
          u32 zero = 0;
          struct tp_wait_key *sk = site_key.lookup(&zero);
          if (sk) {
            *sk = k;
            uw_progs.call(ctx, UW_PROG_UNWIND); /* does not return when it runs */
          }
        }
      }
#endif
      return 0;
    }
  }

  if (nr != TP_NR_CLOSE && !is_read_nr(nr))
    return 0;
  u64 arg0 = reg_arg0(regs);
  struct tp_conn_key ck = {};
  ck.tgid = id >> 32;
  ck.fd = (u32)arg0;
  struct tp_conn *c = conns.lookup(&ck);
  if (!c)
    return 0;
  if (nr == TP_NR_CLOSE) {
    if (c->phase == TP_CONN_ACCEPTED)
      dq_count(TP_C_CLOSED_UNREAD);
    else if (c->phase == TP_CONN_READING)
      dq_count(TP_C_CLOSED_UNANSWERED);
    conns.delete(&ck);
    return 0;
  }
  if (c->phase == TP_CONN_ACCEPTED) { /* a worker takes the connection */
    c->read_ts = bpf_ktime_get_ns();
    c->reader = tid;
    c->phase = TP_CONN_READING;
    request_taken(tid, t, c);
  }
  return 0;
}

#ifdef UW_DWARF
/* The DWARF unwinder for wait sites, tail-called from sys_enter (a program of its own:
 * see unwind.h); current is the waiter entering its futex wait. */
int uw_threadpool_tail(struct bpf_raw_tracepoint_args *ctx) {
  u32 zero = 0;
  u64 id = bpf_get_current_pid_tgid();
  struct tp_wait_key *sk = site_key.lookup(&zero);
  if (!sk || sk->tid != (u32)id)
    return 0;
  struct tp_wait_key k = *sk;
  u64 h = uw_unwind_user(id >> 32);
  if (h)
    sites.update(&k, &h);
  return 0;
}
#endif

RAW_TRACEPOINT_PROBE(sys_exit) {
  /* TP_PROTO(struct pt_regs *regs, long ret) */
  u64 id = bpf_get_current_pid_tgid();
  if (!pool_flags(id >> 32))
    return 0;
  u32 tid = (u32)id;
  long ret = (long)ctx->args[1];
  long nr = -1;
  struct pt_regs *regs = (struct pt_regs *)ctx->args[0];
  struct tp_thread *t = threads.lookup(&tid);
  if (t) {
    nr = t->sys_nr; /* recorded at sys_enter */
    t->sys_nr = TP_NO_SYSCALL;
    if (t->w_blk && t->w_nr == nr && is_timeout(nr, ret))
      to_timeout(tid, t);
    t->w_blk = 0;
  }
  if (ret < 0)
    return 0;
  if (nr < 0)
    bpf_probe_read_kernel(&nr, sizeof(nr), &regs->orig_ax);
  int accept = nr == TP_NR_ACCEPT || nr == TP_NR_ACCEPT4;
  int rd = is_read_nr(nr), wr = is_write_nr(nr);
  if (!accept && !rd && !wr)
    return 0;

  struct tp_conn_key ck = {};
  ck.tgid = id >> 32;
  u64 now = bpf_ktime_get_ns();
  if (accept) {
    struct tp_conn nc = {};
    ck.fd = (u32)ret;
    nc.accept_ts = now;
    nc.phase = TP_CONN_ACCEPTED;
    if (conns.lookup(&ck))
      dq_count(TP_C_FD_REUSED);
    if (conns.update(&ck, &nc))
      dq_count(TP_C_CONNS_FULL);
    return 0;
  }
  if (ret == 0)
    return 0;
  ck.fd = (u32)reg_arg0(regs);
  struct tp_conn *c = conns.lookup(&ck);
  if (!c)
    return 0;
  if (rd) {
    if (c->phase == TP_CONN_RESPONDED) { /* next request on a kept-alive connection */
      c->accept_ts = 0;
      c->read_ts = now;
      c->reader = tid;
      c->phase = TP_CONN_READING;
      request_taken(tid, t, c);
    }
    return 0;
  }
  if (c->phase != TP_CONN_READING)
    return 0;
  struct tp_req_event e = {};
  e.accept_ts = c->accept_ts;
  e.read_ts = c->read_ts;
  e.resp_ts = now;
  e.fd = ck.fd;
  e.reader = c->reader;
  e.writer = tid;
  e.gap_known = c->gap_known;
  e.gap_blk = c->gap_blk;
  c->phase = TP_CONN_RESPONDED;
  if (t) { /* the next request this thread takes: was it waiting for it? */
    t->blk_at_resp = t->blk_ns;
    t->resp_seen = 1;
    t->cw_set = 0;
  }
  reqs.perf_submit(ctx, &e, sizeof(e));
  return 0;
}
