// Hardening of the shared CLI, process and session layer (issue 9): option parsing
// that cannot crash, bounded id lists, map-backed filters, the -p exit/exec policy,
// stop signals and temp files.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/cli.h"
#include "common/bpf_plan.h"
#include "common/filters.h"
#include "common/kheaders.h"
#include "common/parse.h"
#include "common/proc.h"
#include "common/runloop.h"
#include "common/target.h"

using namespace bpfdiag;

namespace {

Result<cxxopts::ParseResult> parse(std::vector<std::string> args) {
  static cxxopts::Options* opts = [] {
    auto* o = new cxxopts::Options("t");
    o->add_options()("h,help", "")("j,json", "")("p,pid", "", cxxopts::value<std::string>())(
        "F,fields", "", cxxopts::value<std::string>());
    add_positionals(*o);
    return o;
  }();
  args.insert(args.begin(), "t");
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  return parse_cli(*opts, static_cast<int>(av.size()), av.data());
}

bool exists(const std::string& p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0;
}

}  // namespace

TEST_CASE("parse_cli: a 30k-character option neither crashes nor is accepted") {
  auto r = parse({"-" + std::string(30000, 'a')});  // std::regex overflowed the stack here
  CHECK_FALSE(r.ok());
  auto l = parse({"--" + std::string(30000, 'x') + "=1"});
  CHECK_FALSE(l.ok());
  auto huge = parse({std::string(kMaxArgLength + 1, '1')});
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.error().find("too long") != std::string::npos);
  CHECK(one_line(huge.error()).size() <= 300);
}

TEST_CASE("parse_cli: repeated value options and empty values are refused") {
  auto rep = parse({"-p", "1", "-p", "2"});
  REQUIRE_FALSE(rep.ok());
  CHECK(rep.error().find("-p/--pid given more than once") != std::string::npos);
  CHECK_FALSE(parse({"--pid=1", "-p2"}).ok());
  auto empty = parse({"-F", ""});
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error() == "option -F/--fields needs a non-empty value");
  CHECK_FALSE(parse({"--fields="}).ok());
  CHECK(parse({"-j", "-j"}).ok());  // a repeated flag is harmless
}

TEST_CASE("parse_cli: attached short values keep their punctuation") {
  auto r = parse({"-p1,2", "-jF+comm", "5"});
  REQUIRE(r.ok());
  CHECK(r->count("json") == 1);
  CHECK(r.value()["pid"].as<std::string>() == "1,2");
  CHECK(r.value()["fields"].as<std::string>() == "+comm");
  CHECK(positionals(*r) == std::vector<std::string>{"5"});
  auto dd = parse({"--", "-p1"});  // after "--" nothing is split
  REQUIRE(dd.ok());
  CHECK(positionals(*dd) == std::vector<std::string>{"-p1"});
}

TEST_CASE("parse_id_list: duplicates dropped, at most kMaxIdList ids") {
  CHECK(*parse_id_list("5,3,5,3,7", "PID") == std::vector<uint32_t>{5, 3, 7});
  std::string ok, over;
  for (size_t i = 1; i <= kMaxIdList; ++i) ok += (i > 1 ? "," : "") + std::to_string(i);
  CHECK(parse_id_list(ok + ",1,2", "PID")->size() == kMaxIdList);
  auto r = parse_id_list(ok + "," + std::to_string(kMaxIdList + 1), "PID");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error() == "too many PIDs: more than 4096 distinct IDs in the list");
  auto junk = parse_id_list("1," + std::string(5000, '9'), "PID");
  REQUIRE_FALSE(junk.ok());
  CHECK(junk.error().size() < 120);  // the bad item is cut, not echoed whole
}

