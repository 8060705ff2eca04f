#include <doctest/doctest.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/stacks.h"
#include "tests/unit/test_env.h"
#include "tools/offcputime/offcputime.h"

using namespace offcputime;

static bpfdiag::Result<Config> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "offcputime");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

TEST_CASE("offcputime: defaults") {
  auto c = parse({});
  REQUIRE(c);
  CHECK(c->min_ns == 1000);  // BCC's default: 1 us
  CHECK(c->max_ns == 0);
  CHECK(c->stack_storage_size == 0);  // sized from the targets at run time
  CHECK(c->map_entries == 32768);
  CHECK(!c->schedule.duration_ns);
  CHECK(!c->schedule.interval_ns);
  CHECK(!c->state);
  CHECK(!c->unwind_dwarf);  // system-wide: frame pointers
}

TEST_CASE("offcputime: --unwind (dwarf is the default with -p/-t)") {
  std::string self = std::to_string(getpid());
  CHECK(parse({"-p", self})->unwind_dwarf);
  CHECK(parse({"-t", self})->unwind_dwarf);
  CHECK(!parse({"--unwind=fp", "-p", self})->unwind_dwarf);
  CHECK(parse({"--unwind=dwarf", "-p", self})->unwind_dwarf);
  CHECK(!parse({"-K", "-p", self})->unwind_dwarf);  // no user stacks: nothing to unwind
  auto r = parse({"--unwind=dwarf"});
  REQUIRE_FALSE(r);
  CHECK(r.error().find("needs -p or -t") != std::string::npos);
  r = parse({"--unwind=lbr", "-p", self});
  REQUIRE_FALSE(r);
  CHECK(r.error().find("fp or dwarf") != std::string::npos);
}

TEST_CASE("offcputime: stack tables sized from the threads traced") {
  CHECK(auto_stack_storage(0) == 16384);
  CHECK(auto_stack_storage(1) == 16384);
  CHECK(auto_stack_storage(128) == 16384);
  CHECK(auto_stack_storage(129) == 32768);  // power of two >= 128 per thread
  CHECK(auto_stack_storage(300) == 65536);
  CHECK(auto_stack_storage(1025) == 131072);
  CHECK(auto_stack_storage(1000000) == 131072);
  CHECK(overflow_storage_size(16384) == 16384);
  CHECK(overflow_storage_size(65536) == 32768);
  CHECK(overflow_storage_size(262144) == 65536);
  CHECK(overflow_storage_size(1) == 16384);
  Config self;
  self.pids = {static_cast<uint32_t>(getpid())};
  CHECK(count_traced_threads(self) >= 1);
  Config all;
  CHECK(count_traced_threads(all) > count_traced_threads(self));
  Config one;
  one.tids = {static_cast<uint32_t>(getpid())};
  CHECK(count_traced_threads(one) == 1);
  // both tables in the BPF program, overflow ids flagged
  CHECK(bpf_text().find("BPFDIAG_HASH(overflow_ids, struct bpfdiag_stack, u32, OVERFLOW_STORAGE_SIZE)") != std::string::npos);
  CHECK(bpf_text().find("BPFDIAG_OVERFLOW_BIT") != std::string::npos);  // stacks.h, pasted
  // data-quality counters through the suite's one counter map
  CHECK(bpf_text().find("BPF_PERCPU_ARRAY(dq_counters") != std::string::npos);  // common.h, inlined
  CHECK(bpf_text().find("stat_inc") == std::string::npos);
}

