// One-line load and compile errors (common/bpf_session): a verifier rejection is named
// as such with the instructions it processed; a compile error is its first error line.
// The inputs are what libbcc 0.26 and clang/LLVM printed here (kernel 6.18).
#include <doctest/doctest.h>

#include <string>

#include "common/bpf_session.h"

using namespace bpfdiag;

TEST_CASE("load failure: a verifier log becomes one line with processed insns") {
  const std::string log =
      "bpf: Failed to load program: Permission denied\n"
      "0: R1=ctx() R10=fp0\n"
      "0: (b7) r1 = 0                        ; R1=0\n"
      "6: (85) call bpf_map_lookup_elem#1    ; R0=map_value_or_null(id=1,map=h,ks=4,vs=8)\n"
      "7: (79) r0 = *(u64 *)(r0 +0)\n"
      "R0 invalid mem access 'map_value_or_null'\n"
      "processed 7 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0 mark_read 0\n"
      "\n"
      "HINT: The 'map_value_or_null' error can happen if you dereference a pointer value from a map lookup "
      "without first checking if that pointer is NULL.\n";
  std::string l = load_failure_line("raw_tracepoint__sched_switch", log, "Failed to load raw_tracepoint__sched_switch: -1");
  CHECK(l == "the kernel verifier rejected raw_tracepoint__sched_switch: R0 invalid mem access 'map_value_or_null' "
             "(processed 7 insns)");
  CHECK(l.find("CONFIG_TRACEPOINTS") == std::string::npos);
}

TEST_CASE("load failure: E2BIG is the verifier's complexity limit") {
  std::string l = load_failure_line(
      "uw_offcpu_tail", "bpf: Argument list too long. Program  too large (1166 insns), at most 4096 insns\n\n",
      "Failed to load uw_offcpu_tail: -1");
  CHECK(l.find("the kernel verifier rejected uw_offcpu_tail") == 0);
  CHECK(l.find("over 1000000 instructions processed") != std::string::npos);
  CHECK(l.find('\n') == std::string::npos);
}

TEST_CASE("load failure: no verifier log is not called a verifier rejection") {
  std::string l = load_failure_line("f", "sha1 socket not available\n", "Failed to load f: -1");
  CHECK(l == "cannot load f: Failed to load f: -1");
}

TEST_CASE("compile errors: the first error line, LLVM backend errors without their dummy location") {
  CHECK(first_compile_error("In file included from /virtual/main.c:1:\n"
                            "/virtual/main.c:1:45: error: use of undeclared identifier 'undefined_thing'\n"
                            "/virtual/main.c:2:1: error: another\n2 errors generated.\n") ==
        "/virtual/main.c:1:45: error: use of undeclared identifier 'undefined_thing'");
  CHECK(first_compile_error("error: <unknown>:0:0: in function f i32 (ptr): Looks like the BPF stack limit of 512 "
                            "bytes is exceeded. Please move large on stack variables into BPF per-cpu array map.\n\n") ==
        "error: in function f i32 (ptr): Looks like the BPF stack limit of 512 bytes is exceeded. Please move large on "
        "stack variables into BPF per-cpu array map.");
  CHECK(first_compile_error("warning: nothing\n") == "");
}
