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

#ifndef BPF_F_NO_PREALLOC
#define BPF_F_NO_PREALLOC (1U << 0)
#endif

/* The suite's hash maps, two kinds.
 * BPFDIAG_HASH: preallocated. An insert cannot fail while the map has room, in any
 * context; the whole ceiling is allocated when the map is created.
 * BPFDIAG_HASH_LAZY: entries allocated as they are added (BPF_F_NO_PREALLOC). The
 * kernel takes them from a per-CPU cache (bpf_mem_alloc) that only an irq_work refills,
 * and a new map's cache holds 4 entries per CPU: where interrupts are off (sched_switch,
 * sched_waking in a hard interrupt, a perf sample in NMI) several inserts before the
 * next refill find it empty and fail with -ENOMEM. Measured: threadpool's waits map,
 * allocated on insert, failed so twice in a 5 s run under load (sched_waking in a hard
 * interrupt waking several timed waiters). So LAZY is only for maps inserted into from
 * task context (syscall tracepoints, uprobes, user space), or at most once per
 * interrupts-off stretch (one per context switch, one per perf sample): large
 * ceilings there cost nothing until used (preallocating every map cost lockstat 80 MB
 * and 200 ms at each start). */
#define BPFDIAG_HASH(name, key, value, size) BPF_TABLE("hash", key, value, name, size)
#define BPFDIAG_HASH_LAZY(name, key, value, size) BPF_F_TABLE("hash", key, value, name, size, BPF_F_NO_PREALLOC)

#endif
