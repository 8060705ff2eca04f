/* Processes announced to the front-end (common/announce.h) the first time a program
 * records one of their stacks, and again after their exec: the front-end reads their
 * mappings while they still run. Without it a process that lives 0.2 s (a compiler a
 * build starts, a CGI) is gone before the next report and every frame of it unnamed.
 *
 * Needs SEEN_SIZE (live processes announced) and ANNOUNCE_DQ_FULL (the tool's
 * data-quality slot: a process not announced because `seen` was full; its frames may
 * stay unnamed). The tool calls announce(ctx, tgid) where it records a stack, and
 * announce_exec() / announce_exit(tgid, tid) from its sched_process_exec / exit probes,
 * announce_mmap(prot) from syscalls:sys_enter_mmap (an executable mapping: a library
 * mapped after the first stack, by the dynamic linker or dlopen, as perf learns from
 * its mmap events).
 * Pasted into the program text (common/bpf_text.cpp: libbcc rewrites map calls only
 * there).
 */
#ifndef BPFDIAG_ANNOUNCE_H
#define BPFDIAG_ANNOUNCE_H

BPFDIAG_HASH(seen, u32, u8, SEEN_SIZE);    /* live processes already announced (pruned at exit) */
BPF_PERF_OUTPUT(new_procs);            /* tgid of each newly seen process */

static inline __attribute__((always_inline)) void announce(void *ctx, u32 tgid) {
  if (seen.lookup(&tgid))
    return;
  u8 one = 1;
  int err = seen.insert(&tgid, &one);
  if (err == 0)
    new_procs.perf_submit(ctx, &tgid, sizeof(tgid));
  else if (err != -17 /* EEXIST: another CPU was first */)
    dq_count(ANNOUNCE_DQ_FULL);
}

/* After exec the process's mappings are new: forget that it was announced, so its next
 * recorded stack announces it again and the front-end re-reads its mappings. */
static inline __attribute__((always_inline)) void announce_exec(void) {
  u32 tgid = bpf_get_current_pid_tgid() >> 32;
  seen.delete(&tgid);
}

/* An executable mapping is coming: the next recorded stack announces the process again
 * (its text will be mapped by then: the mmap returns before any code there runs). */
static inline __attribute__((always_inline)) void announce_mmap(unsigned long prot) {
  if (!(prot & 4 /* PROT_EXEC */))
    return;
  u32 tgid = bpf_get_current_pid_tgid() >> 32;
  seen.delete(&tgid);
}

/* A process is gone when its group leader exits: drop it, so a long system-wide run
 * only holds live processes. A leader that exits before its other threads makes them
 * announce the process once more, which only costs the front-end a re-read. */
static inline __attribute__((always_inline)) void announce_exit(u32 tgid, u32 tid) {
  if (tid == tgid)
    seen.delete(&tgid);
}

#endif
