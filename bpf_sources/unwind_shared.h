/* Shared between bpf_sources/unwind.h (in-BPF user-stack unwinding from DWARF CFI
 * tables) and common/unwind_tables, common/unwind_maps (issue 11). x86-64 only. */
#ifndef BPFDIAG_UNWIND_SHARED_H
#define BPFDIAG_UNWIND_SHARED_H

/* Slots of the prog array uw_progs (tail call targets): the unwinder's first program
 * (the tool's handler tail-calls it), a tool's own program its unwound program may
 * tail-call in turn (lockstat --uprobes records its wait there), the unwinder's step
 * program (UW_CHUNK frames, then itself again), and the tool's program that takes the
 * finished walk (uw_unwind_user). */
#define UW_PROG_UNWIND 0
#define UW_PROG_AFTER 1
#define UW_PROG_WALK 2
#define UW_PROG_TOOL 3
#define UW_PROG_SLOTS 4

/* Row of a compact unwind table (8 bytes): from `pc` (an ELF virtual address:
 * runtime pc - load bias) up to the next row's pc, CFA = reg + cfa_off and the
 * return address is at CFA - 8; the caller's RBP per the high nibble of `types`. */
enum uw_cfa_type {
  UW_CFA_NONE = 0, /* no CFI for this range, or a rule the table cannot express */
  UW_CFA_RSP = 1,  /* CFA = RSP + cfa_off */
  UW_CFA_RBP = 2,  /* CFA = RBP + cfa_off */
  UW_CFA_PLT = 3,  /* .plt idiom: CFA = RSP + 8 + ((pc & 15) >= 11 ? 8 : 0) */
  UW_CFA_END = 4,  /* return address undefined: the outermost frame (_start, clone) */
};
enum uw_rbp_type {
  UW_RBP_SAME = 0,   /* caller's RBP = this frame's RBP */
  UW_RBP_AT_CFA = 1, /* saved at CFA + 8 * rbp_off8 */
  UW_RBP_UNDEF = 2,  /* unknown from here on */
};
struct uw_row {
  __u32 pc;
  __s16 cfa_off;
  __u8 types; /* enum uw_cfa_type | enum uw_rbp_type << 4 */
  __s8 rbp_off8;
};

/* One executable file mapping of a process; its rows are uw_rows[row_lo, row_lo + row_n).
 * A process's mappings, sorted by start, are uw_maps[slot * UW_MAX_MAPS + i], i < n:
 * found by binary search with one array lookup per step (an index into a map value
 * would make the verifier track every step's bounds and explore each exit apart). */
#define UW_MAX_MAPS 128 /* per process (binary search: 7 steps) */
#define UW_MAP_STEPS 8
struct uw_map {
  __u64 start, end, bias;
  __u32 row_lo, row_n; /* row_n == 0: the file has no usable CFI */
};
struct uw_proc {
  __u32 n;    /* mappings */
  __u32 slot; /* its mappings' block in uw_maps */
};

/* An unwound user stack: pcs innermost first (pc[0] is the interrupted IP, the
 * others are return addresses), and why the walk stopped. */
#define UW_STACK_SLOTS 64 /* UW_MAX_DEPTH <= this */
enum uw_status {
  UW_ST_END = 0,        /* reached the outermost frame (RA undefined or 0) */
  UW_ST_TRUNCATED = 1,  /* depth limit */
  UW_ST_NO_CFI = 2,     /* a pc in a known file without a table row for it */
  UW_ST_NO_MAPPING = 3, /* a pc outside every known executable file mapping */
  UW_ST_UNREADABLE = 4, /* a stack word could not be read (page not present) */
};
struct uw_pcs {
  __u64 pc[UW_STACK_SLOTS];
  __u32 depth;
  __u32 status;
};

/* Per-CPU counters (`uw_counters`), one per captured stack that stopped early. */
enum uw_counter {
  UW_CNT_STACKS = 0,   /* stacks unwound */
  UW_CNT_TRUNCATED,    /* data_quality.ustack_truncated */
  UW_CNT_NO_CFI,       /* data_quality.ustack_no_cfi */
  UW_CNT_NO_MAPPING,   /* data_quality.ustack_no_mapping */
  UW_CNT_UNREADABLE,   /* data_quality.ustack_unreadable */
  UW_CNT_STACKS_FULL,  /* map_full: uw_stacks full, the stack was lost */
  UW_CNT_FP_FRAMES,    /* data_quality.ustack_fp_frames: frames of code without CFI (JIT)
                        * walked by their frame pointer */
  UW_CNT_MAX
};

#endif
