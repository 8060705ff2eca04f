/* When the current task was last switched in, from the scheduler's own bookkeeping:
 * for a sched_switch handler that finds a task switching out whose switch-in it never
 * saw.
 *
 * Why: a sched_switch event runs in the context of the task switching out (prev), and
 * some kernels deliver no BPF event in the context of some tasks. Measured on this
 * suite's Firecracker targets (kernel 6.18): no BPF program ever runs in the context of
 * PID 1's threads (process_api: tokio-rt-worker, vsock-console, ...; bpftrace counted
 * 435 switches into them in 5 s and none out, and none of their syscalls), so the task
 * each of them switches to is never seen as `next`. Its next switch-out still is.
 *
 * __schedule() records each arrival in task_struct.sched_info (CONFIG_SCHED_INFO):
 * last_arrival (the run queue's clock then) and pcount (arrivals so far). At a
 * switch-out, rq->clock was updated moments ago by the same __schedule(), so
 * now - (rq->clock - last_arrival) is the arrival on bpf_ktime_get_ns()'s clock.
 *
 * -D flags from common/btf (add_arrival_offsets): OFF_TASK_SCHED_INFO, OFF_SI_LAST_ARRIVAL,
 * OFF_SI_PCOUNT, OFF_TASK_SE, OFF_SE_CFS_RQ, OFF_CFS_RQ_RQ, OFF_RQ_CLOCK (and, for
 * SCHED_TIMES_KNOWN below, OFF_SE_SUM_EXEC, OFF_SI_RUN_DELAY, OFF_SI_LAST_QUEUED). Without them
 * (a kernel without CONFIG_SCHED_INFO or CONFIG_FAIR_GROUP_SCHED) ARRIVAL_KNOWN is not
 * defined and the callers count such periods as dropped. task_rq() and rq_stamp_ns()
 * (RQ_CLOCK_KNOWN) need only the last four: runqlen dates an idle period with them.
 */
#ifndef BPFDIAG_ARRIVAL_H
#define BPFDIAG_ARRIVAL_H

#if defined(OFF_TASK_SE) && defined(OFF_SE_CFS_RQ) && defined(OFF_CFS_RQ_RQ) && defined(OFF_RQ_CLOCK)
#define RQ_CLOCK_KNOWN 1

/* The run queue of the CPU `task` is on (through its sched_entity's cfs_rq); 0 if
 * unreadable. */
static inline void *task_rq(void *task) {
  void *cfs_rq = 0, *rq = 0;
  bpf_probe_read_kernel(&cfs_rq, sizeof(cfs_rq), task + OFF_TASK_SE + OFF_SE_CFS_RQ);
  if (cfs_rq)
    bpf_probe_read_kernel(&rq, sizeof(rq), cfs_rq + OFF_CFS_RQ_RQ);
  return rq;
}

/* `stamp`, a time on `rq`'s clock, on bpf_ktime_get_ns()'s clock (`now`); 0: unknown.
 * Valid in sched_switch on rq's CPU, where __schedule() has just updated rq->clock. */
static inline u64 rq_stamp_ns(void *rq, u64 stamp, u64 now) {
  u64 clock = 0;
  bpf_probe_read_kernel(&clock, sizeof(clock), rq + OFF_RQ_CLOCK);
  if (stamp && clock >= stamp && clock - stamp <= now)
    return now - (clock - stamp);
  return 0;
}
#endif

#if defined(RQ_CLOCK_KNOWN) && defined(OFF_SI_LAST_ARRIVAL)
#define ARRIVAL_KNOWN 1

struct arrival {
  u64 ns;     /* on bpf_ktime_get_ns()'s clock; 0: unknown */
  u64 count;  /* sched_info.pcount: the task's arrivals so far, this one included */
};

/* `task` is prev at sched_switch (the task on this CPU until now). */
static inline struct arrival task_arrival(void *task, u64 now) {
  struct arrival a = {};
  u64 at = 0;
  unsigned long count = 0;
  bpf_probe_read_kernel(&count, sizeof(count), task + OFF_TASK_SCHED_INFO + OFF_SI_PCOUNT);
  bpf_probe_read_kernel(&at, sizeof(at), task + OFF_TASK_SCHED_INFO + OFF_SI_LAST_ARRIVAL);
  void *rq = task_rq(task);
  a.count = count;
  a.ns = rq ? rq_stamp_ns(rq, at, now) : 0;
  return a;
}
#endif

/* The scheduler's own per-task times (CONFIG_SCHED_INFO; se.sum_exec_runtime always):
 * what /proc/PID/schedstat reads. For a front-end whose numbers users check against
 * top, pidstat and schedstat, and that must not lose time to an unseen event.
 *
 * Why not the tracepoint spans alone: they are not what the kernel charges. bpftrace's
 * sched_switch spans of nginx workers under 8 ab clients read 5.009 s against
 * sum_exec_runtime's 4.644 s over the same 79k switches. Suspected cause (not proven):
 * the kernel charges by rq->clock, which __schedule() does not refresh after a wake-up
 * that preempts the current task (rq_clock_skip_update); on a non-preemptible kernel
 * that task runs on to its return to user space, and the time is charged to the task
 * after it and to its own run_delay.
 */
#if defined(RQ_CLOCK_KNOWN) && defined(OFF_SE_SUM_EXEC) && defined(OFF_TASK_SCHED_INFO) && \
    defined(OFF_SI_RUN_DELAY) && defined(OFF_SI_LAST_QUEUED)
#define SCHED_TIMES_KNOWN 1

/* CPU time the scheduler has charged to `task`. In sched_switch it is complete for prev
 * (update_curr ran when prev was dequeued or put back). */
static inline u64 task_exec_ns(void *task) {
  u64 v = 0;
  bpf_probe_read_kernel(&v, sizeof(v), task + OFF_TASK_SE + OFF_SE_SUM_EXEC);
  return v;
}

/* Time `task` has waited on a run queue, as schedstat will read it once the task is on a
 * CPU: run_delay plus the wait in progress (since last_queued, on its run queue's clock:
 * the value sched_info_arrive() adds when `task` is next in sched_switch). */
static inline u64 task_delay_ns(void *task) {
  u64 delay = 0, queued = 0, clock = 0;
  bpf_probe_read_kernel(&delay, sizeof(delay), task + OFF_TASK_SCHED_INFO + OFF_SI_RUN_DELAY);
  bpf_probe_read_kernel(&queued, sizeof(queued), task + OFF_TASK_SCHED_INFO + OFF_SI_LAST_QUEUED);
  void *rq = queued ? task_rq(task) : 0;
  if (rq)
    bpf_probe_read_kernel(&clock, sizeof(clock), rq + OFF_RQ_CLOCK);
  return clock > queued ? delay + (clock - queued) : delay;
}
#endif

#endif
