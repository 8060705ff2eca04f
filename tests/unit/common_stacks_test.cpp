#include <doctest/doctest.h>
#include <linux/types.h>

#include <sstream>

#include "common/stack_reader.h"
#include "common/stacks.h"
extern "C" {
#include "stacks_shared.h"
}

using namespace bpfdiag;

static Stack sample() {
  Stack st;
  st.kernel = {"__schedule", "schedule", "anon_pipe_read", "vfs_read"};
  st.user = {"read", "reader_thread(void*)", "start_thread"};
  return st;
}

TEST_CASE("stacks: multi-line layout (BCC)") {
  std::ostringstream os;
  print_stack_multiline(os, sample(), "blockers", 1234, 5000);
  CHECK(os.str() ==
        "    __schedule\n"
        "    schedule\n"
        "    anon_pipe_read\n"
        "    vfs_read\n"
        "    read\n"
        "    reader_thread(void*)\n"
        "    start_thread\n"
        "    -                blockers (1234)\n"
        "        5000\n\n");
}

TEST_CASE("stacks: multi-line with delimiter and missed stacks") {
  std::ostringstream os;
  Stack st = sample();
  print_stack_multiline(os, st, "x", 1, 7, StackFormat{true});
  CHECK(os.str().find("    vfs_read\n    --\n    read\n") != std::string::npos);
  st.user_missing = true;
  std::ostringstream os2;
  print_stack_multiline(os2, st, "x", 1, 7, StackFormat{true});
  CHECK(os2.str().find("    vfs_read\n    --\n    [Missed User Stack]\n    -                x (1)\n") !=
        std::string::npos);
  Stack k;
  k.kernel_missing = true;
  k.want_user = false;
  std::ostringstream os3;
  print_stack_multiline(os3, k, "kworker/0:1", 9, 1);
  CHECK(os3.str() == "    [Missed Kernel Stack]\n    -                kworker/0:1 (9)\n        1\n\n");
}

TEST_CASE("stacks: folded line order and '-' separator") {
  CHECK(folded_line("blockers", sample(), 5000) ==
        "blockers;start_thread;reader_thread(void*);read;-;vfs_read;anon_pipe_read;schedule;__schedule 5000");
  Stack u = sample();
  u.want_kernel = false;
  CHECK(folded_line("b", u, 1) == "b;start_thread;reader_thread(void*);read 1");
  Stack k = sample();
  k.want_user = false;
  CHECK(folded_line("b", k, 2) == "b;vfs_read;anon_pipe_read;schedule;__schedule 2");
  Stack kt = sample();
  kt.user.clear();  // kernel thread: no user part, no separator
  CHECK(folded_line("kworker/1:0", kt, 3) == "kworker/1:0;vfs_read;anon_pipe_read;schedule;__schedule 3");
  Stack m = sample();
  m.user_missing = true;
  CHECK(folded_line("b", m, 4) == "b;[Missed User Stack];-;vfs_read;anon_pipe_read;schedule;__schedule 4");
}

TEST_CASE("stacks: folded round trip") {
  Stack st = sample();
  st.user.push_back("weird;name\nwith newline");
  std::string line = folded_line("my comm", st, 123456789);
  auto p = parse_folded(line);
  REQUIRE(p);
  CHECK(p->value == 123456789);
  REQUIRE(p->frames.size() == 1 + 4 + 1 + 4);
  CHECK(p->frames[0] == "my comm");
  CHECK(p->frames[1] == "weird:name with newline");
  CHECK(p->frames[2] == "start_thread");
  CHECK(p->frames[5] == "-");
  CHECK(p->frames.back() == "__schedule");
  // re-fold the parsed frames gives the same line
  std::string again = p->frames[0];
  for (size_t i = 1; i < p->frames.size(); ++i) again += ";" + p->frames[i];
  CHECK(again + " " + std::to_string(p->value) == line);
}

TEST_CASE("stacks: folded parser rejects junk") {
  CHECK_FALSE(parse_folded("no value"));
  CHECK_FALSE(parse_folded("a;b 12x"));
  CHECK_FALSE(parse_folded("a;;b 1"));
  CHECK_FALSE(parse_folded("a;b 99999999999999999999999"));
  CHECK_FALSE(parse_folded(""));
  auto ok = parse_folded("a;b c;d 5\n");
  REQUIRE(ok);
  CHECK(ok->frames.size() == 3);
  CHECK(ok->frames[1] == "b c");
}

TEST_CASE("stacks: lost ids") {
  CHECK(stack_id_lost(-17));  // -EEXIST: hash collision
  CHECK(stack_id_lost(-12));  // -ENOMEM
  CHECK_FALSE(stack_id_lost(-14));  // -EFAULT: no user stack (kernel thread)
  CHECK_FALSE(stack_id_lost(0));
}

TEST_CASE("stacks: tracing-machinery frames are recognised") {
  CHECK(bpfdiag::is_tracing_frame("bpf_trace_run4"));
  CHECK(bpfdiag::is_tracing_frame("__traceiter_sched_switch"));
  CHECK(bpfdiag::is_tracing_frame("_einittext"));
  CHECK(bpfdiag::is_tracing_frame("bpf_prog_6deef7357e7b4530_sched_switch"));
  CHECK_FALSE(bpfdiag::is_tracing_frame("__schedule"));
  CHECK_FALSE(bpfdiag::is_tracing_frame("schedule"));
  CHECK_FALSE(bpfdiag::is_tracing_frame("do_nanosleep"));
}

