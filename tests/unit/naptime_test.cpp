#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "tools/naptime/naptime.h"

using namespace naptime;

namespace {

bpfdiag::Result<Config> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "naptime");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return parse_args(static_cast<int>(args.size()), argv.data());
}

naptime_event fixed_event() {
  naptime_event ev = {};
  ev.start.enter_mono_ns = 5000000000ULL;
  ev.start.enter_boot_ns = 6000000000ULL;
  ev.start.req_sec = 1;
  ev.start.req_nsec = 500000000;
  ev.start.clock = NAPTIME_CLOCK_REALTIME;
  ev.start.flags = 0;
  ev.start.ppid = 1;
  std::strcpy(ev.start.pcomm, "systemd");
  ev.exit_mono_ns = 6500123456ULL;
  ev.ret = 0;
  ev.pid = 1975;
  ev.tid = 1976;
  std::strcpy(ev.comm, "iscsid");
  return ev;
}

}  // namespace

TEST_CASE("naptime parse: defaults and options") {
  auto c = parse({});
  REQUIRE(c.ok());
  CHECK_FALSE(c->summary);
  CHECK_FALSE(c->json);
  CHECK(c->pids.empty());
  CHECK(c->min_ns == 0);
  CHECK_FALSE(c->schedule.duration_ns.has_value());

  std::string self = std::to_string(getpid());
  c = parse({"--summary", "-j", "-p", self + ",1", "-t", self, "--comm", "sleepers", "-m", "10ms", "-d", "5"});
  REQUIRE(c.ok());
  CHECK(c->summary);
  CHECK(c->json);
  CHECK(c->pids == std::vector<uint32_t>{static_cast<uint32_t>(getpid()), 1});
  CHECK(c->tids == std::vector<uint32_t>{static_cast<uint32_t>(getpid())});
  CHECK(c->comm == "sleepers");
  CHECK(c->min_ns == 10000000ULL);
  CHECK(*c->schedule.duration_ns == 5000000000ULL);

  c = parse({"--min", "250"});  // default unit: microseconds
  REQUIRE(c.ok());
  CHECK(c->min_ns == 250000ULL);
  c = parse({"--comm", "a-very-long-command-name"});  // the kernel keeps 15 characters
  REQUIRE(c.ok());
  CHECK(c->comm == "a-very-long-com");
  c = parse({"-d", "500ms"});
  REQUIRE(c.ok());
  CHECK(*c->schedule.duration_ns == 500000000ULL);
  c = parse({"-i", "2", "-c", "3"});
  REQUIRE(c.ok());
  CHECK(*c->schedule.interval_ns == 2000000000ULL);
  CHECK(*c->schedule.count == 3);
}

TEST_CASE("naptime parse: bad input is an error value") {
  CHECK_FALSE(parse({"-p", "abc"}).ok());
  CHECK_FALSE(parse({"-p", "-1"}).ok());
  CHECK_FALSE(parse({"-p", "0"}).ok());
  CHECK_FALSE(parse({"-p", "12,"}).ok());
  CHECK_FALSE(parse({"-p", "99999999999"}).ok());
  auto nx = parse({"-p", "4194303"});  // in range but (almost surely) not running
  REQUIRE_FALSE(nx.ok());
  CHECK(nx.error().find("no process with PID 4194303") != std::string::npos);
  CHECK_FALSE(parse({"-t", "abc"}).ok());
  CHECK_FALSE(parse({"-t", "4194303"}).ok());
  CHECK_FALSE(parse({"-m", "ten"}).ok());
  CHECK_FALSE(parse({"-m", "-5ms"}).ok());
  CHECK_FALSE(parse({"-m", "10parsecs"}).ok());
  CHECK_FALSE(parse({"--comm", ""}).ok());
  CHECK_FALSE(parse({"--bogus"}).ok());
  CHECK_FALSE(parse({"-s"}).ok());          // -s is --stacks in the suite: not naptime's
  CHECK_FALSE(parse({"5"}).ok());           // no positional schedule: -d 5
  CHECK_FALSE(parse({"-d", "0"}).ok());     // duration 0
  CHECK_FALSE(parse({"-d", "-3"}).ok());    // negative duration
  CHECK_FALSE(parse({"-d", "abc"}).ok());   // non-numeric duration
  CHECK_FALSE(parse({"-c", "2"}).ok());     // a count needs an interval
  auto e = parse({"--bogus"});
  CHECK(e.error().find('\n') == std::string::npos);
}