TEST_CASE("offcputime: options (BCC's flags, the suite's vocabulary)") {
  std::string self = std::to_string(getpid());
  auto c = parse({"-p", self, "-t", self, "-u", "-U", "-d", "-f", "-P", "-m", "1000", "-M", "5ms",
                  "--state", "2", "--stack-storage-size", "1024", "--map-entries", "4096", "5"});
  REQUIRE(c);
  CHECK(c->pids == std::vector<uint32_t>{static_cast<uint32_t>(getpid())});
  CHECK(c->tids.size() == 1);
  CHECK(c->user_threads_only);
  CHECK(c->user_stacks_only);
  CHECK(c->delimiter);  // -d is BCC's "delimited", not a duration
  CHECK(c->folded);
  CHECK(c->per_thread);
  CHECK(c->min_ns == 1000000);  // default unit us
  CHECK(c->max_ns == 5000000);
  CHECK(*c->state == 2);
  CHECK(c->stack_storage_size == 1024);
  CHECK(c->map_entries == 4096);
  CHECK(*c->schedule.duration_ns == 5000000000ULL);
  CHECK(parse({"-df", "2"}));
  // the duration as an option (long only), intervals
  c = parse({"--duration", "500ms"});
  REQUIRE(c);
  CHECK(*c->schedule.duration_ns == 500000000ULL);
  c = parse({"-i", "2", "-c", "3"});
  REQUIRE(c);
  CHECK(*c->schedule.interval_ns == 2000000000ULL);
  CHECK(*c->schedule.count == 3);
  // hidden old names: BCC's long -m/-M names, our --map-size
  c = parse({"--min-block-time", "10", "--max-block-time", "20", "--map-size", "2048"});
  REQUIRE(c);
  CHECK(c->min_ns == 10000);
  CHECK(c->max_ns == 20000);
  CHECK(c->map_entries == 2048);
  CHECK(bpfdiag::render_help(tool_spec()).find("--map-size") == std::string::npos);
  CHECK(bpfdiag::render_help(tool_spec()).find("--min-block-time") == std::string::npos);
}

TEST_CASE("offcputime: bad input is one clear error") {
  auto err = [](std::vector<std::string> a) {
    auto r = parse(a);
    REQUIRE_FALSE(r);
    CHECK(r.error().find('\n') == std::string::npos);
    return r.error();
  };
  CHECK(err({"-m", "5000", "-M", "100"}).find("larger than") != std::string::npos);
  CHECK(err({"--min-block-time", "5000", "-M", "100"}).find("larger than") != std::string::npos);
  CHECK(err({"-m", "99999999999999999999"}).find("-m/--min") != std::string::npos);
  CHECK(err({"-M", "0"}).find("-M/--max") != std::string::npos);
  CHECK(err({"-m", "1", "--min-block-time", "2"}).find("once") != std::string::npos);
  CHECK(err({"--map-entries", "4096", "--map-size", "4096"}).find("once") != std::string::npos);
  CHECK(err({"--map-entries", "10"}).find("--map-entries") != std::string::npos);
  CHECK(err({"-p", "4194304"}).find("no process with PID 4194304") != std::string::npos);
  CHECK(err({"-p", "abc"}).find("PID") != std::string::npos);
  CHECK(err({"-t", "4194303"}).find("no thread with TID") != std::string::npos);
  // PID 1's threads never include our own thread
  CHECK(err({"-p", "1", "-t", std::to_string(getpid())}).find("is not a thread of PID 1") != std::string::npos);
  CHECK(err({"-u", "-k"}).find("mutually exclusive") != std::string::npos);
  CHECK(err({"-U", "-K"}).find("exclude each other") != std::string::npos);
  CHECK(err({"-f", "-j"}).find("exclude each other") != std::string::npos);
  CHECK(err({"--stack-storage-size", "0"}).find("--stack-storage-size") != std::string::npos);
  CHECK(err({"--state", "70000"}).find("state") != std::string::npos);
  CHECK(err({"1", "2"}).find("unexpected argument") != std::string::npos);
  CHECK(err({"--duration", "2", "3"}).find("not both") != std::string::npos);
  CHECK(err({"--duration", "x"}).find("--duration") != std::string::npos);
  CHECK(err({"--duration", "x"}).find("-d/") == std::string::npos);  // -d is "delimited" here
  CHECK(err({"-c", "3"}).find("needs an interval") != std::string::npos);
  CHECK(err({"--bogus"}).find("bogus") != std::string::npos);
}

TEST_CASE("offcputime: generated help") {
  std::string h = bpfdiag::render_help(tool_spec());
  CHECK(h.find("USAGE: " + bpfdiag::usage_line(tool_spec()) + "\n") != std::string::npos);
  CHECK(bpfdiag::usage_line(tool_spec()).rfind("offcputime [-p PID[,PID]] [-t TID[,TID]] [--cgroup PATH] [--container ID] [-u] [-k]", 0) == 0);
  CHECK(h.find("  -d, --delimited") != std::string::npos);
  CHECK(h.find("      --duration TIME") != std::string::npos);
  CHECK(h.find("      --map-entries N") != std::string::npos);
  CHECK(h.find("\nEXAMPLES:\n  offcputime  ") != std::string::npos);
  auto c = parse({"-h"});
  REQUIRE(c);
  CHECK(c->help);
}

