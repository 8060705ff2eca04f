/* Shared by every tool's .bpf.c: the data-quality counters.
 *
 * Define DQ_NCOUNTERS (the number of slots) before the #include line, which
 * common/bpf_text (with_common_header) replaces by this text: libbcc rewrites map
 * calls only in the main file. Slots are
 * per-CPU (no atomics, nothing lost to contention); user space sums them and maps
 * each slot to a data_quality key with one table (common/bpf_counters.h):
 *
 *   #define DQ_NCOUNTERS LS_CNT_MAX
 *   #include "common.h"
 *   ... dq_count(LS_CNT_MAP_FULL);
 */
#ifndef BPFDIAG_COMMON_H
#define BPFDIAG_COMMON_H

#ifndef DQ_NCOUNTERS
#error "define DQ_NCOUNTERS before including common.h"
#endif

BPF_PERCPU_ARRAY(dq_counters, u64, DQ_NCOUNTERS);

/* What every tracepoint (TRACEPOINT_PROBE) and uprobe program returns. A 0 from a
 * BPF program on a perf-event tracepoint or probe makes the kernel drop that event for
 * every other perf consumer of it (perf_trace_run_bpf_submit, uprobe_perf_func): while
 * lockstat ran, `perf record -e lock:contention_begin` recorded nothing. Raw tracepoint
 * and perf_event (sampling) programs return 0; no one else sees their return value.
 * bpftrace made the same change (bpftrace/bpftrace#1857). */
#define PASS 1

static inline void dq_count_n(u32 slot, u64 n) {
  u64 *v = dq_counters.lookup(&slot);
  if (v)
    *v += n;
}

static inline void dq_count(u32 slot) { dq_count_n(slot, 1); }

/* For hash maps whose size is a ceiling, not a need (stack and count tables): entries
 * are allocated as they are added (since Linux 6.1 safe in every tracing program), so
 * a generous ceiling costs no memory until used. The header shim's uapi bpf.h is empty. */
#ifndef BPF_F_NO_PREALLOC
#define BPF_F_NO_PREALLOC (1U << 0)
#endif

/* The suite's hash map: entries allocated as they are added. A preallocated map costs
 * its whole ceiling when it is created, at every start: lockstat's default maps were
 * 80 MB and 200 ms of each start (and its memory, whether used or not). Where a map
 * takes an insert per event, the allocation is the kernel's per-CPU cache (bpf_mem_alloc). */
#define BPFDIAG_HASH(name, key, value, size) BPF_F_TABLE("hash", key, value, name, size, BPF_F_NO_PREALLOC)

#endif