TEST_CASE("naptime help: generated, usage line and examples") {
  std::string h = bpfdiag::render_help(tool_spec());
  CHECK(h.find("USAGE: naptime [-p PID[,PID]] [-t TID[,TID]] [--cgroup PATH] [--container ID] [--comm NAME] [-m TIME] [--summary] [-j] "
               "[--prometheus FILE] [--listen ADDR:PORT] [--ebpf] [-h] [--version] [-i TIME] [-c N] [-d TIME]\n") != std::string::npos);
  CHECK(h.find("EXAMPLES:\n  naptime  ") != std::string::npos);
  auto c = parse({"-h"});
  REQUIRE(c.ok());
  CHECK(c->help);
}

TEST_CASE("naptime BPF text: both sleep syscalls, enter and exit") {
  std::string t = bpf_text();
  for (const char* tp : {"TRACEPOINT_PROBE(syscalls, sys_enter_nanosleep)",
                         "TRACEPOINT_PROBE(syscalls, sys_exit_nanosleep)",
                         "TRACEPOINT_PROBE(syscalls, sys_enter_clock_nanosleep)",
                         "TRACEPOINT_PROBE(syscalls, sys_exit_clock_nanosleep)",
                         "bpf_ktime_get_boot_ns()", "OFF_TASK_REAL_PARENT", "BPF_PERF_OUTPUT(events)",
                         "#include \"naptime_shared.h\""})
    CHECK_MESSAGE(t.find(tp) != std::string::npos, tp);
}

TEST_CASE("naptime filters become BPF defines") {
  Config c;
  // the suite's one generator (common/filters.h): everything passes when unfiltered
  auto none = render_plan(filter_plan(c));
  REQUIRE(none.ok());
  CHECK(none->cflags == std::vector<std::string>{"-DTGID_OK(x)=(1)", "-DTID_OK(x)=(1)"});
  c.pids = {42, 43};
  c.tids = {7};
  c.comm = "java";
  c.min_ns = 10000000;
  auto p = filter_plan(c);
  REQUIRE(p.id_filters().size() == 2);
  CHECK(p.id_filters()[0].macro == "TGID_OK");
  CHECK(p.id_filters()[0].ids == std::vector<uint32_t>{42, 43});
  CHECK(p.id_filters()[1].ids == std::vector<uint32_t>{7});
  CHECK(p.has("FILTER_COMM"));
  CHECK(p.value("MIN_NS") == "10000000ULL");
  // rendered: the ID lists become maps, the same flags whatever the IDs
  auto f = render_plan(p);
  REQUIRE(f.ok());
  CHECK(f->cflags == std::vector<std::string>{"-DBPFDIAG_ID_MAP_TGID_OK=1", "-DBPFDIAG_ID_MAP_TID_OK=1",
                                              "-DFILTER_COMM", "-DMIN_NS=10000000ULL"});
  REQUIRE(f->id_maps.size() == 2);
  CHECK(f->id_maps[0].map == "tgid_ok_ids");
  CHECK(f->id_maps[0].ids == std::vector<uint32_t>{42, 43});
  // the BPF side uses exactly these macros
  CHECK(bpf_text().find("!TGID_OK(tgid) || !TID_OK(tid)") != std::string::npos);
  CHECK(bpf_text().find("FILTER_TGID") == std::string::npos);
}

TEST_CASE("naptime requested length: relative, absolute per clock, unknown") {
  naptime_start s = {};
  s.enter_mono_ns = 1000000000;  // 1 s
  s.enter_boot_ns = 3000000000;  // 3 s
  s.req_sec = 2;
  s.req_nsec = 5;
  __s64 out = -1;
  s.clock = NAPTIME_CLOCK_REALTIME;
  REQUIRE(naptime_requested_ns(&s, 0, 0, &out));
  CHECK(out == 2000000005);

  s.flags = NAPTIME_F_ABSTIME;
  s.clock = NAPTIME_CLOCK_MONOTONIC;  // target 2.000000005 s, now 1 s
  REQUIRE(naptime_requested_ns(&s, 0, 0, &out));
  CHECK(out == 1000000005);
  s.clock = NAPTIME_CLOCK_BOOTTIME;  // target in the past (now 3 s) -> 0
  REQUIRE(naptime_requested_ns(&s, 0, 0, &out));
  CHECK(out == 0);
  s.req_sec = 100;
  s.req_nsec = 0;
  s.clock = NAPTIME_CLOCK_REALTIME;  // realtime = mono + 90 s: now 91 s
  REQUIRE(naptime_requested_ns(&s, 90000000000LL, 0, &out));
  CHECK(out == 9000000000LL);
  s.clock = NAPTIME_CLOCK_TAI;  // tai = mono + 97 s: now 98 s
  REQUIRE(naptime_requested_ns(&s, 90000000000LL, 97000000000LL, &out));
  CHECK(out == 2000000000LL);
  s.clock = NAPTIME_CLOCK_PROCESS_CPUTIME_ID;  // an absolute CPU time cannot be converted
  CHECK_FALSE(naptime_requested_ns(&s, 0, 0, &out));

  s.flags = 0;
  s.req_nsec = 1000000000;  // invalid timespec: EINVAL
  CHECK_FALSE(naptime_requested_ns(&s, 0, 0, &out));
  s.req_nsec = 0;
  s.flags = NAPTIME_F_BAD_REQUEST;
  CHECK_FALSE(naptime_requested_ns(&s, 0, 0, &out));
}