TEST_CASE("offcputime: BPF cflags carry filters, bounds and BTF offsets") {
  if (!bpfdiag_test::require_env(access("/sys/kernel/btf/vmlinux", R_OK) == 0, "no /sys/kernel/btf/vmlinux")) return;
  auto c = parse({"-p", std::to_string(getpid()), "-m", "10", "-M", "20", "--state", "0", "-K"});
  REQUIRE(c);
  auto plan = bpf_plan(*c);
  REQUIRE(plan);
  auto f = render_plan(*plan);
  REQUIRE(f);
  std::string all;
  for (auto& s : f->cflags) all += s + " ";
  CHECK(all.find("-DBPFDIAG_ID_MAP_TGID_OK=1 ") != std::string::npos);  // the same for every PID
  REQUIRE(f->id_maps.size() == 1);
  CHECK(f->id_maps[0].ids == std::vector<uint32_t>{static_cast<uint32_t>(getpid())});
  CHECK(all.find("-DTID_OK(x)=(1)") != std::string::npos);
  CHECK(all.find("-DMIN_NS=10000ULL") != std::string::npos);
  CHECK(all.find("-DMAX_NS=20000ULL") != std::string::npos);
  CHECK(all.find("-DSTATE_EQ=0") != std::string::npos);
  CHECK(all.find("-DCAPTURE_KERNEL") != std::string::npos);
  CHECK(all.find("-DCAPTURE_USER") == std::string::npos);
  CHECK(all.find("-DOFF_TASK_STATE=") != std::string::npos);
  CHECK(all.find("-DCOUNTS_SIZE=262144") != std::string::npos);  // 8 x --map-entries, allocated as used
  CHECK(bpf_text().find("RAW_TRACEPOINT_PROBE(sched_switch)") != std::string::npos);
  // `seen` is pruned when a process exits
  CHECK(bpf_text().find("RAW_TRACEPOINT_PROBE(sched_process_exit)") != std::string::npos);
  // several PIDs: the shared generator's form
  auto c2 = parse({"-p", std::to_string(getpid()) + ",1", "-m", "10", "-M", "20", "--state", "0", "-K"});
  REQUIRE(c2);
  auto f2 = bpf_plan(*c2);
  REQUIRE(f2);
  REQUIRE(f2->id_filters().size() == 2);
  CHECK(f2->id_filters()[0].ids == std::vector<uint32_t>{static_cast<uint32_t>(getpid()), 1});
  CHECK(render_plan(*f2)->cflags == f->cflags);  // one compiled program for any PID list
}

// The fixture shared with the golden tests (offcputime_golden_test.cpp).
Report sample_report();

TEST_CASE("offcputime: multi-line text, ascending, values in us, data quality") {
  Config c;
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  std::string t = os.str();
  // ascending by total: the 1.5 us sleeper first, thread 11 (5 ms) last
  auto p13 = t.find("app (13)"), p12 = t.find("app (12)"), p11 = t.find("app (11)");
  CHECK(p13 < p12);
  CHECK(p12 < p11);
  CHECK(t.find("    -                app (11)\n        5000\n\n") != std::string::npos);
  CHECK(t.find("lost stacks 3") != std::string::npos);
  CHECK(err.str().empty());
}

TEST_CASE("offcputime: folded merges threads unless -P") {
  Config c;
  c.folded = true;
  auto lines = folded_lines(c, sample_report().entries);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "app;reader;read;-;anon_pipe_read;schedule 8000");
  CHECK(lines[1] == "app;sleeper;nanosleep;-;do_nanosleep;schedule 1");
  c.per_thread = true;
  lines = folded_lines(c, sample_report().entries);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "app-10/11;reader;read;-;anon_pipe_read;schedule 5000");
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  CHECK(os.str().find("data quality") == std::string::npos);  // stdout stays flamegraph input
  CHECK(err.str().find("lost stacks 3") != std::string::npos);
}

