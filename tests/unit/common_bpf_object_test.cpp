// The compiled-object cache (common/bpf_object.h): the byte form, map relocation, the
// cache directory's rules, and (as root) one program loaded twice, compiled and then
// from the cache, counting the same events.
#include <doctest/doctest.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/bpf_object.h"
#include "common/bpf_session.h"
#include "common/bpf_plan.h"
#include "common/btf.h"
#include "common/embedded.h"
#include "common/filters.h"
#include "tests/unit/temp_dir.h"
#include "tests/unit/test_env.h"

using namespace bpfdiag;
using bpfdiag_test::require_env;
namespace fs = std::filesystem;

namespace {

struct bpf_insn ld_map_fd(int fd, uint8_t dst) {
  struct bpf_insn i = {};
  i.code = BPF_LD | BPF_IMM | BPF_DW;
  i.dst_reg = dst;
  i.src_reg = BPF_PSEUDO_MAP_FD;
  i.imm = fd;
  return i;
}

struct bpf_insn mov_imm(uint8_t dst, int32_t imm) {
  struct bpf_insn i = {};
  i.code = BPF_ALU64 | BPF_MOV | BPF_K;
  i.dst_reg = dst;
  i.imm = imm;
  return i;
}

void add_insns(BpfProgDef& p, std::initializer_list<struct bpf_insn> insns) {
  for (const auto& i : insns) {
    auto* b = reinterpret_cast<const uint8_t*>(&i);
    p.insns.insert(p.insns.end(), b, b + sizeof i);
  }
}

struct bpf_insn insn_at(const BpfProgDef& p, size_t n) {
  struct bpf_insn i;
  std::memcpy(&i, p.insns.data() + n * sizeof i, sizeof i);
  return i;
}

BpfObject sample() {
  BpfObject o;
  o.license = "GPL";
  o.kern_version = 0x61200;
  o.maps.push_back({"counts", BPF_MAP_TYPE_HASH, 8, 16, 1024, 0, 7});
  o.maps.push_back({"dq_counters", BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, 16, 0, 9});
  BpfProgDef p{"handler", {}};
  // the second slot of an ld_imm64 (code 0) and a mov whose imm is 7 are not map references
  add_insns(p, {ld_map_fd(7, 1), {}, mov_imm(2, 7), ld_map_fd(9, 3), {}, ld_map_fd(7, 4), {}});
  o.progs.push_back(p);
  o.progs.push_back({"empty", {}});
  return o;
}

using bpfdiag_test::TempDir;

struct EnvVar {
  std::string name;
  EnvVar(const std::string& n, const std::string& v) : name(n) { setenv(n.c_str(), v.c_str(), 1); }
  ~EnvVar() { unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("bpf object: the byte form round-trips and refuses anything but a whole object for its key") {
  BpfObject o = sample();
  std::string bytes = serialize_bpf_object(o, "key A");
  auto back = deserialize_bpf_object(bytes, "key A");
  REQUIRE(back);
  CHECK(back->license == "GPL");
  CHECK(back->kern_version == 0x61200u);
  REQUIRE(back->maps.size() == 2);
  CHECK(back->maps[1].name == "dq_counters");
  CHECK(back->maps[1].type == BPF_MAP_TYPE_PERCPU_ARRAY);
  CHECK(back->maps[0].max_entries == 1024u);
  CHECK(back->maps[0].value_size == 16u);
  CHECK(back->maps[1].fd == 9);
  REQUIRE(back->progs.size() == 2);
  CHECK(back->progs[0].insns == o.progs[0].insns);
  CHECK(back->progs[1].insns.empty());
  CHECK_FALSE(deserialize_bpf_object(bytes, "key B"));       // another compile's object
  CHECK_FALSE(deserialize_bpf_object(bytes + "x", "key A"));  // trailing junk
  for (size_t n = 0; n < bytes.size(); ++n)                   // every truncation
    if (deserialize_bpf_object(bytes.substr(0, n), "key A")) FAIL("accepted a prefix of " << n << " bytes");
  for (size_t i = 0; i < bytes.size(); i += 7) {  // a damaged byte anywhere: a miss
    std::string odd = bytes;
    odd[i] ^= 0x5a;
    if (deserialize_bpf_object(odd, "key A")) FAIL("accepted a flipped byte at " << i);
  }
}

TEST_CASE("bpf object: map references are rewritten to the new fds, nothing else") {
  BpfObject o = sample();
  REQUIRE_FALSE(relocate_maps(o, {100, 200}));
  const auto& p = o.progs[0];
  CHECK(insn_at(p, 0).imm == 100);
  CHECK(insn_at(p, 1).imm == 0);
  CHECK(insn_at(p, 2).imm == 7);  // a constant that happens to equal an old fd
  CHECK(insn_at(p, 3).imm == 200);
  CHECK(insn_at(p, 5).imm == 100);
  CHECK(o.maps[0].fd == 100);
  CHECK(o.maps[1].fd == 200);
  // the relocated object relocates again (a cached object's fds are a compile's)
  REQUIRE_FALSE(relocate_maps(o, {5, 6}));
  CHECK(insn_at(o.progs[0], 3).imm == 6);

  BpfObject bad = sample();
  bad.maps.pop_back();  // fd 9 names no map
  auto err = relocate_maps(bad, {100});
  REQUIRE(err);
  CHECK(err->message.find("refers to map fd 9") != std::string::npos);
  CHECK(relocate_maps(bad, {1, 2}));  // counts differ
  BpfObject ragged = sample();
  ragged.progs[0].insns.push_back(0);
  CHECK(relocate_maps(ragged, {1, 2}));
}

TEST_CASE("bpf object cache key: covers every embedded BPF header, byte for byte") {
  std::vector<std::string> names, texts;
  for (const EmbeddedFile* e = kEmbeddedBpfHeaders; e->name; ++e) {
    names.push_back(e->name);
    texts.push_back(e->text);
  }
  REQUIRE(names.size() >= 5);
  auto key_with = [&](const std::vector<std::string>& t) {
    std::vector<EmbeddedFile> set;
    for (size_t i = 0; i < t.size(); ++i) set.push_back({names[i].c_str(), t[i].c_str()});
    set.push_back({nullptr, nullptr});
    return BpfObjectCache::key("int a;", {"-DX=1"}, set.data());
  };
  const std::string base = BpfObjectCache::key("int a;", {"-DX=1"});
  CHECK(key_with(texts) == base);  // the embedded set is the default
  CHECK(BpfObjectCache::key("int a;", {"-DX=1"}) == base);  // same inputs, same key
  for (const char* name : {"offcputime_shared.h", "hist.h", "filters.h", "arrival.h", "unwind_shared.h"}) {
    CAPTURE(name);
    size_t i = 0;
    while (i < names.size() && names[i] != name) ++i;
    REQUIRE(i < names.size());
    auto changed = texts;
    changed[i].back() = changed[i].back() == ' ' ? '\t' : ' ';  // one byte, the last
    CHECK(key_with(changed) != base);
  }
  // a header's text cannot pass for the next one's: lengths are in the key
  auto shifted = texts;
  shifted[1] = shifted[0].substr(shifted[0].size() - 1) + shifted[1];
  shifted[0].pop_back();
  CHECK(key_with(shifted) != base);
  CHECK(base.find("\nsuite ") != std::string::npos);
  CHECK(base.rfind("bpfdiag object 3\n", 0) == 0);
}

TEST_CASE("bpf object cache: stores and finds by key, only in a directory and files that are ours alone") {
  TempDir t("bpfdiag-objtest");
  std::string dir = t.path + "/cache";
  EnvVar d("BPFDIAG_CACHE_DIR", dir);
  auto c = BpfObjectCache::open();
  REQUIRE(c);
  struct stat st;
  REQUIRE(stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  std::string k1 = BpfObjectCache::key("int a;", {"-DX=1"});
  CHECK(k1 != BpfObjectCache::key("int a;", {"-DX=2"}));
  CHECK(k1 != BpfObjectCache::key("int b;", {"-DX=1"}));
  CHECK(k1 == BpfObjectCache::key("int a;", {"-DX=1"}));
  CHECK_FALSE(c->get(k1));
  c->put(k1, sample());
  auto got = c->get(k1);
  REQUIRE(got);
  CHECK(got->progs[0].insns == sample().progs[0].insns);
  CHECK_FALSE(c->get(BpfObjectCache::key("int a;", {"-DX=2"})));

  std::string file;
  for (auto& e : fs::directory_iterator(dir)) file = e.path();
  REQUIRE_FALSE(file.empty());
  REQUIRE(stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  chmod(file.c_str(), 0620);  // writable by its group: not trusted
  CHECK_FALSE(c->get(k1));
  chmod(file.c_str(), 0600);
  CHECK(c->get(k1));
  {  // a symlink in its place is not followed
    std::string moved = t.path + "/elsewhere";
    fs::rename(file, moved);
    fs::create_symlink(moved, file);
    CHECK_FALSE(c->get(k1));
    fs::remove(file);
    fs::rename(moved, file);
  }
  {  // a truncated file (a crash mid-write cannot leave one: rename) is a miss
    std::ifstream in(file, std::ios::binary);
    std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(whole.size() > 100);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << whole.substr(0, whole.size() / 2);
    CHECK_FALSE(c->get(k1));
  }
  chmod(dir.c_str(), 0777);  // a directory others can write: no cache at all
  CHECK_FALSE(BpfObjectCache::open());
  chmod(dir.c_str(), 0700);
  CHECK(BpfObjectCache::open());
  {
    EnvVar off("BPFDIAG_CACHE", "0");
    CHECK_FALSE(BpfObjectCache::open());
  }
  // bounded: the oldest objects go
  for (int i = 0; i < 70; ++i) c->put(BpfObjectCache::key("int x" + std::to_string(i) + ";", {}), sample());
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += e.path().filename().string()[0] != '.';
  CHECK(files == 64);
  CHECK(c->get(BpfObjectCache::key("int x69;", {})));

  // the directory is used through the descriptor open() checked: swapped for a symbolic
  // link to another directory afterwards, the cache still reads and writes the one checked
  std::string real = t.path + "/checked", other = t.path + "/other";
  fs::rename(dir, real);
  fs::create_directory(other);
  fs::create_symlink(other, dir);
  CHECK(c->get(BpfObjectCache::key("int x69;", {})));
  c->put(BpfObjectCache::key("int y;", {}), sample());
  CHECK(fs::is_empty(other));
  CHECK(c->get(BpfObjectCache::key("int y;", {})));  // written where it can be read: the checked dir
  CHECK_FALSE(BpfObjectCache::open());  // a new open refuses the link
}

TEST_CASE("bpf object cache: a program compiled, then loaded from the cache, counts the same events") {
  if (!require_env(geteuid() == 0, "needs root")) return;
  if (!require_env(access("/sys/kernel/btf/vmlinux", R_OK) == 0, "needs /sys/kernel/btf/vmlinux")) return;
  REQUIRE_FALSE(ensure_tracefs());
  TempDir t("bpfdiag-objtest");
  EnvVar d("BPFDIAG_CACHE_DIR", t.path + "/cache");
  const std::string text = R"(
#include "filters.h"
BPF_HASH(unused, u32, u64, 16);  /* a map before the counted one: fds differ by run */
BPF_ARRAY(hits, u64, 1);
TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {
  u32 pid = bpf_get_current_pid_tgid() >> 32;
  if (!TGID_OK(pid))
    return 0;
  u32 zero = 0;
  u64 *h = hits.lookup(&zero);
  if (h)
    __sync_fetch_and_add(h, 1);
  return 0;
}
)";
  BpfPlan plan;
  plan.text = text;
  plan.id_filter("TGID_OK", {static_cast<uint32_t>(getpid())});
  for (bool cached : {false, true}) {
    CAPTURE(cached);
    auto s = BpfSession::load(plan);
    REQUIRE_MESSAGE(s, (s ? "" : s.error()));
    CHECK((*s)->from_cache() == cached);
    REQUIRE_FALSE((*s)->attach_tracepoint("syscalls:sys_enter_getppid", "tracepoint__syscalls__sys_enter_getppid"));
    for (int i = 0; i < 1000; ++i) syscall(SYS_getppid);
    uint64_t n = 0;
    REQUIRE((*s)->get_array_table<uint64_t>("hits").get_value(0, n).ok());
    CHECK(n == 1000);  // ours only (the -p map), each one
  }
}

TEST_CASE("kernel BTF facts: kept in the cache for this boot, a start they answer parses nothing") {
  if (!require_env(access("/sys/kernel/btf/vmlinux", R_OK) == 0, "needs /sys/kernel/btf/vmlinux")) return;
  TempDir t("bpfdiag-btftest");
  EnvVar d("BPFDIAG_CACHE_DIR", t.path + "/cache");
  uint32_t pid_off = 0, pid_size = 0;
  {
    auto b = KernelBtf::load();
    REQUIRE_MESSAGE(b, (b ? "" : b.error()));
    CHECK((*b)->parsed());  // nothing kept yet
    auto off = (*b)->field_offset("task_struct", {"no_such_field", "pid"});
    REQUIRE(off.ok());
    pid_off = *off;
    pid_size = (*b)->field_size("task_struct", "pid");
    CHECK(pid_size == 4);
    CHECK_FALSE((*b)->has_field("task_struct", "no_such_field_2"));
    CHECK_FALSE((*b)->field_offset("no_such_struct_xyz", {"a"}).ok());
  }  // written when it goes
  const std::string facts = t.path + "/cache/kernel.btffacts";
  REQUIRE(fs::exists(facts));
  CHECK((fs::status(facts).permissions() & (fs::perms::group_all | fs::perms::others_all)) == fs::perms::none);
  {
    auto b = KernelBtf::load();
    REQUIRE(b);
    CHECK_FALSE((*b)->parsed());  // every answer below is kept
    CHECK(*(*b)->field_offset("task_struct", {"no_such_field", "pid"}) == pid_off);
    CHECK((*b)->field_size("task_struct", "pid") == pid_size);
    CHECK_FALSE((*b)->has_field("task_struct", "no_such_field_2"));
    auto none = (*b)->field_offset("no_such_struct_xyz", {"a"});
    REQUIRE_FALSE(none.ok());
    CHECK(none.error() == "kernel BTF has no struct no_such_struct_xyz");
    CHECK_FALSE((*b)->parsed());
    // one that is not kept: parsed now, the same answer as a fresh parse's
    auto tgid = (*b)->field_offset("task_struct", {"tgid"});
    CHECK((*b)->parsed());
    REQUIRE(tgid.ok());
    CHECK(*tgid != pid_off);
  }
  // another boot's record (or a damaged one) is not used: parsed again, right answers
  std::string text;
  {
    std::ifstream in(facts);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (const std::string& bad : {std::string("boot 00000000"), std::string("task_struct pid 1 -7 4"),
                                 std::string("task_struct pid 0 96 4"), std::string("task_struct pid 1 96 -1"),
                                 std::string("task_struct pid 1 99999999999999 4")}) {
    CAPTURE(bad);
    std::string damaged = text;
    if (bad[0] == 'b') damaged.replace(damaged.find("boot ") , 13, bad);
    else damaged += bad + "\n";
    {
      std::ofstream out(facts, std::ios::trunc);
      out << damaged;
    }
    auto b = KernelBtf::load();
    REQUIRE(b);
    CHECK((*b)->parsed());
    CHECK(*(*b)->field_offset("task_struct", {"pid"}) == pid_off);
  }
  // a record others may write is not read
  {
    std::ofstream out(facts, std::ios::trunc);
    out << text;
  }
  chmod(facts.c_str(), 0666);
  auto b = KernelBtf::load();
  REQUIRE(b);
  CHECK((*b)->parsed());
}