TEST_CASE("naptime decode and names") {
  auto ev = fixed_event();
  Sleep s = decode(ev, {1700000000000000000LL, 0});
  CHECK(s.pid == 1975);
  CHECK(s.tid == 1976);
  CHECK(s.ppid == 1);
  CHECK(s.comm == "iscsid");
  CHECK(s.pcomm == "systemd");
  CHECK(s.syscall == "clock_nanosleep");
  CHECK(*s.requested_ns == 1500000000ULL);
  CHECK(s.slept_ns == 1500123456ULL);
  CHECK(s.time_ns == 1700000006500123456ULL);
  CHECK_FALSE(s.interrupted);

  CHECK_FALSE(s.restarted);

  // a signal handler ran: the BPF side reports what user space saw (-EINTR) and keeps
  // the kernel's code
  ev.ret = -4;
  ev.kernel_ret = -NAPTIME_ERESTART_RESTARTBLOCK;
  ev.start.flags = NAPTIME_F_NANOSLEEP;
  s = decode(ev, {});
  CHECK(s.interrupted);
  CHECK_FALSE(s.restarted);
  CHECK(s.kernel_ret == -516);
  CHECK(s.syscall == "nanosleep");
  CHECK(errno_name(s.ret) == "EINTR");

  // SIGSTOP/SIGCONT: restarted transparently, the call returned 0 to the application
  ev.ret = 0;
  ev.kernel_ret = 0;
  ev.start.flags = NAPTIME_F_NANOSLEEP | NAPTIME_F_RESTARTED;
  s = decode(ev, {});
  CHECK(s.restarted);
  CHECK_FALSE(s.interrupted);
  CHECK(errno_name(s.ret) == "");
  // kernel-internal codes are never called EINTR: user space does not see them
  CHECK(errno_name(-NAPTIME_ERESTART_RESTARTBLOCK) == "ERESTART_RESTARTBLOCK");
  CHECK(errno_name(-NAPTIME_ERESTARTNOHAND) == "ERESTARTNOHAND");
  CHECK(errno_name(-NAPTIME_ERESTARTSYS) == "ERESTARTSYS");
  CHECK(naptime_is_restart_code(-516));
  CHECK(naptime_is_restart_code(-512));
  CHECK_FALSE(naptime_is_restart_code(-4));
  CHECK_FALSE(naptime_is_restart_code(0));
  CHECK(errno_name(-22) == "EINVAL");
  CHECK(errno_name(-4) == "EINTR");
  CHECK(errno_name(0) == "");
  CHECK(clock_name(0) == "CLOCK_REALTIME");
  CHECK(clock_name(1) == "CLOCK_MONOTONIC");
  CHECK(clock_name(7) == "CLOCK_BOOTTIME");
  CHECK(clock_name(11) == "CLOCK_TAI");
  CHECK(clock_name(-6) == "CLOCK_CPUTIME_OTHER");
}

