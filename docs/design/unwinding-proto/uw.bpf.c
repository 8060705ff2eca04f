// Prototype BPF side for the issue-11 design study. One sched_switch handler, three
// modes selected by -D: MODE_FP (bpf_get_stackid user stack, today's tools),
// MODE_TABLE (design a: unwind here from compact .eh_frame tables), MODE_COPY
// (design b: copy registers + COPY_BYTES of user stack to a perf buffer).
#include <uapi/linux/ptrace.h>

#ifndef MAX_DEPTH
#define MAX_DEPTH 64
#endif
#define MAX_MAPS 32

struct uw_pregs { u64 r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss; };

enum { C_EVENTS, C_FRAMES, C_END_OK, C_TRUNC, C_NO_MAP, C_NO_CFI, C_READ_FAIL, C_BAD_REGS, C_COPY_SHORT, C_COPY_BYTES, C_NCOUNT };
BPF_PERCPU_ARRAY(cnt, u64, C_NCOUNT);
static inline void count(u32 k, u64 v) { u64 *p = cnt.lookup(&k); if (p) *p += v; }

static inline int user_regs(struct uw_pregs *r) {
  void *task = (void *)bpf_get_current_task();
  void *stack = NULL;
  bpf_probe_read_kernel(&stack, sizeof(stack), task + OFF_TASK_STACK);
  if (!stack) return -1;
  struct uw_pregs *p = (struct uw_pregs *)(stack + THREAD_SIZE) - 1;
  if (bpf_probe_read_kernel(r, sizeof(*r), p)) return -1;
  if (r->cs != 0x33 || !r->ip || !r->sp) return -1;  // not a 64-bit user context
  return 0;
}

#ifdef MODE_FP
BPF_STACK_TRACE(fp_stacks, 4096);
BPF_HASH(fp_counts, u64, u64, 4096);
#endif

#ifdef MODE_TABLE
struct uw_row { u32 pc; s16 cfa_off; u8 types; s8 rbp_off8; };
struct uw_map { u64 start, end, bias; u32 lo, n; };
struct uw_stack { u64 pcs[MAX_DEPTH]; };
struct uw_state { u64 ip, sp, bp; u32 depth, done; struct uw_stack *st; };
BPF_ARRAY(rows, struct uw_row, MAX_ROWS);
BPF_ARRAY(umaps, struct uw_map, MAX_MAPS);
BPF_PERCPU_ARRAY(scratch, struct uw_stack, 1);
BPF_HASH(ustacks, u64, struct uw_stack, 4096);     // stack hash -> pcs
BPF_HASH(tcounts, u64, u64, 4096);                 // (hash ^ depth) -> events
BPF_HASH(tdepth, u64, u32, 4096);                  // hash -> depth | status << 16

static inline __attribute__((always_inline)) long uw_step(u32 idx, struct uw_state *s) {
  if (s->depth >= MAX_DEPTH) { count(C_TRUNC, 1); return 1; }
  u64 pc = s->ip;
  s->st->pcs[s->depth & (MAX_DEPTH - 1)] = pc;
  s->depth++;
  count(C_FRAMES, 1);
  u64 look = s->depth > 1 ? pc - 1 : pc;
  struct uw_map *m = NULL;
  for (u32 i = 0; i < MAX_MAPS; i++) {
    u32 k = i;
    struct uw_map *c = umaps.lookup(&k);
    if (!c || c->end == 0) break;
    if (look >= c->start && look < c->end) { m = c; break; }
  }
  if (!m) { count(C_NO_MAP, 1); s->done = 2; return 1; }
  if (m->n == 0) { count(C_NO_CFI, 1); s->done = 3; return 1; }
  u32 rel = (u32)(look - m->bias);
  u32 lo = m->lo, hi = m->lo + m->n;
  for (int k = 0; k < 24; k++) {
    if (lo + 1 >= hi) break;
    u32 mid = lo + (hi - lo) / 2;
    struct uw_row *r = rows.lookup(&mid);
    if (!r) break;
    if (r->pc <= rel) lo = mid; else hi = mid;
  }
  struct uw_row *r = rows.lookup(&lo);
  if (!r || r->pc > rel) { count(C_NO_CFI, 1); s->done = 3; return 1; }
  u8 ct = r->types & 15, bt = r->types >> 4;
  u64 cfa;
  if (ct == 1) cfa = s->sp + r->cfa_off;
  else if (ct == 2) cfa = s->bp + r->cfa_off;
  else if (ct == 3) cfa = s->sp + 8 + (((pc & 15) >= 11) ? 8 : 0);
  else if (ct == 4) { count(C_END_OK, 1); s->done = 1; return 1; }
  else { count(C_NO_CFI, 1); s->done = 3; return 1; }
  u64 ra = 0;
  if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8))) { count(C_READ_FAIL, 1); s->done = 4; return 1; }
  if (bt == 1) {
    u64 bp = 0;
    if (bpf_probe_read_user(&bp, sizeof(bp), (void *)(cfa + (s64)r->rbp_off8 * 8))) { count(C_READ_FAIL, 1); s->done = 4; return 1; }
    s->bp = bp;
  } else if (bt == 2) {
    s->bp = 0;
  }
  s->sp = cfa;
  s->ip = ra;
  if (ra == 0) { count(C_END_OK, 1); s->done = 1; return 1; }
  return 0;
}
#endif

