/* In-BPF user-stack unwinding from DWARF CFI tables (issue 11, design (a) of
 * docs/design/unwinding.md). Pasted into a tool's program text in place of its
 * `#include "unwind.h"` line by common/unwind_maps (with_unwind_header): libbcc
 * rewrites map calls only in the main file. Front-end: common/unwind_maps fills
 * uw_rows (all tables back to back, one copy per build-id), uw_maps (each traced
 * process's executable file mappings, sorted, with load bias) and uw_procs (tgid ->
 * its block of uw_maps).
 *
 *   handler:    uw_progs.call(ctx, UW_PROG_UNWIND);   // does not return when it runs
 *   tool's program (slot UW_PROG_TOOL), reached when the walk is done:
 *     u64 h = uw_unwind_user(tgid); // 0: no user context; UW_HASH_LOST: not stored
 *     ... key.user_hash = h;        // frames: uw_stacks[h] (struct uw_pcs)
 *
 * The walk runs in programs of its own, chained by tail calls: uw_walk_begin (slot
 * UW_PROG_UNWIND) reads the user registers; uw_walk_step (UW_PROG_WALK) walks
 * UW_CHUNK frames and tail-calls itself until the walk ends, then stores the stack and
 * tail-calls the tool's program (UW_PROG_TOOL); the front-end installs all three
 * (common/unwind_maps UnwindMaps::start). The verifier explores a program's loop once
 * per frame: the whole walk in one program was 327,894 instructions and ~105 ms at each
 * start; UW_CHUNK frames are a fraction of it (the OpenTelemetry eBPF profiler's
 * design). Inlined into a tool's handler, the verifier explored the unwinder once per
 * path of the handler and gave up at its 1M-instruction limit. Every program sees the
 * same ctx and current task; state goes through per-CPU maps (uw_walk_state,
 * uw_scratch) and the tool's own (e.g. its per-thread entry). A tool whose handlers
 * are of another program type (lockstat's declared waits: uprobes) has a prog array of
 * its own and its own begin/step programs around uw_begin/uw_chunk/uw_finish.
 *
 * Injected (-D): OFF_TASK_STACK, THREAD_SIZE (where the user registers are: the top
 * of the task's kernel stack), UW_MAX_ROWS, UW_MAX_DEPTH (<= UW_STACK_SLOTS),
 * UW_PROCS_SIZE (processes: blocks of UW_MAX_MAPS in uw_maps), UW_STACKS_SIZE.
 *
 * A plain bounded loop with the step inlined: bpf_loop's callback is left
 * unrelocated by libbcc 0.26 (the verifier refuses it).
 */
#define UW_CHUNK 8 /* frames per step program: UW_MAX_DEPTH 64 = 8 tail calls (limit 33) */
#include "unwind_shared.h"

#define UW_HASH_LOST 1ULL
#define UW_ROW_STEPS 20 /* binary search over <= 1M rows of one file */