TEST_CASE("naptime render: a fixed sleep as text") {
  Config c;
  std::ostringstream hdr;
  render_header(hdr);
  CHECK(hdr.str() ==
        "TIME     PPID   PCOMM           PID    COMM              SECONDS     SLEPT NOTE\n");
  Sleep s = decode(fixed_event(), {});
  std::ostringstream os;
  auto dq = bpfdiag::DataQuality::with_keys(dq_keys());
  render_sleep(os, c, s, dq);
  // TIME is local wall-clock time; the rest of the line is fixed
  std::string line = os.str();
  REQUIRE(line.size() > 9);
  CHECK(line.substr(8) == " 1      systemd         1975   iscsid           1.500000  1.500123\n");

  s.abstime = true;
  s.clock = NAPTIME_CLOCK_MONOTONIC;
  s.ret = -4;
  s.requested_ns.reset();
  os.str("");
  render_sleep(os, c, s, dq);
  CHECK(os.str().substr(8) ==
        " 1      systemd         1975   iscsid                  ?  1.500123 MONO abs EINTR\n");

  s.abstime = false;
  s.ret = 0;
  s.restarted = true;
  s.requested_ns = 1500000000;
  os.str("");
  render_sleep(os, c, s, dq);
  CHECK(os.str().substr(8) ==
        " 1      systemd         1975   iscsid           1.500000  1.500123 restarted\n");
}

TEST_CASE("naptime render: a fixed sleep as JSON, and the report records") {
  Config c;
  c.json = true;
  Sleep s = decode(fixed_event(), {1000, 0});
  std::ostringstream os;
  auto dq = bpfdiag::DataQuality::with_keys(dq_keys());
  dq.lost_events = 7;
  render_sleep(os, c, s, dq);
  auto j = nlohmann::json::parse(os.str());
  CHECK(j["type"] == "naptime.sleep");
  CHECK(j["schema"] == bpfdiag::kSchemaVersion);
  CHECK(j["interval_ns"] == 0);  // an event
  CHECK(j["final"] == false);
  CHECK(j["pid"] == 1975);
  CHECK(j["tid"] == 1976);
  CHECK(j["ppid"] == 1);
  CHECK(j["comm"] == "iscsid");
  CHECK(j["pcomm"] == "systemd");
  CHECK(j["requested_ns"] == 1500000000ULL);
  CHECK(j["sleep_ns"] == 1500123456ULL);
  CHECK(j["clock"] == "CLOCK_REALTIME");
  CHECK(j["abstime"] == false);
  CHECK(j["interrupted"] == false);
  CHECK(j["restarted"] == false);
  CHECK(j["syscall"] == "clock_nanosleep");
  CHECK(j["error"].is_null());
  CHECK(j["time_ns"] == 6500124456ULL);  // when the sleep ended
  CHECK(j["data_quality"]["lost_events"] == 7);
  CHECK(j["data_quality"]["restarted_after_signal"] == 0);  // fixed key set
  CHECK(os.str().back() == '\n');

  Summary sum;
  sum.add(s);
  s.ret = -4;
  s.interrupted = true;
  s.slept_ns = 1000;
  sum.add(s);
  dq.unmatched_begin = 2;
  os.str("");
  render_report(os, c, sum, dq, bpfdiag::Window{99, 42, true});
  std::vector<nlohmann::json> recs;
  std::istringstream in(os.str());
  for (std::string l; std::getline(in, l);) recs.push_back(nlohmann::json::parse(l));
  REQUIRE(recs.size() == 2);
  auto& p = recs[0];
  CHECK(p["type"] == "naptime.process");
  CHECK(p["sleep_count"] == 2);
  CHECK(p["interrupted_count"] == 1);
  CHECK(p["restarted_count"] == 0);
  CHECK(p["requested_total_ns"] == 3000000000ULL);
  CHECK(p["sleep_total_ns"] == 1500124456ULL);
  auto& r = recs[1];
  CHECK(r["type"] == "naptime.summary");
  CHECK(r["sleep_count"] == 2);
  CHECK(r["interrupted_count"] == 1);
  CHECK(r["sleep_total_ns"] == 1500124456ULL);
  CHECK(r["process_count"] == 1);
  CHECK(r["interval_ns"] == 42);
  CHECK(r["final"] == true);
  CHECK(r["data_quality"]["unmatched_begin"] == 2);
  CHECK(r["sleep_hist"]["buckets"].size() == 2);

  c.json = false;
  c.summary = true;
  os.str("");
  render_report(os, c, sum, dq, bpfdiag::Window{99, 42, true});
  std::string t = os.str();
  CHECK(t.find("PID     COMM              SLEEPS   INTR   REQUESTED_S       SLEPT_S\n"
               "1975    iscsid                 2      1      3.000000      1.500124\n") == 0);
  CHECK(t.find("     usecs               : count     distribution\n") != std::string::npos);
  CHECK(t.find("data quality: lost events 7, lost stacks 0, unmatched begin 2") != std::string::npos);
}
