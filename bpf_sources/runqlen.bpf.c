/* runqlen: sample each CPU's run queue length from a perf event, and measure each
 * CPU's idle time from sched_switch.
 *
 * Why both: an idle (tickless) CPU takes no perf-event samples, so samples alone
 * describe only the time a CPU is busy and an idle CPU looks as if it were never
 * idle. The front-end weighs each CPU's busy-time samples by its busy time and
 * counts its idle time as queue length 0 at the sampling rate, so every CPU is
 * weighted by time, idle or not.
 *
 * Struct offsets are injected as -D flags read from the kernel's BTF:
 *   OFF_TASK_PID       task_struct.pid
 *   OFF_TASK_SE        task_struct.se
 *   OFF_SE_CFS_RQ      sched_entity.cfs_rq
 *   OFF_CFS_RQ_RQ      cfs_rq.rq
 *   OFF_RQ_NR_RUNNING  rq.nr_running         (all scheduling classes)
 *   OFF_CFS_RQ_NR      cfs_rq.nr_queued / nr_running (CFS-only view, --cfs)
 *   OFF_RQ_CLOCK, OFF_RQ_CLOCK_IDLE  rq.clock, rq.clock_idle (optional): when the CPU
 *                      went idle, for an idle period whose start was never seen
 *   OFF_RQ_CFS         rq.cfs, with OFF_CFS_RQ_H_QUEUED + OFF_CFS_RQ_H_RUNNABLE (6.14+) or
 *                      OFF_CFS_RQ_H_DELAYED (6.12, 6.13) (optional): tasks the fair class
 *                      keeps queued after they went to sleep (EEVDF delayed dequeue)
 * Since 6.12 a task that sleeps with negative lag stays on the queue, marked delayed,
 * until its lag is spent: rq.nr_running and cfs_rq.nr_queued count it, yet it is asleep
 * and waits for nothing (no run_delay accrues). Both views leave such tasks out.
 * CFS_ONLY selects BCC's view: the sampled task's own cfs_rq, which inside a cgroup
 * is the group's queue, not the CPU's.
 *
 * --cgroup / --container (BPFDIAG_CGROUP): how many of the cgroup's tasks wait for each
 * CPU. No run queue holds that count without the cpu controller (and on a hybrid
 * system cgroup v2 has none), so it is kept here: a task of the cgroup (CGROUP_TASK_OK,
 * filters.h) waits from its wakeup (sched_wakeup/_new, on the CPU it was queued on:
 * task->cpu) or its preemption (sched_switch, prev still runnable) until it is switched
 * in; sched_migrate_task moves it. cg_queued holds those tasks and their CPU, cg_len
 * the count per CPU that samples read. A task found running while counted (its
 * switch-in went unseen: arrival.h) is taken off at once and counted
 * (RUNQLEN_CNT_CG_UNSEEN). Extra -D: OFF_TASK_ON_CPU, OFF_TASK_CPU, OFF_TASK_STATE,
 * CG_NCPUS, CG_QUEUED_SIZE.
 */
#include <uapi/linux/bpf_perf_event.h>
#include "runqlen_shared.h"
#define DQ_NCOUNTERS RUNQLEN_NCOUNTERS
#include "common.h"
#include "arrival.h" /* task_rq, rq_stamp_ns */
#include "filters.h" /* CGROUP_OK, CGROUP_TASK_OK */

#ifdef BPFDIAG_CGROUP
BPFDIAG_HASH(cg_queued, u32, u32, CG_QUEUED_SIZE); /* tid -> the CPU it waits for */
BPF_ARRAY(cg_len, s64, CG_NCPUS);             /* the cgroup's waiting tasks per CPU */

static inline void cg_add(u32 cpu, s64 d) {
  int k = cpu;
  s64 *v = cg_len.lookup(&k);
  if (v)
    __sync_fetch_and_add(v, d);
}

/* Task `tid` of the cgroup waits for `cpu`. */
static inline void cg_enqueue(u32 tid, u32 cpu) {
  u32 *old = cg_queued.lookup(&tid);
  if (old) {
    u32 was = *old;
    if (was == cpu)
      return;
    *old = cpu;
    cg_add(was, -1);
    cg_add(cpu, 1);
    return;
  }
  if (cg_queued.update(&tid, &cpu)) {
    dq_count(RUNQLEN_CNT_CG_FULL);
    return;
  }
  cg_add(cpu, 1);
}