struct uw_user_regs {
  u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
struct uw_state {
  u64 ip, sp, bp;
};

BPF_PROG_ARRAY(uw_progs, UW_PROG_SLOTS);
BPF_ARRAY(uw_rows, struct uw_row, UW_MAX_ROWS);
BPFDIAG_HASH_LAZY(uw_procs, u32, struct uw_proc, UW_PROCS_SIZE);
BPF_ARRAY(uw_maps, struct uw_map, UW_PROCS_SIZE * UW_MAX_MAPS);
BPF_PERCPU_ARRAY(uw_scratch, struct uw_pcs, 1);
/* allocated on insert: preallocated, its 262,144 x 520 bytes would be 136 MB at every
 * start. One insert per walk; offcputime --waker walks in sched_waking, where a hard
 * interrupt waking many traced tasks at once can exhaust the kernel's per-CPU cache
 * (common.h): such a stack is lost and counted (lost_stacks), not mistaken. */
BPFDIAG_HASH_LAZY(uw_stacks, u64, struct uw_pcs, UW_STACKS_SIZE);
BPF_PERCPU_ARRAY(uw_counters, u64, UW_CNT_MAX);
BPF_PERCPU_ARRAY(uw_regs_scratch, struct uw_user_regs, 1); /* 168 bytes: off the BPF stack */

static inline void uw_count(u32 slot) {
  u64 *v = uw_counters.lookup(&slot);
  if (v)
    *v += 1;
}

/* The user registers saved at kernel entry; -1 when current has no 64-bit user
 * context (kernel threads). */
static inline __attribute__((always_inline)) int uw_user_regs(struct uw_user_regs *r) {
  void *task = (void *)bpf_get_current_task();
  void *stack = NULL;
  bpf_probe_read_kernel(&stack, sizeof(stack), task + OFF_TASK_STACK);
  if (!stack)
    return -1;
  struct uw_user_regs *p = (struct uw_user_regs *)(stack + THREAD_SIZE) - 1;
  if (bpf_probe_read_kernel(r, sizeof(*r), p))
    return -1;
  if (r->cs != 0x33 || !r->ip || !r->sp)
    return -1;
  return 0;
}

/* The table row for `look` (a pc), copied to *row: 0, else UW_ST_NO_MAPPING (no
 * executable file mapping: JIT code) or UW_ST_NO_CFI (no row for it). */
static inline __attribute__((always_inline)) int uw_find_row(struct uw_row *row, u64 look, u32 base, u32 n) {
  u32 lo = 0, hi = n;
  if (hi == 0)
    return UW_ST_NO_MAPPING;
  for (int k = 0; k < UW_MAP_STEPS; k++) {
    if (lo + 1 >= hi)
      break;
    u32 mid = lo + (hi - lo) / 2;
    u32 key = base + mid;
    struct uw_map *c = uw_maps.lookup(&key);
    if (!c)
      break;
    if (c->start <= look)
      lo = mid;
    else
      hi = mid;
  }
  u32 key = base + lo;
  struct uw_map *m = uw_maps.lookup(&key);
  if (!m || look < m->start || look >= m->end)
    return UW_ST_NO_MAPPING;
  if (m->row_n == 0)
    return UW_ST_NO_CFI;
  u32 rel = (u32)(look - m->bias);
  u32 rlo = m->row_lo, rhi = m->row_lo + m->row_n;
  for (int k = 0; k < UW_ROW_STEPS; k++) {
    if (rlo + 1 >= rhi)
      break;
    u32 mid = rlo + (rhi - rlo) / 2;
    struct uw_row *r = uw_rows.lookup(&mid);
    if (!r)
      break;
    if (r->pc <= rel)
      rlo = mid;
    else
      rhi = mid;
  }
  struct uw_row *r = uw_rows.lookup(&rlo);
  if (!r || r->pc > rel)
    return UW_ST_NO_CFI;
  *row = *r;
  return 0;
}

/* One frame: from (ip, sp, bp) to the caller's. Returns -1 to go on, else a status.
 * Code the tables do not cover (JIT code: no file mapping; a file without CFI) is
 * walked by its frame pointer, as perf and fp mode walk it, while that points into the
 * stack a little above sp (HotSpot's interpreter and C1 frames keep one): the
 * frame-pointer rule is the table row CFA = RBP + 16, RBP saved at CFA - 16, so both
 * take one path (the fallback as separate code, once per exit or once per frame, grew
 * the verifier's work 74-86% and put lockstat's pthread unwinder over 1M). */
#define UW_FP_MAX_FRAME (1ULL << 20)
static inline __attribute__((always_inline)) int uw_step(struct uw_state *s, u32 base, u32 n, u32 depth) {
  u64 look = depth ? s->ip - 1 : s->ip; /* a return address may be past its call's function */
  struct uw_row row = {};
  int miss = uw_find_row(&row, look, base, n);
  if (miss) {
    if (s->bp < s->sp || s->bp - s->sp > UW_FP_MAX_FRAME || (s->bp & 7)) /* bp == sp: no locals */
      return miss;
    row.types = UW_CFA_RBP | (UW_RBP_AT_CFA << 4);
    row.cfa_off = 16;
    row.rbp_off8 = -2;
  }
  u8 ct = row.types & 15, bt = row.types >> 4;
  u64 cfa;
  if (ct == UW_CFA_RSP)
    cfa = s->sp + row.cfa_off;
  else if (ct == UW_CFA_RBP)
    cfa = s->bp + row.cfa_off;
  else if (ct == UW_CFA_PLT)
    cfa = s->sp + 8 + (((s->ip & 15) >= 11) ? 8 : 0);
  else if (ct == UW_CFA_END)
    return UW_ST_END;
  else
    return UW_ST_NO_CFI;
  /* a frame-pointer guess that reads nowhere says why it was needed, not "unreadable" */
  u64 ra = 0;
  if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8)))
    return miss ? miss : UW_ST_UNREADABLE;
  if (bt == UW_RBP_AT_CFA) {
    u64 bp = 0;
    if (bpf_probe_read_user(&bp, sizeof(bp), (void *)(cfa + (s64)row.rbp_off8 * 8)))
      return miss ? miss : UW_ST_UNREADABLE;
    s->bp = bp;
  } else if (bt == UW_RBP_UNDEF) {
    s->bp = 0;
  }
  s->sp = cfa;
  s->ip = ra;
  if (ra == 0)
    return UW_ST_END;
  if (miss)
    uw_count(UW_CNT_FP_FRAMES);
  return -1;
}

