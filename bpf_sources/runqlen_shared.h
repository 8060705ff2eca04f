/* Shared between runqlen.bpf.c and the runqlen front-end. */
#ifndef BPFDIAG_RUNQLEN_H
#define BPFDIAG_RUNQLEN_H

#define RUNQLEN_MAX_LEN 1023 /* longer queues are counted in this bucket */

/* data-quality counters (bpf_sources/common.h), mapped to data_quality keys by the
 * front-end's counter table */
#define RUNQLEN_CNT_READ_ERRORS 0 /* a sample whose run queue could not be read */
#define RUNQLEN_CNT_IDLE_RECOVERED 1 /* an idle period whose start was never seen, taken
                                        from the run queue's own record (rq.clock_idle) */
#define RUNQLEN_CNT_IDLE_DROPPED 2   /* the same when that record could not say */
#define RUNQLEN_CNT_DELAYED_SAMPLES 3 /* a sample whose queue held sleeping tasks the
                                          kernel keeps queued (delayed dequeue), left out */
#define RUNQLEN_CNT_DELAYED_TASKS 4 /* those tasks, summed over the samples */
#define RUNQLEN_CNT_CG_UNSEEN 5 /* --cgroup: a task counted as waiting found running (its
                                     switch-in was never seen): taken off its queue */
#define RUNQLEN_CNT_CG_FULL 6   /* --cgroup: a waiting task not counted (cg_queued full) */
#define RUNQLEN_NCOUNTERS 7

/* One CPU's idle time (CLOCK_MONOTONIC ns, as bpf_ktime_get_ns). */
struct runqlen_idle {
  __u64 idle_ns;    /* completed idle periods, summed */
  __u64 idle_since; /* start of the current idle period, 0 when busy */
  __u64 last;       /* this CPU's last sched_switch seen */
};

#endif