// Folded lines from entries whose frames hold the characters that could break the
// format (';', newline, spaces, a missed stack) parse back with bpfdiag::parse_folded
// into the frames and values the entries hold: written out by hand below, not by
// re-folding what was parsed.
TEST_CASE("offcputime: folded output parses back into the entries' frames and values") {
  Config c;
  c.per_thread = true;
  std::vector<Entry> es(3);
  es[0].pid = 7;
  es[0].tid = 8;
  es[0].comm = "a b";
  es[0].total_ns = 2500000;
  es[0].stack.user = {"ns::f(int; long)", "main"};
  es[0].stack.kernel = {"schedule", "do\nnanosleep"};
  es[1].pid = 7;
  es[1].tid = 9;
  es[1].comm = "a b";
  es[1].total_ns = 999;  // below 1 us: 0
  es[1].stack.user_missing = true;
  es[1].stack.kernel = {"schedule"};
  es[2].pid = 7;
  es[2].tid = 8;
  es[2].comm = "a b";
  es[2].total_ns = 1500000;  // same frames as es[0] once named: merged, 4000 us
  es[2].stack = es[0].stack;
  auto lines = folded_lines(c, es);
  REQUIRE(lines.size() == 2);
  struct Want {
    std::vector<std::string> frames;
    uint64_t value;
  };
  std::vector<Want> want = {
      {{"a b-7/8", "main", "ns::f(int: long)", "-", "do nanosleep", "schedule"}, 4000},
      {{"a b-7/9", "[Missed User Stack]", "-", "schedule"}, 0}};
  for (size_t i = 0; i < lines.size(); ++i) {
    auto p = bpfdiag::parse_folded(lines[i]);
    REQUIRE_MESSAGE(p, lines[i]);
    CHECK(p->frames == want[i].frames);
    CHECK(p->value == want[i].value);
  }
  // and what the parser refuses
  CHECK_FALSE(bpfdiag::parse_folded("a;;b 1"));
  CHECK_FALSE(bpfdiag::parse_folded("a;b"));
  CHECK_FALSE(bpfdiag::parse_folded("a;b 1x"));
}

TEST_CASE("offcputime: JSON records through the envelope") {
  Config c;
  c.json = true;
  std::ostringstream os, err;
  render(os, err, c, sample_report());
  std::vector<nlohmann::json> recs;
  std::istringstream in(os.str());
  for (std::string l; std::getline(in, l);) recs.push_back(nlohmann::json::parse(l));
  REQUIRE(recs.size() == 5);  // four stacks, then the summary
  CHECK(recs[0]["type"] == "offcputime.stack");
  CHECK(recs[0]["offcpu_total_ns"] == 5000000);  // descending
  CHECK(recs[0]["kernel_stack"][1] == "anon_pipe_read");
  CHECK(recs[0]["user_stack"][1] == "reader");
  CHECK(recs[0]["user_stack_missing"] == false);
  CHECK(recs[0]["data_quality"]["lost_stacks"] == 3);
  CHECK(recs[0]["data_quality"]["seen_full"] == 0);  // fixed key set
  auto& sum = recs.back();
  CHECK(sum["type"] == "offcputime.summary");
  CHECK(sum["final"] == true);
  CHECK(sum["interval_ns"] == 1000000000);
  CHECK(sum["offcpu_total_ns"] == 5000000 + 3000000 + 1500 + 700000);
  CHECK(sum["thread_count"] == 3);
  REQUIRE(sum["threads"].size() == 3);
  CHECK(sum["threads"][0]["tid"] == 11);
  CHECK(sum["threads"][0]["offcpu_total_ns"] == 5000000);
  CHECK(sum["threads"][2]["offcpu_total_ns"] == 1500 + 700000);
  // -U: the kernel part is not in the record at all
  Report r = sample_report();
  for (auto& e : r.entries) e.stack.want_kernel = false;
  os.str("");
  render(os, err, c, r);
  auto first = nlohmann::json::parse(os.str().substr(0, os.str().find('\n')));
  CHECK_FALSE(first.contains("kernel_stack"));
  CHECK(first.contains("user_stack"));
}

