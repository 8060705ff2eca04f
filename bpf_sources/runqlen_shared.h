/* Shared between runqlen.bpf.c and the runqlen front-end. */
#ifndef BPFDIAG_RUNQLEN_H
#define BPFDIAG_RUNQLEN_H

#define RUNQLEN_MAX_LEN 1023 /* longer queues are counted in this bucket */

#endif