/* The walk in flight on this CPU (between the unwinder's tail calls), and its result. */
struct uw_walk {
  u64 ip, sp, bp;
  u32 d, n, base, pad;
  u64 hash;  /* the finished walk's: 0 no user context, UW_HASH_LOST not stored */
  u64 owner; /* pid_tgid of the task walked: a uprobe's program can be preempted between
              * two tail calls (PREEMPT kernels) and another task's walk start on this
              * CPU; a walk that finds another owner gives up (UW_HASH_LOST), never mixes */
};
BPF_PERCPU_ARRAY(uw_walk_state, struct uw_walk, 1);

/* Starts a walk of current's user stack: 1 when there are frames to walk (then
 * uw_chunk), 0 when it is over already (no tables for the process: its one frame,
 * then uw_finish), -1 when there is nothing to store (no user context: hash 0). */
static inline __attribute__((always_inline)) int uw_begin(void) {
  u32 zero = 0;
  struct uw_walk *w = uw_walk_state.lookup(&zero);
  struct uw_user_regs *regs = uw_regs_scratch.lookup(&zero);
  struct uw_pcs *out = uw_scratch.lookup(&zero);
  if (!w || !regs || !out)
    return -1;
  w->hash = UW_HASH_LOST;
  w->owner = bpf_get_current_pid_tgid();
  if (uw_user_regs(regs)) {
    w->hash = 0;
    return -1;
  }
  u32 tgid = bpf_get_current_pid_tgid() >> 32;
  struct uw_proc *proc = uw_procs.lookup(&tgid);
  w->ip = regs->ip;
  w->sp = regs->sp;
  w->bp = regs->bp;
  w->d = 0;
  w->n = proc ? proc->n : 0;
  w->base = proc ? proc->slot * UW_MAX_MAPS : 0;
  out->status = UW_ST_TRUNCATED;
  out->depth = 1;
  out->pc[0] = regs->ip;
  if (!proc) {
    out->status = UW_ST_NO_MAPPING;
    return 0;
  }
  return 1;
}

/* Walks up to UW_CHUNK more frames: 1 when the walk goes on (call it again), 0 when it
 * ended (out->status says how) or reached UW_MAX_DEPTH. */
