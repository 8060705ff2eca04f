/* runqlen: sample each CPU's run queue length from a perf event.
 *
 * Struct offsets are injected as -D flags read from the kernel's BTF:
 *   OFF_TASK_SE        task_struct.se
 *   OFF_SE_CFS_RQ      sched_entity.cfs_rq
 *   OFF_CFS_RQ_RQ      cfs_rq.rq
 *   OFF_RQ_NR_RUNNING  rq.nr_running         (all scheduling classes)
 *   OFF_CFS_RQ_NR      cfs_rq.nr_queued / nr_running (CFS-only view, --cfs)
 * CFS_ONLY selects BCC's view: the sampled task's own cfs_rq, which inside a cgroup
 * is the group's queue, not the CPU's.
 */
#include <uapi/linux/bpf_perf_event.h>
#include "runqlen_shared.h"

/* Per-CPU cumulative counts indexed by queue length: no atomics, cannot fill up;
 * user space reports per-interval deltas, so nothing is lost between reports. */
BPF_PERCPU_ARRAY(dist, u64, RUNQLEN_MAX_LEN + 1);
BPF_PERCPU_ARRAY(errors, u64, 1);

int do_perf_event(struct bpf_perf_event_data *ctx) {
  void *task = (void *)bpf_get_current_task();
  void *cfs_rq = NULL;
  unsigned int nr = 0;
  u64 *v;
  int zero = 0;

  if (bpf_probe_read_kernel(&cfs_rq, sizeof(cfs_rq), task + OFF_TASK_SE + OFF_SE_CFS_RQ) || !cfs_rq)
    goto fail;
#ifdef CFS_ONLY
  if (bpf_probe_read_kernel(&nr, sizeof(nr), cfs_rq + OFF_CFS_RQ_NR))
    goto fail;
  if (nr > 0)
    nr--;
#else
  void *rq = NULL;
  if (bpf_probe_read_kernel(&rq, sizeof(rq), cfs_rq + OFF_CFS_RQ_RQ) || !rq)
    goto fail;
  if (bpf_probe_read_kernel(&nr, sizeof(nr), rq + OFF_RQ_NR_RUNNING))
    goto fail;
  /* nr_running counts the running task but never the idle task (pid 0) */
  if ((u32)bpf_get_current_pid_tgid() != 0 && nr > 0)
    nr--;
#endif
  int len = nr > RUNQLEN_MAX_LEN ? RUNQLEN_MAX_LEN : nr;
  v = dist.lookup(&len);
  if (v)
    (*v)++;
  return 0;
fail:
  v = errors.lookup(&zero);
  if (v)
    (*v)++;
  return 0;
}
