/* Declared waits, shared by bpf_sources/declared.h and the front-ends
 * (common/declared_waits.h). Plain C. */
#ifndef BPFDIAG_DECLARED_SHARED_H
#define BPFDIAG_DECLARED_SHARED_H

/* Each probe location that begins a declared wait has a slot: its handler
 * declared_begin_N reads decl_cfg[N] for the rule and the argument naming the wait.
 * A wait's identity ("raw") is (rule + 1) << 56 | the argument (an enumeration value,
 * or the string's address, whose text is kept in decl_names). */
#define DECL_SLOTS 16
#define DECL_NAME_LEN 48
#define DECL_ARG_NONE 0
#define DECL_ARG_REG 1
#define DECL_ARG_MEM 2
#define DECL_ARG_IMM 3
#define DECL_ARG_MASK ((1ULL << 56) - 1)
struct declared_cfg {
  __u32 rule;      /* index of the rule among the wait rules' declared waits */
  __u32 arg_kind;  /* DECL_ARG_* */
  __u32 reg;       /* pt_regs slot (x86-64: r15 = 0 ... ss = 20) */
  __u32 size;      /* 1, 2, 4, 8 */
  __s64 value;     /* MEM: displacement; IMM: the constant */
  __u32 is_string; /* the argument is a char * */
  __u32 pad;
};
struct declared_name_key {
  __u32 pid;
  __u32 pad;
  __u64 ptr;
};
struct declared_name {
  char s[DECL_NAME_LEN];
};

#endif