/* Task `tid` runs: it waits no more. 1 when it was counted as waiting. */
static inline int cg_dequeue(u32 tid) {
  u32 *old = cg_queued.lookup(&tid);
  if (!old)
    return 0;
  u32 was = *old;
  if (cg_queued.delete(&tid) == 0) /* one CPU wins a race: one decrement */
    cg_add(was, -1);
  return 1;
}

/* A woken task is queued on task->cpu; one still on a CPU (woken before it got off
 * it) does not wait. */
static inline int cg_wakeup(void *p) {
  u32 on_cpu = 0, tid = 0, cpu = 0;
  bpf_probe_read_kernel(&on_cpu, sizeof(on_cpu), p + OFF_TASK_ON_CPU);
  if (on_cpu || !CGROUP_TASK_OK(p))
    return 0;
  bpf_probe_read_kernel(&tid, sizeof(tid), p + OFF_TASK_PID);
  bpf_probe_read_kernel(&cpu, sizeof(cpu), p + OFF_TASK_CPU);
  if (tid)
    cg_enqueue(tid, cpu);
  return 0;
}

RAW_TRACEPOINT_PROBE(sched_wakeup) { return cg_wakeup((void *)ctx->args[0]); }
RAW_TRACEPOINT_PROBE(sched_wakeup_new) { return cg_wakeup((void *)ctx->args[0]); }

/* args: [0] task_struct *p, [1] int dest_cpu */
RAW_TRACEPOINT_PROBE(sched_migrate_task) {
  u32 tid = 0;
  bpf_probe_read_kernel(&tid, sizeof(tid), (void *)ctx->args[0] + OFF_TASK_PID);
  if (tid && cg_queued.lookup(&tid))
    cg_enqueue(tid, (u32)ctx->args[1]);
  return 0;
}
#endif

/* Per-CPU cumulative counts indexed by queue length: no atomics, cannot fill up;
 * user space reports per-interval deltas, so nothing is lost between reports. */
BPF_PERCPU_ARRAY(dist, u64, RUNQLEN_MAX_LEN + 1);
/* Per-CPU idle accounting, updated only on its own CPU (sched_switch runs there). */
BPF_PERCPU_ARRAY(idle, struct runqlen_idle, 1);

/* Tasks queued on this cfs_rq's hierarchy but asleep (delayed dequeue); 0 before 6.12. */
static inline unsigned int delayed_tasks(void *cfs_rq) {
#if defined(OFF_CFS_RQ_H_QUEUED) && defined(OFF_CFS_RQ_H_RUNNABLE)
  unsigned int queued = 0, runnable = 0;
  bpf_probe_read_kernel(&queued, sizeof(queued), cfs_rq + OFF_CFS_RQ_H_QUEUED);
  bpf_probe_read_kernel(&runnable, sizeof(runnable), cfs_rq + OFF_CFS_RQ_H_RUNNABLE);
  return queued > runnable ? queued - runnable : 0;
#elif defined(OFF_CFS_RQ_H_DELAYED)
  unsigned int delayed = 0;
  bpf_probe_read_kernel(&delayed, sizeof(delayed), cfs_rq + OFF_CFS_RQ_H_DELAYED);
  return delayed;
#else
  return 0;
#endif
}

