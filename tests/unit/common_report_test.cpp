#include <doctest/doctest.h>

#include <sstream>
#include <sys/utsname.h>
#include <unistd.h>
#include <cstdlib>

#include "common/bpf_session.h"
#include "common/btf.h"
#include "common/kheaders.h"
#include "common/report.h"
#include "tests/unit/test_env.h"

using bpfdiag_test::require_env;

using namespace bpfdiag;

TEST_CASE("data quality in text and JSON") {
  DataQuality dq;
  CHECK(dq.clean());
  dq.lost_events = 3;
  dq.extra["read_errors"] = 2;
  CHECK_FALSE(dq.clean());
  CHECK(dq.to_text() ==
        "data quality: lost events 3, lost stacks 0, unmatched begin 0, unmatched end 0, map full 0, read errors 2");
  auto j = dq.to_json();
  CHECK(j["lost_events"] == 3);
  CHECK(j["read_errors"] == 2);
  CHECK(j.contains("unmatched_begin"));
}

TEST_CASE("emit_json writes one compact line") {
  std::ostringstream os;
  emit_json(os, {{"type", "x"}, {"a_ns", 5}});
  CHECK(os.str() == "{\"a_ns\":5,\"type\":\"x\"}\n");
}

TEST_CASE("kernel version code") {
  CHECK(kernel_version_code("6.18.44-fc-v657") == (6u << 16) + (18u << 8) + 44u);
  CHECK(kernel_version_code("5.4.300") == (5u << 16) + (4u << 8) + 255u);
}

TEST_CASE("libbcc noise filter") {
  CHECK(is_libbcc_noise("sha1 socket not available"));
  CHECK(is_libbcc_noise("cannot get prog tag, err=-22"));
  CHECK_FALSE(is_libbcc_noise("error: use of undeclared identifier"));
}

TEST_CASE("ebpf listing shows the plan's defines") {
  BpfPlan p;
  p.text = "int x;\n";
  p.integer("OFF_A", 8).flag("FLAG").integer("MIN", 5, "ULL").expression("MAX", "0xffULL");
  CHECK(ebpf_listing(p) == "#define FLAG\n#define MAX 0xffULL\n#define MIN 5ULL\n#define OFF_A 8\nint x;\n");
  CHECK(p.has("FLAG"));
  CHECK(p.value("OFF_A") == "8");
  CHECK_FALSE(p.value("NOPE"));
}

TEST_CASE("BTF offsets, with alternative names and anonymous members") {
  auto btf = KernelBtf::load();
  if (!require_env(static_cast<bool>(btf), btf ? std::string() : btf.error())) return;
  auto pid = (*btf)->field_offset("task_struct", {"pid"});
  REQUIRE(pid.ok());
  CHECK(*pid > 0);
  // nr_running was renamed nr_queued in 6.14: the fallback list finds either
  CHECK((*btf)->field_offset("cfs_rq", {"no_such_field", "nr_queued", "nr_running"}).ok());
  auto missing = (*btf)->field_offset("task_struct", {"nope1", "nope2"});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error() == "kernel struct task_struct has no field nope1/nope2");
  CHECK_FALSE((*btf)->field_offset("no_such_struct_xyz", {"a"}).ok());
  CHECK((*btf)->field_size("task_struct", "pid") == 4);
  BpfPlan plan;
  REQUIRE_FALSE(add_offsets(plan, **btf, {{"OFF_PID", "task_struct", {"pid"}}}));
  CHECK(plan.value("OFF_PID") == std::to_string(*pid));
  // one missing field: an error, and nothing added
  CHECK(add_offsets(plan, **btf, {{"OFF_TGID", "task_struct", {"tgid"}}, {"OFF_NO", "task_struct", {"nope"}}}));
  CHECK_FALSE(plan.has("OFF_TGID"));
}

TEST_CASE("header shim is written with the version and embedded headers") {
  char tmpl[] = "/tmp/shimtest-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  std::string dir = tmpl;
  CHECK_FALSE(write_header_shim(dir, "6.18.1").has_value());
  for (const char* f : {"include/linux/kconfig.h", "include/linux/types.h", "include/linux/version.h",
                        "include/asm/page.h", "include/uapi/linux/ptrace.h", "include/bpfdiag/hist.h"})
    CHECK(access((dir + "/" + f).c_str(), R_OK) == 0);
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("a BPF compile error is one line") {
  if (!require_env(geteuid() == 0, "compiling BPF needs root")) return;
  BpfPlan plan;
  plan.text = "int broken(void *ctx) { return undeclared_thing; }\n";
  auto s = BpfSession::load(plan);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().find("cannot compile BPF program") == 0);
  CHECK(s.error().find("undeclared_thing") != std::string::npos);
  CHECK(s.error().find('\n') == std::string::npos);
}

TEST_CASE("defines with white space are refused (libbcc would split them)") {
  BpfPlan plan;
  plan.text = "int x;\n";
  plan.expression("A(x)", "((x) == 1)");
  CHECK_FALSE(render_plan(plan).ok());
  auto s = BpfSession::load(plan);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().find("white space") != std::string::npos);
}