TEST_CASE("offcputime: warnings name the option that fixes them") {
  Config c;
  bpfdiag::DataQuality dq;
  CHECK(warnings(c, dq).empty());
  dq.lost_stacks = 5;
  dq.map_full = 2;
  auto w = warnings(c, dq);
  REQUIRE(w.size() == 2);
  CHECK(w[0].find("--stack-storage-size 65536") != std::string::npos);  // 4x the default
  c.stack_storage_size = 131072;
  CHECK(warnings(c, dq)[0].find("--stack-storage-size 262144") != std::string::npos);
  c.stack_storage_size = 0;
  CHECK(w[1].find("--map-entries 131072") != std::string::npos);
  CHECK(w[1].find("off-CPU periods were dropped") != std::string::npos);
  // a full `seen` map drops no periods: its own warning, which says so
  dq.map_full = 0;
  dq.extra["seen_full"] = 4;
  w = warnings(c, dq);
  REQUIRE(w.size() == 2);
  CHECK(w[1].find("4 new processes were not announced") != std::string::npos);
  CHECK(w[1].find("no periods were dropped") != std::string::npos);
  CHECK(w[1].find("--map-entries 131072") != std::string::npos);
  dq.extra["seen_full"] = 0;
  CHECK(warnings(c, dq).size() == 1);
}

TEST_CASE("offcputime: merged entries and thread totals") {
  std::vector<Entry> es = sample_report().entries;
  es.push_back(es[0]);  // the same thread and frames again (another stack id)
  es.back().max_ns = 9;
  merge_identical(es);
  REQUIRE(es.size() == 4);
  CHECK(es[0].total_ns == 10000000);
  CHECK(es[0].count == 4);
  auto t = thread_totals(es);
  REQUIRE(t.size() == 3);
  CHECK(t[0].tid == 11);
  CHECK(t[0].total_ns == 10000000);
}

TEST_CASE("offcputime: a thread switched out runnable waited for a CPU, whatever its stack") {
  std::vector<Entry> es = sample_report().entries;
  es.push_back(es[0]);  // the same frames, switched out runnable (preempted there)
  es.back().runnable = true;
  merge_identical(es);
  REQUIRE(es.size() == 5);  // a preemption stays apart from the blocking wait
  classify_waits(es);
  CHECK(es[0].wait.kind != bpfdiag::WaitKind::Cpu);
  CHECK(es.back().wait.kind == bpfdiag::WaitKind::Cpu);
  CHECK(es.back().wait.what.find("preempted") != std::string::npos);
  CHECK(wait_class_totals(es).at("cpu") == es.back().total_ns);
}

// --waker (BCC's offwaketime): the flag, its refusal, the BPF defines it adds.
TEST_CASE("offcputime: --waker option and BPF defines") {
  auto c = parse({"--waker"});
  REQUIRE(c);
  CHECK(c->waker);
  CHECK_FALSE(parse({})->waker);
  auto r = parse({"--waker", "--state", "0"});  // preempted periods have no waker
  REQUIRE_FALSE(r);
  CHECK(r.error().find("--waker with --state 0") != std::string::npos);
  CHECK(parse({"--waker", "--state", "2", "-K"}));
  CHECK(bpfdiag::render_help(tool_spec()).find("      --waker") != std::string::npos);
  CHECK(bpf_text().find("RAW_TRACEPOINT_PROBE(sched_waking)") != std::string::npos);
  if (!bpfdiag_test::require_env(access("/sys/kernel/btf/vmlinux", R_OK) == 0, "no /sys/kernel/btf/vmlinux")) return;
  auto plan = bpf_plan(*c);
  REQUIRE(plan);
  CHECK(plan->has("WAKER"));
  CHECK(plan->has("OFF_TASK_STACK"));
  CHECK(plan->value("THREAD_SIZE") == std::optional<std::string>("16384"));
  CHECK_FALSE(bpf_plan(*parse({}))->has("WAKER"));
}

static Entry waker_entry(WakerKind kind, std::vector<std::string> wk, std::vector<std::string> wu) {
  Entry e;
  e.pid = 10;
  e.tid = 11;
  e.comm = "A";
  e.total_ns = 4000000;
  e.count = 2;
  e.stack.user = {"waiter_block_fn", "main"};
  e.stack.kernel = {"schedule", "futex_wait"};
  e.waker.kind = kind;
  if (kind == WakerKind::Task) e.waker.pid = 10, e.waker.tid = 12, e.waker.comm = "B";
  e.waker.stack.kernel = std::move(wk);
  e.waker.stack.user = std::move(wu);
  return e;
}

