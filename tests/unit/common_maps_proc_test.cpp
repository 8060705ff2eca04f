#include <doctest/doctest.h>

#include <bcc/libbpf.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
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

TEST_CASE("accepted_socket_fds: the connections this process's listeners accepted, not its clients") {
  // parsers on /proc/PID/net text
  auto tcp = parse_tcp_sockets(
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
      "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
      "   1: 0100007F:1F90 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
      "   2: garbage\n");
  REQUIRE(tcp.size() == 2);
  CHECK((tcp[0].inode == 111 && tcp[0].listening && tcp[0].local == "8080"));
  CHECK((tcp[1].inode == 222 && tcp[1].connected && !tcp[1].listening && tcp[1].local == "8080"));
  auto ux = parse_unix_sockets(
      "Num       RefCount Protocol Flags    Type St Inode Path\n"
      "0000000000000000: 00000002 00000000 00010000 0001 01 333 /run/app.sock\n"
      "0000000000000000: 00000003 00000000 00000000 0001 03 444 /run/app.sock\n"
      "0000000000000000: 00000003 00000000 00000000 0001 03 555\n"
      "0000000000000000: 00000003 00000000 00000000 0002 01 666 /dgram\n");
  REQUIRE(ux.size() == 3);  // the datagram socket is not a connection
  CHECK((ux[0].listening && ux[0].local == "/run/app.sock"));
  CHECK((ux[1].connected && ux[1].inode == 444 && ux[1].local == "/run/app.sock"));
  CHECK((ux[2].connected && ux[2].local.empty()));

  // real sockets of this process: a UNIX and a TCP listener, a client of each, accepted
  char dir[] = "/tmp/bpfdiag-sock-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  std::string path = std::string(dir) + "/s";
  int ul = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un ua{};
  ua.sun_family = AF_UNIX;
  std::snprintf(ua.sun_path, sizeof ua.sun_path, "%s", path.c_str());
  REQUIRE(bind(ul, reinterpret_cast<sockaddr*>(&ua), sizeof ua) == 0);
  REQUIRE(listen(ul, 4) == 0);
  int uc = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(connect(uc, reinterpret_cast<sockaddr*>(&ua), sizeof ua) == 0);
  int ua_fd = accept(ul, nullptr, nullptr);
  int tl = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in ta{};
  ta.sin_family = AF_INET;
  ta.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(tl, reinterpret_cast<sockaddr*>(&ta), sizeof ta) == 0);
  socklen_t len = sizeof ta;
  REQUIRE(getsockname(tl, reinterpret_cast<sockaddr*>(&ta), &len) == 0);
  REQUIRE(listen(tl, 4) == 0);
  int tc = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(connect(tc, reinterpret_cast<sockaddr*>(&ta), sizeof ta) == 0);
  int ta_fd = accept(tl, nullptr, nullptr);
  REQUIRE((ua_fd >= 0 && ta_fd >= 0));
  auto fds = accepted_socket_fds(static_cast<uint32_t>(getpid()));
  std::vector<uint32_t> want = {static_cast<uint32_t>(std::min(ua_fd, ta_fd)), static_cast<uint32_t>(std::max(ua_fd, ta_fd))};
  CHECK(fds == want);
  for (int fd : {ul, uc, ua_fd, tl, tc, ta_fd}) close(fd);
  unlink(path.c_str());
  rmdir(dir);
}
