/* doctor's live check: counts events that the front-end generates itself, so it can
 * tell whether every one was delivered.
 *
 *   syscalls:sys_enter_getppid  (tracepoint, needs tracefs)   -> counts[DOCTOR_SYSCALLS]
 *                                and one numbered event through the perf buffer
 *   sched_switch                (raw tracepoint)              -> counts[DOCTOR_SWITCHES]
 *                                for each switch away from the checking thread, and
 *                                counts[DOCTOR_KERNEL_SWITCHES]: the kernel's own count
 *                                of that thread's switches (task_struct nvcsw + nivcsw,
 *                                -DOFF_TASK_NVCSW/-DOFF_TASK_NIVCSW from BTF), which
 *                                __schedule() increments with every sched_switch event
 *   getppid in libc             (uprobe, attached when it can be) -> counts[DOCTOR_UPROBES]
 *
 * Only the checking thread's events count: -DTARGET_TID=N.
 */
#include <uapi/linux/ptrace.h>
#include "doctor_shared.h"
#define DQ_NCOUNTERS DOCTOR_NCOUNTERS
#include "common.h"

BPF_ARRAY(counts, u64, DOCTOR_NSLOTS);
BPF_ARRAY(seqno, u64, 1);
BPF_PERF_OUTPUT(events);

static inline int is_target(void) { return (u32)bpf_get_current_pid_tgid() == TARGET_TID; }

static inline void bump(int slot) {
  u64 *v = counts.lookup(&slot);
  if (v)
    __sync_fetch_and_add(v, 1);
}

TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {
  if (!is_target())
    return PASS;
  bump(DOCTOR_SYSCALLS);
  int zero = 0;
  u64 *s = seqno.lookup(&zero);
  if (!s)
    return PASS;
  struct doctor_event ev = {.seq = *s};
  *s += 1;
  if (events.perf_submit(args, &ev, sizeof(ev)) != 0)
    dq_count(DOCTOR_CNT_SUBMIT_FAILED);
  return PASS;
}

/* args: [0] bool preempt, [1] prev, [2] next. The current task is prev. Between two
 * events the kernel's count moves by exactly the number of switches made: the front-end
 * compares that with the number of events this handler ran for. */
RAW_TRACEPOINT_PROBE(sched_switch) {
  if (!is_target())
    return 0;
  bump(DOCTOR_SWITCHES);
  void *prev = (void *)ctx->args[1];
  unsigned long nv = 0, niv = 0;
  bpf_probe_read_kernel(&nv, sizeof(nv), prev + OFF_TASK_NVCSW);
  bpf_probe_read_kernel(&niv, sizeof(niv), prev + OFF_TASK_NIVCSW);
  int slot = DOCTOR_KERNEL_SWITCHES;
  u64 total = nv + niv;
  counts.update(&slot, &total);
  return 0;
}

int on_getppid(struct pt_regs *ctx) {
  if (is_target())
    bump(DOCTOR_UPROBES);
  return PASS;
}