#ifdef MODE_COPY
struct uw_copy { u32 pid, tid; u64 ip, sp, bp; u32 len, pad; u8 data[COPY_BYTES + 8192]; };  /* headroom the verifier can prove */
BPF_PERCPU_ARRAY(copy_scratch, struct uw_copy, 1);
BPF_PERF_OUTPUT(copies);
#endif

TRACEPOINT_PROBE(sched, sched_switch) {
  u64 id = bpf_get_current_pid_tgid();
  if ((id >> 32) != TARGET_TGID || (u32)id != args->prev_pid) return 0;
  count(C_EVENTS, 1);
#ifdef MODE_FP
  u64 sid = fp_stacks.get_stackid(args, BPF_F_USER_STACK);
  u64 key = (sid << 32) | (u32)id, one = 1, *v = fp_counts.lookup(&key);
  if (v) *v += 1; else fp_counts.update(&key, &one);
#endif
#ifdef MODE_TABLE
  struct uw_pregs regs;
  if (user_regs(&regs)) { count(C_BAD_REGS, 1); return 0; }
  u32 zero = 0;
  struct uw_stack *st = scratch.lookup(&zero);
  if (!st) return 0;
  struct uw_state s;
  s.ip = regs.ip; s.sp = regs.sp; s.bp = regs.bp; s.depth = 0; s.done = 0; s.st = st;
#ifdef USE_BPF_LOOP
  bpf_loop(MAX_DEPTH, uw_step, &s, 0);  /* libbcc 0.26 leaves the callback unrelocated */
#else
  for (u32 d = 0; d < MAX_DEPTH; d++)
    if (uw_step(d, &s)) break;
#endif
  if (!s.done && s.depth >= MAX_DEPTH) count(C_TRUNC, 1);
  u64 h = 1469598103934665603ULL;
  for (u32 i = 0; i < MAX_DEPTH; i++) { if (i >= s.depth) break; h ^= st->pcs[i]; h *= 1099511628211ULL; }
  h ^= id << 32 >> 32;  // per thread, for the prototype's report
  ustacks.update(&h, st);
  u32 dd = s.depth | s.done << 16;
  tdepth.update(&h, &dd);
  u64 one = 1, *v = tcounts.lookup(&h);
  if (v) *v += 1; else tcounts.update(&h, &one);
#endif
#ifdef MODE_COPY
  u32 zero = 0;
  struct uw_copy *c = copy_scratch.lookup(&zero);
  if (!c) return 0;
  struct uw_pregs regs;
  if (user_regs(&regs)) { count(C_BAD_REGS, 1); return 0; }
  c->pid = id >> 32; c->tid = (u32)id; c->ip = regs.ip; c->sp = regs.sp; c->bp = regs.bp;
  /* page by page so an unmapped page past the stack's top ends the copy, not voids it */
  u64 first = 4096 - (regs.sp & 4095);  /* 1..4096 */
  u32 len = 0;
  if (bpf_probe_read_user(c->data, first, (void *)regs.sp) == 0) {
    len = first;
#pragma unroll
    for (int k = 0; k < COPY_BYTES / 4096; k++) {
      u64 off = first + k * 4096;           /* verifier: <= COPY_BYTES */
      if (off >= COPY_BYTES) break;
      if (bpf_probe_read_user(c->data + off, 4096, (void *)(regs.sp + off))) break;
      len = off + 4096;
    }
  }
  if (len > COPY_BYTES) len = COPY_BYTES;
  if (len < COPY_BYTES) count(C_COPY_SHORT, 1);
  count(C_COPY_BYTES, len);
  c->len = len;
  u32 sz = __builtin_offsetof(struct uw_copy, data) + len;
  if (sz > sizeof(*c)) sz = sizeof(*c);
  copies.perf_submit(args, c, sz);
#endif
  return 0;
}
