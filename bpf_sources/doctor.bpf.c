/* doctor's live check: counts events that the front-end generates itself, so it can
 * tell whether every one was delivered.
 *
 *   syscalls:sys_enter_getppid  (tracepoint, needs tracefs)   -> counts[DOCTOR_SYSCALLS]
 *                                and one numbered event through the perf buffer
 *   sched_switch                (raw tracepoint)              -> counts[DOCTOR_SWITCHES]
 *                                for each voluntary switch away from the checking thread
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

/* args: [0] bool preempt, [1] prev, [2] next. The current task is prev. */
RAW_TRACEPOINT_PROBE(sched_switch) {
  if (is_target() && !ctx->args[0])
    bump(DOCTOR_SWITCHES);
  return 0;
}

int on_getppid(struct pt_regs *ctx) {
  if (is_target())
    bump(DOCTOR_UPROBES);
  return PASS;
}
