// USDT notes (common/usdt): argument specs as compilers write them, note descriptors
// (well-formed and not), the notes of a real file (our declared_waits workload), and
// the `usdt:` wait rules that name them (common/wait_sites).
#include <doctest/doctest.h>

#include <string>

#include "common/elf_file.h"
#include "common/untrusted_file.h"
#include "common/usdt.h"
#include "common/wait_sites.h"
#include "tests/unit/test_env.h"

using namespace bpfdiag;

TEST_CASE("usdt: argument specs") {
  auto a = parse_usdt_arg("-4@%r13d");
  REQUIRE(a);
  CHECK(a->kind == UsdtArg::Kind::Reg);
  CHECK(a->size == 4);
  CHECK(a->is_signed);
  CHECK(a->reg == 2);  // pt_regs: r15, r14, r13
  a = parse_usdt_arg("1@14(%r12)");
  REQUIRE(a);
  CHECK(a->kind == UsdtArg::Kind::Mem);
  CHECK(a->value == 14);
  CHECK(a->reg == 3);
  a = parse_usdt_arg("4@-68(%rbp)");
  REQUIRE(a);
  CHECK(a->value == -68);
  CHECK(a->reg == 4);
  a = parse_usdt_arg("-4@$0");
  REQUIRE(a);
  CHECK(a->kind == UsdtArg::Kind::Imm);
  CHECK(a->value == 0);
  a = parse_usdt_arg("8@%rax");
  REQUIRE(a);
  CHECK(a->reg == 10);
  CHECK(parse_usdt_arg("8@%eax")->reg == 10);
  CHECK(parse_usdt_arg("1@%sil")->reg == 13);
  CHECK(parse_usdt_arg("2@%r9w")->reg == 8);
  CHECK(parse_usdt_arg("%rdi")->size == 8);  // old notes: no size
  // what registers alone cannot give: refused, never guessed
  CHECK_FALSE(parse_usdt_arg("8@foo(%rip)"));
  CHECK_FALSE(parse_usdt_arg("8@(%rax,%rbx,8)"));
  CHECK_FALSE(parse_usdt_arg("1@%ah"));
  CHECK_FALSE(parse_usdt_arg("3@%rax"));
  CHECK_FALSE(parse_usdt_arg("8@%r16"));
  CHECK_FALSE(parse_usdt_arg("8@x0"));  // another architecture
  CHECK_FALSE(parse_usdt_arg(""));
  CHECK_FALSE(parse_usdt_arg("8@"));
}

TEST_CASE("usdt: note descriptors") {
  auto le = [](uint64_t v) {
    std::string s;
    for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
    return s;
  };
  std::string desc = le(0x1000) + le(0x3000) + le(0x5000) + std::string("prov\0name\0-4@%eax 8@$3", 22) + '\0';
  auto p = parse_stapsdt_note(desc, 0x3100);  // .stapsdt.base moved by 0x100
  REQUIRE(p);
  CHECK(p->provider == "prov");
  CHECK(p->name == "name");
  CHECK(p->pc == 0x1100);
  CHECK(p->semaphore == 0x5000);
  REQUIRE(p->args.size() == 2);
  CHECK(p->args[0]->reg == 10);
  CHECK(p->args[1]->value == 3);
  // truncated strings, empty names, short descriptors: no probe
  CHECK_FALSE(parse_stapsdt_note(desc.substr(0, 30), 0));
  CHECK_FALSE(parse_stapsdt_note(le(1) + le(2) + le(3) + std::string("\0n\0\0", 4), 0));
  CHECK_FALSE(parse_stapsdt_note("short", 0));
  // an argument nobody can read is kept as unreadable, the probe stays
  auto q = parse_stapsdt_note(le(1) + le(0) + le(0) +
                                  std::string("p\0n\0"
                                              "8@x(%rip)\0",
                                              14),
                              0);
  REQUIRE(q);
  REQUIRE(q->args.size() == 1);
  CHECK_FALSE(q->args[0]);
}

