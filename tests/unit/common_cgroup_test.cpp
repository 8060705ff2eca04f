#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "common/bpf_plan.h"
#include "common/cgroup.h"
#include "common/options.h"

using namespace bpfdiag;

namespace {
const std::string kId = "3f2a9c1d8e7b" + std::string(52, 'a');  // 64 hex digits
}

TEST_CASE("cgroup2_mount_from_mountinfo: the cgroup2 hierarchy's root mount, unescaped") {
  const std::string hybrid =
      "25 30 0:23 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
      "40 25 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
      "41 25 0:38 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n";
  CHECK(cgroup2_mount_from_mountinfo(hybrid) == "/sys/fs/cgroup/unified");
  CHECK(cgroup2_mount_from_mountinfo("36 25 0:31 / /sys/fs/cgroup rw shared:9 - cgroup2 cgroup2 rw,nsdelegate\n") ==
        "/sys/fs/cgroup");
  // a bind mount of a sub-cgroup is not the hierarchy's root; an escaped space is unescaped
  CHECK(cgroup2_mount_from_mountinfo("1 2 0:31 /a /mnt/a rw - cgroup2 cgroup2 rw\n"
                                     "3 2 0:31 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n") == "/mnt/my cg");
  CHECK(cgroup2_mount_from_mountinfo("25 30 0:23 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n").empty());
  CHECK(cgroup2_mount_from_mountinfo("").empty());
  CHECK(cgroup2_mount_from_mountinfo("garbage - cgroup2\n - cgroup2 x\n").empty());
}

TEST_CASE("cgroup_v2_path reads the 0:: line of /proc/PID/cgroup") {
  CHECK(cgroup_v2_path("0::/system.slice/nginx.service\n") ==
        std::optional<std::string>("/system.slice/nginx.service"));
  CHECK(cgroup_v2_path("9:name=systemd:/\n4:memory:/x\n0::/\n") == std::optional<std::string>("/"));
  CHECK(!cgroup_v2_path("4:memory:/x\n1:cpu:/\n"));
  CHECK(!cgroup_v2_path(""));
}

TEST_CASE("match_container finds a 64-hex ID in the runtimes' cgroup names") {
  for (const std::string& path : {"/system.slice/docker-" + kId + ".scope", "/docker/" + kId,
                                  "/kubepods.slice/kubepods-pod1.slice/cri-containerd-" + kId + ".scope",
                                  "/machine.slice/libpod-" + kId + ".scope", "/kubepods/burstable/pod12/crio-" + kId}) {
    CAPTURE(path);
    auto m = match_container(path, "3f2a9c1d8e7b");
    REQUIRE(m);
    CHECK(m->id == kId);
    CHECK(m->path == path);
  }
  // a process in a child cgroup of the container: the container's own cgroup
  auto m = match_container("/system.slice/docker-" + kId + ".scope/init", "3f2a9c1d8e7b");
  REQUIRE(m);
  CHECK(m->path == "/system.slice/docker-" + kId + ".scope");
  CHECK(!match_container("/system.slice/docker-" + kId + ".scope", "3f2a9c1d8e7c"));                // another ID
  CHECK(!match_container("/system.slice/docker-" + kId.substr(0, 63) + ".scope", "3f2a9c1d8e7b"));  // 63 digits
  CHECK(!match_container("/system.slice/docker-" + kId + "0.scope", "3f2a9c1d8e7b"));               // 65 digits
  CHECK(!match_container("/", "3f2a9c1d8e7b"));
}

TEST_CASE("parse_container_id: 12 to 64 hex digits, lowercased") {
  CHECK(*parse_container_id("3F2A9C1D8E7B") == "3f2a9c1d8e7b");
  CHECK(*parse_container_id(kId) == kId);
  CHECK(!parse_container_id("3f2a9c1d8e7"));  // 11
  CHECK(!parse_container_id(kId + "a"));      // 65
  CHECK(!parse_container_id("3f2a9c1d8e7g"));
  CHECK(!parse_container_id("../../etc/xx"));
}

TEST_CASE("--cgroup and --container: parsed as given, not both") {
  ToolSpec spec{"t", "s", "", {opt::pid(), opt::cgroup(), opt::container(), opt::help()}, "", Positional::None};
  auto run = [&](std::vector<std::string> args) {
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    return parse_tool_cli(spec, static_cast<int>(args.size()), av.data());
  };
  auto r = run({"t", "--cgroup", "system.slice/x.service"});
  REQUIRE(r);
  CHECK(r->common.cgroup == "system.slice/x.service");
  r = run({"t", "--container", "3f2a9c1d8e7b"});
  REQUIRE(r);
  CHECK(r->common.container == "3f2a9c1d8e7b");
  r = run({"t", "--cgroup", "a", "--container", "3f2a9c1d8e7b"});
  REQUIRE(!r);
  CHECK(r.error() == "--cgroup and --container exclude each other");
  CHECK(usage_line(spec) == "t [-p PID[,PID]] [--cgroup PATH] [--container ID] [-h] [--version]");
}

