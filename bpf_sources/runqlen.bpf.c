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

BPF_HASH(dist, struct runqlen_key, u64, 65536);
BPF_ARRAY(errors, u64, 1);

int do_perf_event(struct bpf_perf_event_data *ctx) {
  void *task = (void *)bpf_get_current_task();
  void *cfs_rq = NULL;
  unsigned int nr = 0;
  u64 zero = 0, *v;
  struct runqlen_key key = {};

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
  key.cpu = bpf_get_smp_processor_id();
  key.len = nr > RUNQLEN_MAX_LEN ? RUNQLEN_MAX_LEN : nr;
  v = dist.lookup_or_try_init(&key, &zero);
  if (v)
    __sync_fetch_and_add(v, 1);
  return 0;
fail:
  v = errors.lookup(&key.cpu); /* key.cpu == 0: the single error slot */
  if (v)
    __sync_fetch_and_add(v, 1);
  return 0;
}