static inline __attribute__((always_inline)) int uw_chunk(void) {
  u32 zero = 0;
  struct uw_walk *w = uw_walk_state.lookup(&zero);
  struct uw_pcs *out = uw_scratch.lookup(&zero);
  if (!w || !out)
    return 0;
  u64 me = bpf_get_current_pid_tgid();
  if (w->owner != me)
    return 0;
  struct uw_state s = {w->ip, w->sp, w->bp};
  u32 d0 = w->d, n = w->n, base = w->base;
  /* Never clamp to a constant here (n = UW_MAX_MAPS): with constant bounds the
   * verifier computes every search path to a different constant and explores each
   * one apart (measured: 1M+ instructions at depth 8). The front-end writes n <= max. */
  if (n > UW_MAX_MAPS)
    n = 0;
  for (u32 i = 0; i < UW_CHUNK; i++) {
    u32 d = d0 + i;
    if (d >= UW_MAX_DEPTH)
      return 0; /* truncated */
    /* the mask after an opaque copy: clang drops `d & 63` after `d < 64` and the
     * verifier, which cannot follow that, refuses the store */
    u32 slot = d;
    asm volatile("" : "+r"(slot));
    out->pc[slot & (UW_STACK_SLOTS - 1)] = s.ip;
    out->depth = d + 1;
    int st = uw_step(&s, base, n, d);
    if (st >= 0) {
      out->status = st;
      return 0;
    }
  }
  if (w->owner != me)
    return 0;
  w->ip = s.ip;
  w->sp = s.sp;
  w->bp = s.bp;
  w->d = d0 + UW_CHUNK;
  return 1;
}

/* Ends the walk: the stack's hash (frames stored in uw_stacks) in uw_walk_state.hash
 * for the tool's program. */
static inline __attribute__((always_inline)) void uw_finish(void) {
  u32 zero = 0;
  struct uw_walk *w = uw_walk_state.lookup(&zero);
  struct uw_pcs *out = uw_scratch.lookup(&zero);
  if (!w || !out || w->owner != bpf_get_current_pid_tgid())
    return;
  u32 depth = out->depth, status = out->status;
  u64 h = 14695981039346656037ULL;
  /* a fixed trip count (no break on depth): clang's unrolling of a depth-bounded loop
   * walks a pointer the verifier cannot bound */
  for (u32 i = 0; i < UW_MAX_DEPTH; i++) {
    u64 pc = out->pc[i & (UW_STACK_SLOTS - 1)];
    h ^= i < depth ? pc : 0;
    h *= 1099511628211ULL;
  }
  h ^= status;
  h *= 1099511628211ULL;
  if (h <= UW_HASH_LOST)
    h += 2;
  uw_count(UW_CNT_STACKS);
  if (status != UW_ST_END)
    uw_count(status); /* UW_CNT_TRUNCATED.. share the status numbers */
  if (!uw_stacks.lookup(&h) && uw_stacks.update(&h, out)) {
    uw_count(UW_CNT_STACKS_FULL);
    h = UW_HASH_LOST;
  }
  w->hash = h;
}

/* The unwinder's programs for uw_progs (any program type: ctx is only passed on). A
 * failed tail call (none is expected: all are installed before attaching, and a walk
 * takes UW_MAX_DEPTH / UW_CHUNK + 2 of the kernel's 33) ends the walk here: the frames
 * so far are stored, status truncated. */
int uw_walk_begin(void *ctx) {
  int r = uw_begin();
  if (r > 0)
    uw_progs.call(ctx, UW_PROG_WALK);
  if (r >= 0)
    uw_finish();
  uw_progs.call(ctx, UW_PROG_TOOL);
  return 0;
}
int uw_walk_step(void *ctx) {
  if (uw_chunk())
    uw_progs.call(ctx, UW_PROG_WALK);
  uw_finish();
  uw_progs.call(ctx, UW_PROG_TOOL);
  return 0;
}

/* In the tool's program (UW_PROG_TOOL): the walk's result, current's user stack
 * (process tgid): its hash, frames in uw_stacks; 0: no user context (kernel thread);
 * UW_HASH_LOST: not stored. Taken once: a second call answers UW_HASH_LOST. */
static inline __attribute__((always_inline)) u64 uw_unwind_user(u32 tgid) {
  (void)tgid; /* the walk was of current, the process the caller names */
  u32 zero = 0;
  struct uw_walk *w = uw_walk_state.lookup(&zero);
  if (!w || w->owner != bpf_get_current_pid_tgid())
    return UW_HASH_LOST;
  u64 h = w->hash;
  w->hash = UW_HASH_LOST;
  return h;
}
