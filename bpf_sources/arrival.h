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
 * -D flags from common/btf (arrival_cflags): OFF_TASK_SCHED_INFO, OFF_SI_LAST_ARRIVAL,
 * OFF_SI_PCOUNT, OFF_TASK_SE, OFF_SE_CFS_RQ, OFF_CFS_RQ_RQ, OFF_RQ_CLOCK. Without them
 * (a kernel without CONFIG_SCHED_INFO or CONFIG_FAIR_GROUP_SCHED) ARRIVAL_KNOWN is not
 * defined and the callers count such periods as dropped.
 */
#ifndef BPFDIAG_ARRIVAL_H
#define BPFDIAG_ARRIVAL_H

#ifdef OFF_SI_LAST_ARRIVAL
#define ARRIVAL_KNOWN 1

struct arrival {
  u64 ns;     /* on bpf_ktime_get_ns()'s clock; 0: unknown */
  u64 count;  /* sched_info.pcount: the task's arrivals so far, this one included */
};

/* `task` is prev at sched_switch (the task on this CPU until now). */
static inline struct arrival task_arrival(void *task, u64 now) {
  struct arrival a = {};
  void *cfs_rq = 0, *rq = 0;
  u64 clock = 0, at = 0;
  unsigned long count = 0;
  bpf_probe_read_kernel(&count, sizeof(count), task + OFF_TASK_SCHED_INFO + OFF_SI_PCOUNT);
  bpf_probe_read_kernel(&at, sizeof(at), task + OFF_TASK_SCHED_INFO + OFF_SI_LAST_ARRIVAL);
  bpf_probe_read_kernel(&cfs_rq, sizeof(cfs_rq), task + OFF_TASK_SE + OFF_SE_CFS_RQ);
  if (cfs_rq)
    bpf_probe_read_kernel(&rq, sizeof(rq), cfs_rq + OFF_CFS_RQ_RQ);
  if (rq)
    bpf_probe_read_kernel(&clock, sizeof(clock), rq + OFF_RQ_CLOCK);
  a.count = count;
  if (at && clock >= at && clock - at <= now)
    a.ns = now - (clock - at);
  return a;
}
#endif

#endif
