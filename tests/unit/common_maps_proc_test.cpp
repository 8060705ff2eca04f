#include <doctest/doctest.h>

#include <bcc/libbpf.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>

#include "common/bpf_maps.h"
#include "common/proc.h"
#include "tests/unit/test_env.h"

using namespace bpfdiag;
using bpfdiag_test::require_env;

TEST_CASE("CounterDeltas reports per-interval increments of cumulative counters") {
  CounterDeltas d;
  CHECK(d.delta(0, 5) == 5);
  CHECK(d.delta(0, 8) == 3);
  CHECK(d.delta(0, 8) == 0);
  CHECK(d.delta(3, 2) == 2);
  CHECK(d.delta(0, 1) == 1);  // counter restarted: take it whole
}

TEST_CASE("proc_running is false for a zombie, pid_exists still true") {
  CHECK(proc_running(static_cast<uint32_t>(getpid())));
  pid_t child = fork();
  if (child == 0) _exit(0);
  usleep(100000);  // child exits and stays a zombie until reaped
  CHECK(pid_exists(static_cast<uint32_t>(child)));
  CHECK_FALSE(proc_running(static_cast<uint32_t>(child)));
  waitpid(child, nullptr, 0);
  CHECK_FALSE(proc_running(static_cast<uint32_t>(child)));
  CHECK_FALSE(proc_running(4194303));
}

namespace {
struct FdTable {  // the one thing drain_hash needs from a bcc table
  int fd;
  int get_fd() { return fd; }
};
}  // namespace

TEST_CASE("drain_hash moves every entry out of a real BPF hash map") {
  if (!require_env(geteuid() == 0, "creating a BPF map needs root")) return;
  int fd = bcc_create_map(BPF_MAP_TYPE_HASH, "drain_test", sizeof(uint32_t), sizeof(uint64_t), 64, 0);
  REQUIRE(fd >= 0);
  for (uint32_t k = 1; k <= 10; ++k) {
    uint64_t v = k * 100;
    REQUIRE(bpf_update_elem(fd, &k, &v, 0) == 0);
  }
  FdTable t{fd};
  auto got = drain_hash<uint32_t, uint64_t>(t);
  std::map<uint32_t, uint64_t> m(got.begin(), got.end());
  CHECK(m.size() == 10);
  CHECK(m[7] == 700);
  uint32_t k = 0, next;
  CHECK(bpf_get_next_key(fd, nullptr, &next) != 0);  // map is empty now
  (void)k;
  CHECK(drain_hash<uint32_t, uint64_t>(t).empty());
  close(fd);
}

#include "common/bpf_plan.h"

TEST_CASE("id filters rendered") {
  auto cflags = [](const std::string& macro, const std::vector<uint32_t>& ids) {
    BpfPlan p;
    p.id_filter(macro, ids);
    return render_plan(p)->cflags;
  };
  CHECK(cflags("TGID_OK", {}) == std::vector<std::string>{"-DTGID_OK(x)=(1)"});
  CHECK(cflags("TGID_OK", {42}) == std::vector<std::string>{"-DBPFDIAG_ID_MAP_TGID_OK=1"});
  CHECK(cflags("TID_OK", {1, 2}) == std::vector<std::string>{"-DBPFDIAG_ID_MAP_TID_OK=1"});
  CHECK(cflags("CPU_OK", {1, 2}) == std::vector<std::string>{"-DCPU_OK(x)=((x)==1||(x)==2)"});  // no map variant
}