TEST_CASE("filters: id lists in a map the loader fills, the program text the same for any list") {
  std::vector<uint32_t> nine = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  BpfPlan plan;
  plan.text = "int main;\n";
  plan.integer("X", 1).id_filter("TID_OK", nine).id_filter("TGID_OK", {4});
  auto r = render_plan(plan);
  REQUIRE(r.ok());
  const auto& maps = r->id_maps;
  REQUIRE(maps.size() == 2);
  CHECK(maps[0].macro == "TID_OK");
  CHECK(maps[0].map == "tid_ok_ids");
  CHECK(maps[0].ids == nine);
  CHECK(maps[1].ids == std::vector<uint32_t>{4});
  CHECK(r->cflags == std::vector<std::string>{"-DBPFDIAG_ID_MAP_TGID_OK=1", "-DBPFDIAG_ID_MAP_TID_OK=1", "-DX=1"});
  CHECK(r->text == id_map_prelude(maps) + plan.text);
  // other IDs, the same compiled program
  BpfPlan other = plan;
  other.id_filter("TGID_OK", {7, 8});
  CHECK(render_plan(other)->cflags == r->cflags);
  CHECK(render_plan(other)->text == r->text);
  std::string prelude = id_map_prelude(maps);
  CHECK(prelude.find("BPF_HASH(tid_ok_ids, unsigned int, unsigned char, 4096);") != std::string::npos);
  CHECK(prelude.find("int bpfdiag_tid_ok_ids(unsigned int x)") != std::string::npos);
  CHECK(prelude.find("#line 1\n") != std::string::npos);
  CHECK(id_map_prelude({}).empty());
  // the listing shows the map and the program as compiled
  BpfPlan listed;
  listed.text = "int main;\n";
  listed.id_filter("TGID_OK", nine);
  std::string listing = ebpf_listing(listed);
  CHECK(listing.find("TGID_OK: 9 IDs, loaded into map tgid_ok_ids") != std::string::npos);
  CHECK(listing.find("#define BPFDIAG_ID_MAP_TGID_OK 1\n") != std::string::npos);
}

TEST_CASE("check_pids_exist: fails only when no PID of the list is running") {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const uint32_t self = static_cast<uint32_t>(getpid()), gone = static_cast<uint32_t>(dead);
  CHECK_FALSE(check_pids_exist({self, gone}).has_value());
  auto none = check_pids_exist({gone, 4194303});
  REQUIRE(none.has_value());
  CHECK(none->message == "no process with any of PIDs " + std::to_string(gone) + ", 4194303");
  std::vector<uint32_t> list = {gone, self, 4194303};
  CHECK(drop_gone_pids(list) == std::vector<uint32_t>{gone, 4194303});
  CHECK(list == std::vector<uint32_t>{self});
}

TEST_CASE("TargetWatch: exec is reported, exit (zombie) ends it, a reused PID is not the target") {
  int go[2];
  REQUIRE(pipe(go) == 0);
  pid_t child = fork();
  if (child == 0) {
    char b;
    close(go[1]);
    if (read(go[0], &b, 1) != 1) _exit(3);  // wait until watched
    execl("/bin/sleep", "sleep", "0.4", static_cast<char*>(nullptr));
    _exit(4);
  }
  close(go[0]);
  const uint32_t pid = static_cast<uint32_t>(child);
  std::vector<uint32_t> execs;
  TargetWatch w({pid}, [&](uint32_t p) { execs.push_back(p); }, UINT64_MAX);
  CHECK_FALSE(w.all_gone());
  CHECK_FALSE(w.check());
  REQUIRE(write(go[1], "x", 1) == 1);
  close(go[1]);
  for (int i = 0; i < 100 && execs.empty(); ++i) {
    usleep(10000);
    w.check();
  }
  CHECK(execs == std::vector<uint32_t>{pid});  // new exe and comm
  CHECK(proc_comm(pid) == "sleep");
  bool done = false;
  for (int i = 0; i < 200 && !done; ++i) {
    usleep(10000);
    done = w.check();  // the child is a zombie: not reaped, already gone
  }
  CHECK(done);
  CHECK(pid_exists(pid));
  CHECK(w.exited() == std::vector<uint32_t>{pid});
  CHECK(w.note() == "PID " + std::to_string(pid) + " exited");
  waitpid(child, nullptr, 0);

  // named before it started: whoever holds the PID now is not the process named
  TargetWatch reused({static_cast<uint32_t>(getpid())}, nullptr, 0);
  CHECK(reused.all_gone());
  TargetWatch none({});
  CHECK_FALSE(none.check());
  CHECK_FALSE(none.all_gone());
}