int do_perf_event(struct bpf_perf_event_data *ctx) {
  void *task = (void *)bpf_get_current_task();
  void *cfs_rq = NULL;
  unsigned int nr = 0, delayed = 0;
  u64 *v;

  /* The idle task's time is measured by sched_switch below, not sampled. */
  if ((u32)bpf_get_current_pid_tgid() == 0)
    return 0;
#ifdef BPFDIAG_CGROUP
  {
    u32 me = (u32)bpf_get_current_pid_tgid();
    if (cg_dequeue(me)) /* running, so not waiting: its switch-in was not seen */
      dq_count(RUNQLEN_CNT_CG_UNSEEN);
    int cpu = bpf_get_smp_processor_id();
    s64 *n = cg_len.lookup(&cpu);
    s64 q = n && *n > 0 ? *n : 0;
    int qlen = q > RUNQLEN_MAX_LEN ? RUNQLEN_MAX_LEN : (int)q;
    v = dist.lookup(&qlen);
    if (v)
      (*v)++;
    return 0;
  }
#endif
  if (bpf_probe_read_kernel(&cfs_rq, sizeof(cfs_rq), task + OFF_TASK_SE + OFF_SE_CFS_RQ) || !cfs_rq)
    goto fail;
#ifdef CFS_ONLY
  if (bpf_probe_read_kernel(&nr, sizeof(nr), cfs_rq + OFF_CFS_RQ_NR))
    goto fail;
  /* counted in tasks below this queue: exact when they are its own entities (no nested
   * group), an upper bound on its delayed entities otherwise */
  delayed = delayed_tasks(cfs_rq);
#else
  void *rq = NULL;
  if (bpf_probe_read_kernel(&rq, sizeof(rq), cfs_rq + OFF_CFS_RQ_RQ) || !rq)
    goto fail;
  if (bpf_probe_read_kernel(&nr, sizeof(nr), rq + OFF_RQ_NR_RUNNING))
    goto fail;
#ifdef OFF_RQ_CFS
  delayed = delayed_tasks(rq + OFF_RQ_CFS);
#endif
#endif
  if (delayed) {
    dq_count(RUNQLEN_CNT_DELAYED_SAMPLES);
    dq_count_n(RUNQLEN_CNT_DELAYED_TASKS, delayed);
    nr = nr > delayed ? nr - delayed : 1; /* the sampled task runs: it is not delayed */
  }
  if (nr > 0)
    nr--; /* the running task itself */
  int len = nr > RUNQLEN_MAX_LEN ? RUNQLEN_MAX_LEN : nr;
  v = dist.lookup(&len);
  if (v)
    (*v)++;
  return 0;
fail:
  dq_count(RUNQLEN_CNT_READ_ERRORS);
  return 0;
}

/* When this CPU went idle, on bpf_ktime_get_ns()'s clock (0: unknown), from the run
 * queue's own record: the fair class stamps rq->clock_idle with rq->clock as it leaves
 * the CPU to the idle task, and rq->clock was updated by this __schedule(). */
static inline u64 idle_start(void *task, u64 now) {
#if defined(RQ_CLOCK_KNOWN) && defined(OFF_RQ_CLOCK_IDLE)
  void *rq = task_rq(task);
  u64 at = 0;
  if (!rq)
    return 0;
  bpf_probe_read_kernel(&at, sizeof(at), rq + OFF_RQ_CLOCK_IDLE);
  return rq_stamp_ns(rq, at, now);
#else
  return 0;
#endif
}

/* args: [0] bool preempt, [1] task_struct *prev, [2] task_struct *next. The idle
 * task has pid 0 on every CPU. A switch into idle can go unseen: on Firecracker guests
 * no BPF program runs in the context of PID 1's threads (bpf_sources/arrival.h), so
 * when one of them leaves the CPU idle, the idle period starts unseen; its end is
 * seen, and its start is taken from the run queue (idle_start). */
RAW_TRACEPOINT_PROBE(sched_switch) {
  int zero = 0;
  u32 next_pid = 0;
  u64 now = bpf_ktime_get_ns();
  struct runqlen_idle *st = idle.lookup(&zero);
  if (!st)
    return 0;
  if ((u32)bpf_get_current_pid_tgid() == 0) {
    if (st->idle_since) {
      st->idle_ns += now - st->idle_since;
    } else if (st->last) {
      u64 from = idle_start((void *)ctx->args[1], now);
      if (from && from >= st->last && from <= now) {
        st->idle_ns += now - from;
        dq_count(RUNQLEN_CNT_IDLE_RECOVERED);
      } else {
        dq_count(RUNQLEN_CNT_IDLE_DROPPED);
      }
    }
  }
  bpf_probe_read_kernel(&next_pid, sizeof(next_pid), (void *)ctx->args[2] + OFF_TASK_PID);
  st->idle_since = next_pid == 0 ? now : 0;
#ifdef BPFDIAG_CGROUP
  {
    u32 prev_tid = (u32)bpf_get_current_pid_tgid();
    if (prev_tid) {
      if (cg_dequeue(prev_tid)) /* it ran, yet was counted as waiting */
        dq_count(RUNQLEN_CNT_CG_UNSEEN);
      unsigned int state = 0;
      bpf_probe_read_kernel(&state, sizeof(state), (void *)ctx->args[1] + OFF_TASK_STATE);
      if ((ctx->args[0] || state == 0) && CGROUP_OK()) /* preempted or yielded: it waits here */
        cg_enqueue(prev_tid, bpf_get_smp_processor_id());
    }
    if (next_pid)
      cg_dequeue(next_pid);
  }
#endif
  st->last = now;
  return 0;
}
