/* Declared waits: the USDT probe pairs software fires around its own waits
 * (common/wait_sites.h `usdt:` rules), named by one of the begin probe's arguments.
 * Pasted into a tool's program text (common/bpf_text: libbcc rewrites map calls only
 * in the main file). The front-end (common/declared_waits) fills decl_cfg and attaches
 * declared_begin_N at each begin location and declared_done at each done.
 *
 * The tool defines, before `DECLARED_PROGRAMS()`:
 *   static inline int on_declared_begin(struct pt_regs *ctx, u32 slot);
 *   int declared_done(struct pt_regs *ctx);
 * and calls declared_raw(ctx, slot, pid) for the wait's identity (0: no slot). */
#include <uapi/linux/ptrace.h>
#include "declared_shared.h"

BPF_ARRAY(decl_cfg, struct declared_cfg, DECL_SLOTS);
BPFDIAG_HASH_LAZY(decl_names, struct declared_name_key, struct declared_name, 4096);

/* x86-64 struct pt_regs as u64 slots: a copy (a load from ctx at a computed offset is
 * refused by the verifier, and clang turns a switch of constant loads into one) */
static inline u64 declared_reg(struct pt_regs *ctx, u32 slot) {
  u64 regs[21] = {};
  bpf_probe_read_kernel(regs, sizeof(regs), ctx);
  if (slot >= 21)
    return 0;
  return regs[slot];
}

/* The argument naming the wait, zero-extended from its size. */
static inline u64 declared_arg(struct pt_regs *ctx, struct declared_cfg *c) {
  if (c->arg_kind == DECL_ARG_IMM)
    return (u64)c->value;
  if (c->arg_kind != DECL_ARG_REG && c->arg_kind != DECL_ARG_MEM)
    return 0;
  u64 v = declared_reg(ctx, c->reg);
  if (c->arg_kind == DECL_ARG_MEM) {
    void *a = (void *)(v + c->value);
    v = 0;
    bpf_probe_read_user(&v, sizeof(v), a);
  }
  switch (c->size) {
  case 1: return v & 0xff;
  case 2: return v & 0xffff;
  case 4: return v & 0xffffffffULL;
  }
  return v;
}

/* The identity of the wait begun at `slot` (0 when the slot is not configured); a
 * string argument's text is kept once per process and address. Returns 0 and counts
 * `full_slot` when decl_names is full. */
static inline u64 declared_raw(struct pt_regs *ctx, u32 slot, u32 pid, u32 full_slot) {
  struct declared_cfg *c = decl_cfg.lookup(&slot);
  if (!c)
    return 0;
  u64 v = declared_arg(ctx, c);
  if (c->is_string && v) {
    struct declared_name_key nk = {};
    nk.pid = pid;
    nk.ptr = v;
    if (!decl_names.lookup(&nk)) {
      struct declared_name nm = {};
      bpf_probe_read_user_str(nm.s, sizeof(nm.s), (void *)v);
      if (decl_names.update(&nk, &nm))
        dq_count(full_slot);
    }
  }
  return ((u64)(c->rule + 1) << 56) | (v & DECL_ARG_MASK);
}

#define DECLARED_BEGIN(n) \
  int declared_begin_##n(struct pt_regs *ctx) { return on_declared_begin(ctx, n); }
/* DECLARED_PROGRAMS() defines declared_begin_0 .. declared_begin_<DECL_BEGINS - 1>: the
 * front-end sets DECL_BEGINS (a decimal literal, 0..DECL_SLOTS) to the slots its scan
 * filled, so a run compiles only the begins it attaches (each is a full copy of
 * on_declared_begin: 16 copies were 2/3 of lockstat's program and of its compile time).
 * Without it (--ebpf, scripts/check-bpf-variants) all DECL_SLOTS are defined. */
#ifndef DECL_BEGINS
#define DECL_BEGINS 16 /* DECL_SLOTS, as a literal */
#endif
#if DECL_BEGINS > DECL_SLOTS
#error "DECL_BEGINS is more than DECL_SLOTS"
#endif
#define DECLARED_PROGRAMS_0
#define DECLARED_PROGRAMS_1 DECLARED_PROGRAMS_0 DECLARED_BEGIN(0)
#define DECLARED_PROGRAMS_2 DECLARED_PROGRAMS_1 DECLARED_BEGIN(1)
#define DECLARED_PROGRAMS_3 DECLARED_PROGRAMS_2 DECLARED_BEGIN(2)
#define DECLARED_PROGRAMS_4 DECLARED_PROGRAMS_3 DECLARED_BEGIN(3)
#define DECLARED_PROGRAMS_5 DECLARED_PROGRAMS_4 DECLARED_BEGIN(4)
#define DECLARED_PROGRAMS_6 DECLARED_PROGRAMS_5 DECLARED_BEGIN(5)
#define DECLARED_PROGRAMS_7 DECLARED_PROGRAMS_6 DECLARED_BEGIN(6)
#define DECLARED_PROGRAMS_8 DECLARED_PROGRAMS_7 DECLARED_BEGIN(7)
#define DECLARED_PROGRAMS_9 DECLARED_PROGRAMS_8 DECLARED_BEGIN(8)
#define DECLARED_PROGRAMS_10 DECLARED_PROGRAMS_9 DECLARED_BEGIN(9)
#define DECLARED_PROGRAMS_11 DECLARED_PROGRAMS_10 DECLARED_BEGIN(10)
#define DECLARED_PROGRAMS_12 DECLARED_PROGRAMS_11 DECLARED_BEGIN(11)
#define DECLARED_PROGRAMS_13 DECLARED_PROGRAMS_12 DECLARED_BEGIN(12)
#define DECLARED_PROGRAMS_14 DECLARED_PROGRAMS_13 DECLARED_BEGIN(13)
#define DECLARED_PROGRAMS_15 DECLARED_PROGRAMS_14 DECLARED_BEGIN(14)
#define DECLARED_PROGRAMS_16 DECLARED_PROGRAMS_15 DECLARED_BEGIN(15)
#define DECLARED_PROGRAMS_CAT(n) DECLARED_PROGRAMS_##n
#define DECLARED_PROGRAMS_N(n) DECLARED_PROGRAMS_CAT(n)
#define DECLARED_PROGRAMS() DECLARED_PROGRAMS_N(DECL_BEGINS)
