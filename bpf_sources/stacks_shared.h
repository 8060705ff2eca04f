/* Shared between bpf_sources/stacks.h and common/stack_reader (user side). */
#ifndef BPFDIAG_STACKS_SHARED_H
#define BPFDIAG_STACKS_SHARED_H

/* Set in a stack id stored in the overflow map (bit 30: ids stay positive). Overflow
 * ids are (cpu << BPFDIAG_OVERFLOW_CPU_SHIFT) | n, n counted per CPU. */
#define BPFDIAG_OVERFLOW_BIT 0x40000000
#define BPFDIAG_OVERFLOW_CPU_SHIFT 20
/* Frames kept for a stack in the overflow map (its key: deeper stacks are cut). */
#define BPFDIAG_OVERFLOW_DEPTH 64

/* Key of the overflow map: the stack's frames, unused ones 0. */
struct bpfdiag_stack {
  __u64 ip[BPFDIAG_OVERFLOW_DEPTH];
};

#endif