TEST_CASE("usdt: the notes of a real file") {
  std::string path = std::string(BPFDIAG_BUILD_DIR) + "/workloads/declared_waits";
  auto r = open_untrusted(path, {});
  REQUIRE(r.file.get() != nullptr);
  auto elf = ElfFile::open(r.file);
  REQUIRE(elf.get() != nullptr);
  auto probes = read_usdt_probes(*elf);
  REQUIRE(probes.size() == 3);  // two starts (one in left_wait) and a done
  for (const auto& p : probes) {
    CHECK(p.provider == "demo_gate");
    CHECK((p.name == "gate__wait__start" || p.name == "gate__wait__done"));
    CHECK(p.semaphore != 0);
    REQUIRE(p.args.size() == 1);
    CHECK(p.args[0]);
    // the probe point is code, the semaphore is file bytes (ref_ctr_offset)
    REQUIRE(file_offset_of(*elf, p.pc));
    REQUIRE(file_offset_of(*elf, p.semaphore));
    std::vector<uint8_t> b;
    REQUIRE(elf->read(*file_offset_of(*elf, p.pc), 1, b));
    CHECK(b[0] == 0x90);  // the nop
  }
  // a file without notes has none
  auto libc = open_untrusted("/proc/self/exe", UntrustedPolicy{kMaxElfSize, true, std::nullopt});
  REQUIRE(libc.file.get() != nullptr);
  auto self = ElfFile::open(libc.file);
  REQUIRE(self.get() != nullptr);
  CHECK(read_usdt_probes(*self).empty());
}

TEST_CASE("wait rules: usdt lines") {
  std::vector<std::string> errors;
  auto t = WaitRules::parse(
      "lock usdt:postgresql:lock__wait__start:lock__wait__done PostgreSQL Lock:{arg5=relation,extend,frozenid}\n"
      "condition usdt:app:q__start:q__done Queue {arg1} wait\n"
      "idle usdt:app:poll__start:poll__done app poll\n"
      "via usdt:a:b:c x\n"
      "lock/own usdt:a:b:c x\n"
      "lock usdt:a:b x\n"
      "lock usdt:a:b:c x{arg0}\n"
      "lock usdt:a:b:c x{arg1}{arg2}\n"
      "lock usdt:a:b:c x{arg2=}\n"
      "lock usdt:a::c x\n",
      "t.rules", &errors);
  REQUIRE(t.declared().size() == 3);
  CHECK(t.rules().empty());  // usdt lines are not frame rules
  CHECK(errors.size() == 7);
  const DeclaredWait& pg = t.declared()[0];
  CHECK(pg.kind == WaitKind::Lock);
  CHECK(pg.provider == "postgresql");
  CHECK(pg.start == "lock__wait__start");
  CHECK(pg.done == "lock__wait__done");
  CHECK(pg.name_arg == 5);
  CHECK_FALSE(pg.name_is_string);
  CHECK(pg.what("", 1) == "PostgreSQL Lock:extend");
  CHECK(pg.what("", 9) == "PostgreSQL Lock:#9");  // a newer version's value
  CHECK(pg.origin == "t.rules:1");
  const DeclaredWait& q = t.declared()[1];
  CHECK(q.kind == WaitKind::Condition);
  CHECK(q.name_is_string);
  CHECK(q.what("jobs", 0) == "Queue jobs wait");
  CHECK(t.declared()[2].what("", 7) == "app poll");
  // the suite's own table carries PostgreSQL's pairs
  bool pg_lock = false, pg_lwlock = false;
  for (const auto& d : WaitRules::suite().declared()) {
    pg_lock = pg_lock || (d.provider == "postgresql" && d.start == "lock__wait__start");
    pg_lwlock = pg_lwlock || (d.provider == "postgresql" && d.start == "lwlock__wait__start" && d.name_is_string);
  }
  CHECK(pg_lock);
  CHECK(pg_lwlock);
}
