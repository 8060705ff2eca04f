/* Shared between doctor.bpf.c and the doctor front-end (the live check). */
#ifndef BPFDIAG_DOCTOR_H
#define BPFDIAG_DOCTOR_H

/* slots of the `counts` array */
#define DOCTOR_SYSCALLS 0 /* sys_enter_getppid by the checking thread */
#define DOCTOR_SWITCHES 1 /* sched_switch away from the checking thread */
#define DOCTOR_UPROBES 2  /* libc getppid() entries by the checking thread */
#define DOCTOR_KERNEL_SWITCHES 3 /* the kernel's own count of the thread's switches
                                  * (nvcsw + nivcsw) at the last sched_switch seen */
#define DOCTOR_NSLOTS 4

/* data-quality counters (bpf_sources/common.h) */
#define DOCTOR_CNT_SUBMIT_FAILED 0 /* perf_submit refused an event (buffer full) */
#define DOCTOR_NCOUNTERS 1

/* One event per counted syscall, numbered: the front-end checks none is missing. */
struct doctor_event {
  __u64 seq;
};

#endif
