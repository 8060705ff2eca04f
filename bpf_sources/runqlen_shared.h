/* Shared between runqlen.bpf.c and the runqlen front-end. */
#ifndef BPFDIAG_RUNQLEN_H
#define BPFDIAG_RUNQLEN_H

#define RUNQLEN_MAX_LEN 4095 /* longer queues are counted in this bucket */

struct runqlen_key {
  __u32 cpu;
  __u32 len;
};

#endif