TEST_CASE("resolve_cgroup_path refuses what is not a cgroup v2 directory") {
  auto missing = resolve_cgroup_path("/sys/fs/cgroup/no-such-cgroup-bpfdiag-test", "/sys/fs/cgroup");
  REQUIRE(!missing);
  CHECK(missing.error().find("no cgroup") != std::string::npos);
  char tmpl[] = "/tmp/bpfdiag-cg-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  std::string dir = tmpl;
  { std::ofstream(dir + "/file") << "x"; }
  auto file = resolve_cgroup_path(dir + "/file", dir);
  REQUIRE(!file);
  CHECK(file.error().find("not a cgroup v2 directory") != std::string::npos);
  auto notcg = resolve_cgroup_path(dir, dir);  // a directory, but on tmpfs
  REQUIRE(!notcg);
  CHECK(notcg.error().find("not on a cgroup2 file system") != std::string::npos);
  CHECK(!resolve_cgroup_path("a/../b", dir));
  unlink((dir + "/file").c_str());
  rmdir(dir.c_str());
}

TEST_CASE("resolve_container over a fake /proc: found, unknown, ambiguous") {
  char tmpl[] = "/tmp/bpfdiag-proc-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  std::string proc = tmpl;
  const std::string other = "3f2a9c1d8e7b" + std::string(52, 'b');
  auto add = [&](const std::string& pid, const std::string& cg) {
    mkdir((proc + "/" + pid).c_str(), 0755);
    std::ofstream(proc + "/" + pid + "/cgroup") << "4:memory:/x\n0::" << cg << "\n";
  };
  add("10", "/system.slice/docker-" + kId + ".scope");
  add("11", "/system.slice/docker-" + other + ".scope");
  add("12", "/user.slice");
  // the cgroup itself does not exist under this mount: the error says so
  auto r = resolve_container(kId.substr(0, 13), proc, proc);
  REQUIRE(!r);
  CHECK(r.error().find("container " + kId.substr(0, 13)) == 0);
  auto amb = resolve_container("3f2a9c1d8e7b", proc, proc);
  REQUIRE(!amb);
  CHECK(amb.error().find("is ambiguous: 2 containers match") != std::string::npos);
  auto none = resolve_container("0123456789ab", proc, proc);
  REQUIRE(!none);
  CHECK(none.error().find("no container with ID 0123456789ab") == 0);
  std::system(("rm -rf " + proc).c_str());
}

TEST_CASE("a plan with a cgroup filter: same program text for every cgroup, maps in the prelude") {
  BpfPlan a, b;
  a.text = b.text = "int f(void) { return CGROUP_OK(); }\n";
  a.cgroup_filter("/sys/fs/cgroup/a", 11);
  b.cgroup_filter("/sys/fs/cgroup/b", 12);
  auto ra = render_plan(a), rb = render_plan(b);
  REQUIRE(ra);
  REQUIRE(rb);
  CHECK(ra->text == rb->text);
  CHECK(ra->cflags == rb->cflags);
  CHECK(ra->text.find("BPF_CGROUP_ARRAY(bpfdiag_cgroup, 1);") == 0);
  CHECK(ra->text.find("check_current_task(0)") != std::string::npos);
  REQUIRE(ra->cgroup);
  CHECK(ra->cgroup->path == "/sys/fs/cgroup/a");
  CHECK(ra->cgroup->id == 11);
  CHECK(std::find(ra->cflags.begin(), ra->cflags.end(), "-DBPFDIAG_CGROUP=1") != ra->cflags.end());
  CHECK(ebpf_listing(a).find("/* cgroup filter: /sys/fs/cgroup/a (id 11)") == 0);
  BpfPlan none;
  none.text = a.text;
  CHECK(render_plan(none)->text == a.text);
  CHECK(!render_plan(none)->cgroup);
}

TEST_CASE("cgroup_json and cgroup_banner") {
  CHECK(cgroup_json(std::nullopt).is_null());
  CgroupTarget t{"/sys/fs/cgroup/a", "/a", 42, ""};
  CHECK(cgroup_json(t) == nlohmann::json{{"path", "/sys/fs/cgroup/a"}, {"id", 42}, {"container", nullptr}});
  CHECK(cgroup_banner(t) == " in cgroup /sys/fs/cgroup/a (id 42)");
  t.container = kId;
  CHECK(cgroup_banner(t) == " in container 3f2a9c1d8e7b (/sys/fs/cgroup/a)");
  CHECK(cgroup_banner(std::nullopt).empty());
}