TEST_CASE("offcputime: --waker folded lines follow BCC offwaketime") {
  Config c;
  c.folded = true;
  c.waker = true;
  std::vector<Entry> es = {
      waker_entry(WakerKind::Task, {"try_to_wake_up", "futex_wake"}, {"waker_signal_fn", "main"}),
      waker_entry(WakerKind::Interrupt, {"try_to_wake_up", "hrtimer_wakeup"}, {}),
      waker_entry(WakerKind::Preempted, {}, {}),
  };
  auto lines = folded_lines(c, es);
  REQUIRE(lines.size() == 3);
  // wakee root to leaf, "--", the waker's frames innermost first (kernel, "-", user), its comm
  CHECK(lines[0] == "A;main;waiter_block_fn;-;futex_wait;schedule;--;try_to_wake_up;futex_wake;-;waker_signal_fn;main;B 4000");
  CHECK(lines[1] == "A;main;waiter_block_fn;-;futex_wait;schedule;--;try_to_wake_up;hrtimer_wakeup;[interrupt] 4000");
  CHECK(lines[2] == "A;main;waiter_block_fn;-;futex_wait;schedule;--;[preempted] 4000");
  for (auto& l : lines) {  // flamegraph input: frames and a value
    auto f = bpfdiag::parse_folded(l);
    REQUIRE(f);
    CHECK(f->value == 4000);
  }
  // -K: no user parts on either side
  Entry k = es[0];
  k.stack.want_user = k.waker.stack.want_user = false;
  CHECK(waker_folded_suffix(k.waker) == ";--;try_to_wake_up;futex_wake;B");
  // the same wakee stack with two wakers stays two entries
  std::vector<Entry> two = {es[0], es[1], es[0]};
  merge_identical(two);
  REQUIRE(two.size() == 2);
  CHECK(two[0].total_ns == 8000000);
  auto totals = waker_kind_totals(two);
  CHECK(totals.at("task") == 8000000);
  CHECK(totals.at("interrupt") == 4000000);
  CHECK(totals.at("unknown") == 0);
}

TEST_CASE("offcputime: an interrupt's kernel stack ends at its entry") {
  std::vector<std::string> k = {"try_to_wake_up", "hrtimer_wakeup", "__hrtimer_run_queues", "hrtimer_interrupt",
                                "__sysvec_apic_timer_interrupt", "sysvec_apic_timer_interrupt",
                                "asm_sysvec_apic_timer_interrupt", "pv_native_safe_halt", "default_idle",
                                "do_idle"};
  trim_interrupted(k);
  REQUIRE(k.size() == 7);
  CHECK(k.back() == "asm_sysvec_apic_timer_interrupt");
  std::vector<std::string> none = {"try_to_wake_up", "futex_wake"};
  trim_interrupted(none);
  CHECK(none.size() == 2);
  // BPF records every waker as the current task: its kernel frames tell an interrupt
  Waker w;
  w.kind = WakerKind::Task;
  w.pid = 7, w.tid = 8, w.comm = "cc1plus";
  w.stack.user = {"main"};
  w.stack.kernel = {"try_to_wake_up", "hrtimer_wakeup", "hrtimer_interrupt", "__sysvec_apic_timer_interrupt",
                    "sysvec_apic_timer_interrupt", "asm_sysvec_apic_timer_interrupt"};
  classify_waker(w);
  CHECK(w.kind == WakerKind::Interrupt);
  CHECK(w.name() == "[interrupt]");
  CHECK((w.pid == 0 && w.tid == 0 && w.comm.empty() && w.stack.user.empty()));
  Waker t;  // a syscall's wakeup stays the task's; so does a page fault's
  t.kind = WakerKind::Task;
  t.comm = "B";
  t.stack.kernel = {"try_to_wake_up", "wake_up_q", "futex_wake", "do_futex", "__x64_sys_futex", "do_syscall_64",
                    "entry_SYSCALL_64_after_hwframe"};
  classify_waker(t);
  CHECK(t.kind == WakerKind::Task);
  CHECK_FALSE(interrupt_frames({"try_to_wake_up", "handle_mm_fault", "exc_page_fault", "asm_exc_page_fault"}));
  CHECK(interrupt_frames({"try_to_wake_up", "process_one_work", "handle_softirqs", "run_ksoftirqd"}));
}