// ---- common/stack_reader: ids from bpf_sources/stacks.h's bpfdiag_stack_id -------

namespace {
// A stack table holding ids 3 and 5, and an overflow map holding index 7.
StackReader fake_reader() {
  StackReader::TableLookup table = [](int32_t id) -> std::vector<uint64_t> {
    if (id == 3) return {0x1000, 0x2000};
    if (id == 5) return {0x5000};
    return {};  // cleared or evicted
  };
  StackReader::Overflow overflow;
  overflow[7] = {0x7000, 0x7100, 0x7200};
  return StackReader(table, overflow);
}
}  // namespace

TEST_CASE("stack_reader: id decoding (table, overflow bit, none, lost)") {
  CHECK(stack_id_kind(0) == StackIdKind::Table);
  CHECK(stack_id_kind(3) == StackIdKind::Table);
  CHECK(stack_id_kind(BPFDIAG_OVERFLOW_BIT | 7) == StackIdKind::Overflow);
  CHECK(stack_id_kind(-14) == StackIdKind::None);  // -EFAULT: no such part
  CHECK(stack_id_kind(-17) == StackIdKind::Lost);  // -EEXIST with the overflow map refused too
  CHECK(stack_id_kind(-12) == StackIdKind::Lost);  // -ENOMEM: both maps full
  CHECK(stack_id_kind(-1) == StackIdKind::Lost);
  // ids of a CPU's counter: (cpu << shift) | n, the bit on top
  int64_t id = BPFDIAG_OVERFLOW_BIT | (1 << BPFDIAG_OVERFLOW_CPU_SHIFT) | 42;
  CHECK(stack_id_kind(id) == StackIdKind::Overflow);
  CHECK(overflow_index(id) == ((1u << BPFDIAG_OVERFLOW_CPU_SHIFT) | 42));
  CHECK(BPFDIAG_OVERFLOW_BIT > 0);  // ids stay positive in the s32 keys
  CHECK((2u << BPFDIAG_OVERFLOW_CPU_SHIFT) < static_cast<uint32_t>(BPFDIAG_OVERFLOW_BIT));
}

TEST_CASE("stack_reader: addresses come from the table or the overflow map") {
  StackReader r = fake_reader();
  CHECK(r.addrs(3) == std::vector<uint64_t>{0x1000, 0x2000});
  CHECK(r.addrs(BPFDIAG_OVERFLOW_BIT | 7) == std::vector<uint64_t>{0x7000, 0x7100, 0x7200});
  CHECK(r.addrs(7).empty());                          // 7 without the bit: the table's, absent
  CHECK(r.addrs(BPFDIAG_OVERFLOW_BIT | 3).empty());  // 3 with the bit: the overflow map's, absent
  CHECK(r.addrs(-17).empty());
  CHECK(r.addrs(-14).empty());
  CHECK(r.overflow_size() == 1);
}

TEST_CASE("stack_reader: lost and vanished parts") {
  StackReader r = fake_reader();
  auto p = r.part(-14);  // no such part: neither missing nor lost
  CHECK_FALSE(p.missing);
  CHECK_FALSE(p.vanished);
  p = r.part(-17);  // lost in BPF (counted there): missing, not vanished
  CHECK(p.missing);
  CHECK_FALSE(p.vanished);
  CHECK_FALSE(r.part(-17, false).missing);  // the idle task's user part
  p = r.part(9);  // stored, gone from the table when read
  CHECK(p.missing);
  CHECK(p.vanished);
  p = r.part(BPFDIAG_OVERFLOW_BIT | 8);  // stored in the overflow map, gone
  CHECK(p.vanished);
  p = r.part(BPFDIAG_OVERFLOW_BIT | 7);
  CHECK_FALSE(p.missing);
  CHECK(p.addrs.size() == 3);
}

TEST_CASE("stack_reader: resolve counts only vanished stacks in lost_stacks") {
  StackReader r = fake_reader();
  Symbolizer sym;
  DataQuality dq;
  // kernel part only (no process to symbolize in): found in the overflow map
  Stack st = r.resolve(sym, 0, -1, BPFDIAG_OVERFLOW_BIT | 7, StackParts{false, true}, &dq);
  CHECK_FALSE(st.kernel_missing);
  CHECK(st.kernel.size() == 3);
  CHECK(dq.lost_stacks == 0);
  st = r.resolve(sym, 0, -1, -17, StackParts{false, true}, &dq);  // lost in BPF: counted there
  CHECK(st.kernel_missing);
  CHECK(dq.lost_stacks == 0);
  st = r.resolve(sym, 0, -1, 11, StackParts{false, true}, &dq);  // vanished: counted here
  CHECK(st.kernel_missing);
  CHECK(dq.lost_stacks == 1);
  st = r.resolve(sym, 0, -1, BPFDIAG_OVERFLOW_BIT | 1, StackParts{false, true}, nullptr);
  CHECK(st.kernel_missing);
  CHECK(dq.lost_stacks == 1);
  CHECK_FALSE(st.want_user);
}