TEST_CASE("TargetWatch in a run loop: the run ends when the target exits, note after the report") {
  pid_t child = fork();
  if (child == 0) {
    usleep(200000);
    _exit(0);
  }
  TargetWatch w({static_cast<uint32_t>(child)}, nullptr, UINT64_MAX);
  RunHooks h;
  int finals = 0;
  h.report = [&](bool final) { finals += final; };
  w.attach(h);
  Schedule s;
  s.duration_ns = 5000000000ULL;
  uint64_t t0 = monotonic_ns();
  run_loop(s, h);
  CHECK(monotonic_ns() - t0 < 2000000000ULL);
  CHECK(finals == 1);
  CHECK(w.all_gone());
  waitpid(child, nullptr, 0);
}

TEST_CASE("stop signals: before the run loop exit 130 and temp files removed; in it, the report") {
  char dir[] = "/tmp/bpfdiag-unit-XXXXXX";
  REQUIRE(mkdtemp(dir));
  // Only the top dir is registered: the handler removes what was written under it.
  std::string sub = std::string(dir) + "/include/bpfdiag";
  std::filesystem::create_directories(sub);
  std::string file = sub + "/f";
  std::ofstream(file) << "x";
  std::ofstream(std::string(dir) + "/g") << "y";
  pid_t early = fork();
  if (early == 0) {
    install_stop_handlers();
    register_temp_paths({dir});
    raise(SIGINT);
    _exit(0);  // not reached
  }
  int status = 0;
  waitpid(early, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK_FALSE(exists(file));
  CHECK_FALSE(exists(dir));

  pid_t late = fork();
  if (late == 0) {
    install_stop_handlers();
    int reports = 0;
    RunHooks h;
    h.poll = [](int) { raise(SIGTERM); };
    h.report = [&](bool final) { reports += final ? 10 : 1; };
    int sig = run_loop(Schedule{}, h);
    _exit(sig == SIGTERM && reports == 10 ? 0 : 1);
  }
  waitpid(late, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("banner_until: a duration, or Ctrl-C") {
  Schedule s;
  CHECK(banner_until(s) == "... Hit Ctrl-C to end.");
  s.duration_ns = 5000000000ULL;
  CHECK(banner_until(s) == " for 5 s.");
}

TEST_CASE("temp dirs: under TMPDIR, removed, stale ones swept") {
  char root[] = "/tmp/bpfdiag-unit-root-XXXXXX";
  REQUIRE(mkdtemp(root));
  const char* old = std::getenv("TMPDIR");
  std::string saved = old ? old : "";
  setenv("TMPDIR", root, 1);
  CHECK(temp_root() == root);
  // a dead creator's dir (its PID no longer runs with that start time) is swept
  std::string stale = std::string(root) + "/bpfdiag-kheaders-4194303-1-abcdef";
  REQUIRE(mkdir(stale.c_str(), 0700) == 0);
  std::ofstream(stale + "/x.h") << "x";
  std::string path;
  {
    auto d = HeaderDir::create("6.1.0");
    REQUIRE(d.ok());
    path = d.value()->path();
    CHECK(path.rfind(std::string(root) + "/bpfdiag-kheaders-" + std::to_string(getpid()) + "-", 0) == 0);
    CHECK(exists(path + "/include/linux/types.h"));
    CHECK_FALSE(exists(stale));
    // a live creator's dir is kept
    CHECK(sweep_stale_header_dirs(root) == 0);
    CHECK(exists(path));
  }
  CHECK_FALSE(exists(path));
  setenv("TMPDIR", "relative/dir", 1);
  CHECK(temp_root() == "/tmp");
  if (old) setenv("TMPDIR", saved.c_str(), 1);
  else unsetenv("TMPDIR");
  rmdir(root);
}
