#include <doctest/doctest.h>

#include "tests/unit/golden.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "hist.h"
#include "tools/lockstat/internal.h"

using namespace lockstat;

namespace {

bpfdiag::Result<Config> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "lockstat");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_args(static_cast<int>(argv.size()), argv.data());
}

RawWait wait(uint32_t kind, uint32_t pid, uint32_t tid, uint64_t addr, uint64_t count,
             uint64_t total, uint64_t max, uint32_t flags = 0, int32_t stack = 1) {
  RawWait w{};
  w.key.kind = kind;
  w.key.pid = pid;
  w.key.tid = tid;
  w.key.addr = addr;
  w.key.flags = flags;
  w.key.stack_id = stack;
  w.val.count = count;
  w.val.blocked = count;
  w.val.total_ns = total;
  w.val.max_ns = max;
  return w;
}

void add_hist(Snapshot& s, const RawWait& w, uint64_t value, uint64_t n) {
  lockstat_hkey h{};
  h.addr = w.key.addr;
  h.pid = w.key.pid;
  h.tid = w.key.tid;
  h.kind = w.key.kind;
  h.bucket = hist_fine_index(value);  // the bucket BPF would use
  s.hist.push_back({h, n});
}

// A user mutex with 4 waiters (convoy) and a kernel rwsem with 1 waiter (long hold).
Snapshot sample() {
  Snapshot s;
  for (uint32_t t = 101; t <= 104; ++t) {
    auto w = wait(LS_KIND_FUTEX, 100, t, 0x5000, 10, 10 * 200000, 400000, LS_FUTEX_LOCKWORD);
    s.waits.push_back(w);
    add_hist(s, w, 200000, 10);
    s.comms[t] = "worker";
  }
  s.comms[100] = "app";
  auto k = wait(LS_KIND_KERNEL, 200, 201, 0xffff888000001000ULL, 2, 2 * 5000000, 6000000,
                LS_LCB_WRITE | LS_KID_MMAP_LOCK, 7);
  s.waits.push_back(k);
  add_hist(s, k, 5000000, 2);
  s.comms[201] = "mapper";
  return s;
}

Names fake_names() {
  Names n;
  n.lock_symbol = [](uint32_t pid, uint64_t addr) -> std::string {
    return pid == 100 && addr == 0x5000 ? "cache_lock" : "";
  };
  n.frames = [](const lockstat_key& k) -> std::vector<std::string> {
    if (k.kind == LS_KIND_KERNEL) return {"rwsem_down_write_slowpath", "down_write_killable", "__vm_munmap"};
    // glibc's mutex slow path for its lock word; otherwise a frame no wait-site rule knows
    if (k.flags & LS_FUTEX_LOCKWORD) return {"__lll_lock_wait", "update_cache", "worker"};
    return {"__futex_abstimed_wait_common", "update_cache", "worker"};
  };
  n.site = [](const lockstat_key& k, const std::vector<std::string>& f) -> std::string {
    if (k.kind == LS_KIND_KERNEL)
      for (auto& x : f)
        if (!is_kernel_lock_frame(x)) return x;
    return f.size() > 1 ? f[1] : "";
  };
  return n;
}

}  // namespace


TEST_CASE("lockstat: parse defaults and options") {
  auto c = parse({});
  REQUIRE(c);
  CHECK(c->sort == "wait_total_ns");
  CHECK(c->entries == 10);
  CHECK(c->stacks == 3);
  CHECK(!c->uprobes);
  // -p PIDs must exist (checked at parse time): this process and its parent
  const uint32_t me = static_cast<uint32_t>(getpid()), parent = static_cast<uint32_t>(getppid());
  auto d = parse({"-p", std::to_string(me) + "," + std::to_string(parent), "-t", "56", "-L", "0x7f00,cache_lock", "-m", "2ms", "-S", "max",
                  "-n", "0", "-s", "5", "-P", "-H", "--csv", "-i", "1", "-c", "3"});
  REQUIRE(d);
  CHECK(d->pids == std::vector<uint32_t>{me, parent});
  CHECK(d->tids == std::vector<uint32_t>{56});
  CHECK(d->lock_addrs == std::vector<uint64_t>{0x7f00});
  CHECK(d->lock_names == std::vector<std::string>{"cache_lock"});
  CHECK(d->min_wait_ns == 2000000);
  CHECK(d->per_thread);
  CHECK(d->entries == 0);
  CHECK(d->stacks == 5);
  CHECK(d->sort == "max");
  CHECK(d->csv);
  CHECK(*d->schedule.interval_ns == 1000000000ULL);
  CHECK(*d->schedule.count == 3);
  CHECK(parse({"-m", "100"})->min_wait_ns == 100000);  // default unit us
  CHECK(*parse({"-d", "5"})->schedule.duration_ns == 5000000000ULL);
}

TEST_CASE("lockstat: bad input is an error value") {
  CHECK(parse({"-K", "-U"}).error() == "-K (kernel only) and -U (user only) exclude each other");
  CHECK(!parse({"--uprobes", "-K"}));
  CHECK(!parse({"-j", "--csv"}));
  CHECK(parse({"-L", "0xzz"}).error().find("invalid lock address '0xzz'") == 0);
  CHECK(parse({"-L", "12ab"}).error().find("invalid lock '12ab'") == 0);
  CHECK(parse({"-S", "bogus"}).error().find("unknown sort key 'bogus'") == 0);
  CHECK(parse({"--fields", "kind,nope"}).error().find("unknown field 'nope'") == 0);
  CHECK(parse({"-P", "-S", "top_lock"}));        // thread view has its own columns
  CHECK(!parse({"-P", "-S", "waiters"}));
  CHECK(parse({"-S", "wait_p99_ns"}));            // vocabulary names and short names
  CHECK(parse({"--fields", "kind,contended,wait_total_ns,p90"}));
  // the old flags are gone: -k (sort), -E (entries), -F (fields), --tid, positional
  CHECK(!parse({"-k", "max"}));
  CHECK(!parse({"-E", "5"}));
  CHECK(!parse({"-F", "kind"}));
  CHECK(!parse({"1"}));
  CHECK(!parse({"-c", "3"}));  // a count needs an interval
  CHECK(!parse({"-p", "0"}));
  CHECK(!parse({"-p", "12x"}));
  // (a PID that does not exist is refused by tool_main: test_cli_hardening.py)
  CHECK(!parse({"-n", "-1"}));
  // an empty field list is refused, not an empty table
  CHECK(parse({"--fields", ""}).error().find("needs a non-empty value") != std::string::npos);
  CHECK(!parse({"--fields", "+"}));
  CHECK(!parse({"--map-entries", "10"}));
  CHECK(parse({"--map-entries", "100000"})->map_entries == 100000);
  CHECK(!parse({"1", "2", "3"}));
  CHECK(!parse({"-j", "-P", "--csv"}));
}

TEST_CASE("lockstat: kernel lock kinds from contention_begin flags") {
  CHECK(kernel_lock_kind(LS_LCB_SPIN) == "spinlock");
  CHECK(kernel_lock_kind(LS_LCB_SPIN | LS_LCB_READ) == "rwlock:R");
  CHECK(kernel_lock_kind(LS_LCB_SPIN | LS_LCB_WRITE) == "rwlock:W");
  CHECK(kernel_lock_kind(LS_LCB_READ) == "rwsem:R");
  CHECK(kernel_lock_kind(LS_LCB_WRITE) == "rwsem:W");
  CHECK(kernel_lock_kind(LS_LCB_READ | LS_LCB_WRITE) == "rwsem");
  CHECK(kernel_lock_kind(LS_LCB_MUTEX) == "mutex");
  CHECK(kernel_lock_kind(LS_LCB_MUTEX | LS_LCB_SPIN) == "mutex");
  CHECK(kernel_lock_kind(LS_LCB_RT) == "rt-mutex");
  CHECK(kernel_lock_kind(LS_LCB_RT | LS_LCB_WRITE) == "rwlock-rt:W");
  CHECK(kernel_lock_kind(LS_LCB_PERCPU | LS_LCB_READ) == "pcpu-sem:R");
  CHECK(kernel_lock_kind(LS_LCB_WRITE | LS_KID_MMAP_LOCK) == "rwsem:W");
  CHECK(user_lock_kind(LS_KIND_FUTEX, LS_FUTEX_LOCKWORD) == "futex-mutex");
  CHECK(user_lock_kind(LS_KIND_FUTEX, LS_FUTEX_BITSET) == "futex-sync");
  CHECK(user_lock_kind(LS_KIND_FUTEX, LS_FUTEX_PLAIN) == "futex");
  CHECK(user_lock_kind(LS_KIND_FUTEX, LS_FUTEX_PI) == "futex-pi");
  CHECK(user_lock_kind(LS_KIND_PTHREAD, 0) == "pthread");
  CHECK(is_kernel_lock_frame("_raw_spin_lock_irqsave"));
  CHECK(is_kernel_lock_frame("rwsem_down_write_slowpath"));
  CHECK(is_kernel_lock_frame("down_write_killable"));
  CHECK(is_kernel_lock_frame("raw_spin_rq_lock_nested"));
  CHECK(!is_kernel_lock_frame("__vm_munmap"));
  CHECK(!is_kernel_lock_frame("lock_mm_and_find_vma"));
}

TEST_CASE("lockstat: locks are grouped, named, ranked and read") {
  auto c = parse({});
  auto rows = build_locks(sample(), fake_names(), *c);
  REQUIRE(rows.size() == 2);
  // ranked by total wait: the rwsem (10 ms) before the user mutex (8 ms)
  CHECK(rows[0].layer == "kernel");
  CHECK(rows[0].kind == "rwsem:W");
  CHECK(rows[0].symbol == "mmap_lock");
  CHECK(rows[0].pid == 200);
  CHECK(rows[0].sites.at(0).site == "__vm_munmap");
  CHECK(reading(rows[0]).rfind("long hold: 1 thread", 0) == 0);
  const auto& u = rows[1];
  CHECK(u.kind == "futex-mutex");
  CHECK(u.symbol == "cache_lock");
  CHECK(u.comm == "app");
  CHECK(u.contended == 40);
  CHECK(u.total_ns == 8000000);
  CHECK(u.max_ns == 400000);
  CHECK(u.avg_ns() == 200000);
  CHECK(u.waiters.size() == 4);
  // percentiles from fine buckets: within 1/16 of the true value
  CHECK(u.p50_ns >= 200000 * 15 / 16);
  CHECK(u.p50_ns <= 200000 * 17 / 16);
  CHECK(u.sites.size() == 1);
  CHECK(u.sites[0].site == "update_cache");
  CHECK(u.sites[0].contended == 40);
  CHECK(reading(u).rfind("convoy: 4 threads", 0) == 0);

  auto byc = parse({"-S", "contended"});
  CHECK(build_locks(sample(), fake_names(), *byc)[0].symbol == "cache_lock");
  auto named = parse({"-L", "cache_lock"});
  auto only = build_locks(sample(), fake_names(), *named);
  REQUIRE(only.size() == 1);
  CHECK(only[0].symbol == "cache_lock");
}

TEST_CASE("lockstat: per-thread view") {
  auto c = parse({"-P"});
  auto rows = build_threads(sample(), fake_names(), *c);
  REQUIRE(rows.size() == 5);
  CHECK(rows[0].tid == 201);
  CHECK(rows[0].top_lock == "mmap_lock");
  CHECK(rows[1].total_ns == 2000000);
  CHECK(rows[1].locks == 1);
  CHECK(rows[1].top_lock == "cache_lock");
}

TEST_CASE("lockstat: text, CSV and JSON reports") {
  Snapshot s = sample();
  s.dq.lost_stacks = 3;
  std::ostringstream txt;
  std::ostringstream txt_err;
  render(txt, txt_err, *parse({}), s, fake_names(), bpfdiag::Window{0, 1000000000ULL, true});
  std::string t = txt.str();
  CHECK(t.find("KIND           PID    CONT   TOTAL     MAX     P50     P99 WTR LOCK\n") == 0);
  CHECK(t.find("rwsem:W        200       2  10.0ms  6.00ms") != std::string::npos);
  CHECK(t.find("futex-mutex    100      40  8.00ms   400us") != std::string::npos);
  CHECK(t.find("cache_lock\n    convoy: 4 threads") != std::string::npos);
  CHECK(t.find("    site         40  8.00ms  update_cache <- worker\n") != std::string::npos);
  CHECK(t.find("data quality: lost events 0, lost stacks 3") != std::string::npos);
  CHECK(txt_err.str().empty());

  std::ostringstream csv, csv_err;
  render(csv, csv_err, *parse({"--csv", "--fields", "kind,lock,contended,total"}), s, fake_names(), bpfdiag::Window{0, 0, true});
  CHECK(csv.str() == "kind,lock,wait_count,wait_total_ns\nrwsem:W,mmap_lock,2,10000000\nfutex-mutex,cache_lock,40,8000000\n");
  // the data-quality line goes to the error stream, one line, keeping the CSV pure
  CHECK(csv_err.str().rfind("data quality: lost events 0, lost stacks 3", 0) == 0);
  const std::string ce = csv_err.str();
  CHECK(std::count(ce.begin(), ce.end(), '\n') == 1);
  std::ostringstream tcsv, tcsv_err;
  render(tcsv, tcsv_err, *parse({"-P", "--csv", "--fields", "tid,total"}), s, fake_names(), bpfdiag::Window{0, 0, true});
  CHECK(tcsv.str().rfind("tid,wait_total_ns\n", 0) == 0);
  CHECK(tcsv.str().find("data quality") == std::string::npos);
  CHECK(tcsv_err.str().rfind("data quality: lost events 0, lost stacks 3", 0) == 0);

  std::ostringstream js, js_err;
  render(js, js_err, *parse({"-j", "-H"}), s, fake_names(), bpfdiag::Window{7, 5, true});
  std::istringstream in(js.str());
  std::string line;
  std::vector<nlohmann::json> recs;
  while (std::getline(in, line)) recs.push_back(nlohmann::json::parse(line));
  REQUIRE(recs.size() == 3);
  auto& u = recs[1];
  CHECK(u["type"] == "lockstat.lock");
  CHECK(u["time_ns"] == 7);
  CHECK(u["interval_ns"] == 5);
  CHECK(u["kind"] == "futex-mutex");
  CHECK(u["pid"] == 100);
  CHECK(u["addr"] == "0x5000");
  CHECK(u["symbol"] == "cache_lock");
  CHECK(u["wait_count"] == 40);
  CHECK(u["wait_total_ns"] == 8000000);
  CHECK(u["wait_max_ns"] == 400000);
  CHECK(u["wait_avg_ns"] == 200000);
  CHECK(u["thread_count"] == 4);
  CHECK(u["threads"].size() == 4);
  CHECK(u["sites"][0]["user_stack"][1] == "update_cache");
  CHECK(u["sites"][0]["user_stack_missing"] == false);
  CHECK(u["wait_hist"]["buckets"][0]["count"] == 40);
  CHECK(u["data_quality"]["lost_stacks"] == 3);
  CHECK(u["data_quality"]["below_min"] == 0);  // fixed keys: present when zero
  CHECK(recs[0]["sites"][0].contains("kernel_stack"));
  CHECK(recs[2]["type"] == "lockstat.summary");
  CHECK(recs[2]["wait_total_ns"] == 18000000);
  CHECK(recs[2]["lock_count"] == 2);
  CHECK(recs[2]["thread_count"] == 5);
  // JSON keys are the table's column names: --fields/--sort/CSV name the same thing
  const auto lt = lock_table(false);
  for (const auto& col : lt.columns()) CHECK_MESSAGE(u.contains(col.name), col.name);
  CHECK(js_err.str().empty());
}

TEST_CASE("lockstat: BPF text and mode flags") {
  CHECK(bpf_text().find("TRACEPOINT_PROBE(lock, contention_begin)") != std::string::npos);
  CHECK(bpf_text().find("TRACEPOINT_PROBE(syscalls, sys_enter_futex)") != std::string::npos);
  auto filter = [](const bpfdiag::BpfPlan& p, const std::string& macro) {
    for (const auto& f : p.id_filters())
      if (f.macro == macro) return f.ids;
    return std::vector<uint32_t>{99};
  };
  auto f = *bpf_plan(*parse({}), false);
  CHECK(f.has("USER_FUTEX"));
  CHECK(f.has("KERNEL_LOCKS"));
  CHECK(filter(f, "TGID_OK").empty());  // no -p/--tid: everything passes
  CHECK(filter(f, "TID_OK").empty());
  CHECK(!f.has("FILTER_ADDRS"));
  auto k = *bpf_plan(*parse({"-K", "-p", "1", "-t", "7,8"}), false);
  CHECK(!k.has("USER_FUTEX"));
  CHECK(filter(k, "TGID_OK") == std::vector<uint32_t>{1});
  CHECK(filter(k, "TID_OK") == std::vector<uint32_t>{7, 8});
  auto u = *bpf_plan(*parse({"--uprobes", "-U", "-L", "0x10", "-m", "5"}), false);
  CHECK(u.has("USER_PTHREAD"));
  CHECK(!u.has("KERNEL_LOCKS"));
  CHECK(u.has("FILTER_ADDRS"));
  CHECK(u.value("ADDR_FILTER_ENTRIES") == "1");
  // the address filter map is sized from the list: no silently shorter filter
  std::string many;
  for (int i = 1; i <= 1500; ++i) many += (many.empty() ? "0x" : ",0x") + std::to_string(i);
  CHECK(bpf_plan(*parse({"-L", many}), false)->value("ADDR_FILTER_ENTRIES") == "1500");
  CHECK(u.value("MIN_WAIT_NS") == "5000ULL");
  // a symbolic name is matched after symbolization, so no in-kernel address filter
  CHECK(!bpf_plan(*parse({"-L", "mmap_lock"}), false)->has("FILTER_ADDRS"));
}

TEST_CASE("lockstat: --unwind (dwarf by default with -p/-t, fp system-wide)") {
  const std::string self = std::to_string(getpid());
  CHECK(parse({"-p", self})->unwind_dwarf);
  CHECK(parse({"-t", self})->unwind_dwarf);
  CHECK_FALSE(parse({})->unwind_dwarf);
  CHECK_FALSE(parse({"-p", self, "--unwind", "fp"})->unwind_dwarf);
  CHECK_FALSE(parse({"-K", "-p", self})->unwind_dwarf);  // kernel locks: no user stacks
  CHECK(parse({"--unwind", "dwarf"}).error().find("needs -p or -t") != std::string::npos);
  CHECK(parse({"-p", self, "--unwind", "lbr"}).error().find("fp or dwarf") != std::string::npos);
  // the fp-mode stack scan reads the user registers through task_struct.stack (BTF);
  // dwarf mode has the whole stack and must not define it (the unwinder's flags do)
  CHECK(bpf_plan(*parse({"-p", self, "--unwind", "fp"}), true)->has("OFF_TASK_STACK"));
  CHECK_FALSE(bpf_plan(*parse({"-p", self}), true)->has("OFF_TASK_STACK"));
}

// --- what a wait is ---------------------------------------------------------------------

namespace {

// One user lock in process 100 waited on by `tids`, each `per` ns in `n` waits, with
// the given futex flags, timeouts and wakers.
Snapshot one_lock(uint32_t flags, std::vector<uint32_t> tids, uint64_t per, uint64_t n, uint64_t timedout,
                  std::vector<std::pair<uint32_t, uint64_t>> wakers, uint64_t window = 1000000000ULL) {
  Snapshot s;
  s.window_ns = window;
  for (uint32_t t : tids) {
    auto w = wait(LS_KIND_FUTEX, 100, t, 0x6000, n, per, per / n * 2, flags);
    w.val.timedout = timedout;
    s.waits.push_back(w);
    add_hist(s, w, per / n, n);
    s.comms[t] = "t";
  }
  for (auto [tid, cnt] : wakers) {
    lockstat_wkey k{};
    k.addr = 0x6000;
    k.pid = 100;
    k.waker = tid;
    s.wakers.push_back({k, cnt});
  }
  return s;
}

LockRow only_row(const Snapshot& s, Names n = fake_names()) {
  auto rows = build_locks(s, n, *parse({}));
  REQUIRE(rows.size() == 1);
  return rows[0];
}

}  // namespace

TEST_CASE("lockstat: waits are classed by what they are") {
  // glibc mutex (FUTEX_WAIT on a word of 2): contention, whoever wakes
  auto m = only_row(one_lock(LS_FUTEX_LOCKWORD, {101, 102}, 850000000, 1000, 0, {{101, 500}, {102, 499}}));
  CHECK(m.cls == WaitClass::Contention);
  // a thread waiting 85% of its time is not "light"
  CHECK(m.max_share > 0.84);
  CHECK(reading(m).find("light") == std::string::npos);
  CHECK(reading(m).rfind("contended: 2 threads", 0) == 0);
  CHECK(reading(m).find("85%") != std::string::npos);
  // a lightly used mutex is light
  auto l = only_row(one_lock(LS_FUTEX_LOCKWORD, {101, 102, 103}, 20000000, 100, 0, {}));
  CHECK(reading(l).rfind("light: 3 threads", 0) == 0);
  // 16 threads each waiting 6.4% of the window: no one waiter loses 10%, but together a
  // thread is always waiting (MariaDB's LOCK_table_cache under sysbench): not light
  std::vector<uint32_t> sixteen;
  for (uint32_t t = 101; t <= 116; ++t) sixteen.push_back(t);
  auto hot = only_row(one_lock(LS_FUTEX_LOCKWORD, sixteen, 64000000, 100, 0, {}));
  CHECK(hot.max_share < 0.10);
  CHECK(hot.mean_waiting > 1.0);
  CHECK(reading(hot).find("light") == std::string::npos);
  CHECK(reading(hot).rfind("convoy: 16 threads", 0) == 0);
  // many threads, long waits, most of their time: a convoy behind long holds
  auto cv = only_row(one_lock(LS_FUTEX_LOCKWORD, {101, 102, 103, 104}, 700000000, 200, 0, {}));
  CHECK(reading(cv).rfind("convoy behind long holds: 4 threads", 0) == 0);

  // an idle work queue's semaphore (FUTEX_WAIT_BITSET), released by a producer that
  // never waits on it: idle, not "convoy behind long holds"
  auto q = only_row(one_lock(LS_FUTEX_BITSET, {101, 102, 103, 104}, 900000000, 10, 0, {{100, 40}}));
  CHECK(q.cls == WaitClass::Idle);
  CHECK(reading(q).rfind("idle: 4 threads wait for work", 0) == 0);
  CHECK(reading(q).find("convoy") == std::string::npos);
  // the same semaphore used as a lock: released by the threads that also wait on it
  auto sl = only_row(one_lock(LS_FUTEX_BITSET, {101, 102, 103}, 300000000, 300, 0, {{101, 100}, {102, 100}, {103, 99}}));
  CHECK(sl.cls == WaitClass::Contention);
  // CPython's SimpleQueue: a getter that took an item posts the semaphore again, so a
  // fellow waiter wakes, finds the queue empty and waits again: 500 of 749 wake-ups
  // by fellow waiters, 249 by the one producer. Still an idle queue.
  auto pass_on = only_row(one_lock(LS_FUTEX_BITSET | LS_FUTEX_TIMED, {101, 102, 103, 104, 105, 106, 107, 108},
                                   900000000, 94, 0,
                                   {{100, 249}, {101, 63}, {102, 63}, {103, 63}, {104, 63}, {105, 62},
                                    {106, 62}, {107, 62}, {108, 62}}));
  CHECK(pass_on.cls == WaitClass::Idle);
  CHECK(reading(pass_on).rfind("idle: 8 threads wait for work, woken by 1 producer", 0) == 0);
  // a semaphore used as a lock whose one holder never waits (10% of the wake-ups):
  // still contention
  CHECK(only_row(one_lock(LS_FUTEX_BITSET, {101, 102, 103}, 300000000, 300, 0,
                          {{101, 90}, {102, 90}, {103, 90}, {100, 30}})).cls == WaitClass::Contention);
  // one thread alone on a word nobody was seen to wake: its own park word or a
  // condition, nothing proves which; its stack does: a condition variable's wait
  auto alone = only_row(one_lock(LS_FUTEX_BITSET | LS_FUTEX_TIMED, {101}, 500000000, 1, 0, {}));
  CHECK(alone.cls == WaitClass::Unclassified);
  CHECK(reading(alone).rfind("unclassified: 1 thread wait", 0) == 0);
  CHECK(reading(alone).find("no wait-site rule names this wait") != std::string::npos);
  Names cond = fake_names();
  cond.frames = [](const lockstat_key&) -> std::vector<std::string> {
    return {"__futex_abstimed_wait_common", "___pthread_cond_wait", "consumer_loop"};
  };
  CHECK(only_row(one_lock(LS_FUTEX_BITSET | LS_FUTEX_TIMED, {101}, 500000000, 1, 0, {}), cond).cls ==
        WaitClass::Condition);
  // timed waits that ran to their timeout (MariaDB's background threads, sleeps)
  auto t = only_row(one_lock(LS_FUTEX_BITSET | LS_FUTEX_TIMED, {101}, 1000000000, 10, 10, {}));
  CHECK(t.cls == WaitClass::Timed);
  CHECK(reading(t).rfind("timed wait: 100% of waits", 0) == 0);
  // InnoDB-style custom lock: plain FUTEX_WAIT, any word value: contention ...
  CHECK(only_row(one_lock(LS_FUTEX_PLAIN, {101, 102}, 100000000, 100, 0, {{101, 50}, {102, 50}})).cls ==
        WaitClass::Contention);
  // ... unless producers that never wait on it wake it (an event)
  CHECK(only_row(one_lock(LS_FUTEX_PLAIN, {101, 102}, 100000000, 100, 0, {{100, 100}})).cls == WaitClass::Idle);
  // ... but a lock's holders wake its waiters without waiting on it themselves: an
  // InnoDB latch woken 7 times by 7 threads (none a waiter) is contention
  std::vector<std::pair<uint32_t, uint64_t>> holders;
  for (uint32_t t = 200; t < 207; ++t) holders.push_back({t, 1});
  CHECK(only_row(one_lock(LS_FUTEX_PLAIN, {101, 102}, 100000000, 7, 0, holders)).cls == WaitClass::Contention);
  // ... and few wake-ups are no evidence of an event
  CHECK(only_row(one_lock(LS_FUTEX_PLAIN, {101, 102}, 100000000, 6, 0, {{100, 6}})).cls == WaitClass::Contention);
  // a condition signalled by whichever thread gets there (InnoDB's row-lock waits:
  // the committing transaction) is a condition wait, not waiting for work
  std::vector<std::pair<uint32_t, uint64_t>> committers;
  for (uint32_t t = 300; t < 340; ++t) committers.push_back({t, 1});
  CHECK(only_row(one_lock(LS_FUTEX_BITSET | LS_FUTEX_TIMED, {101, 102}, 100000000, 40, 0, committers)).cls ==
        WaitClass::Condition);

  // CPython's GIL: by symbol (_PyRuntime)
  Names gil = fake_names();
  gil.lock_symbol = [](uint32_t, uint64_t) -> std::string { return "_PyRuntime+432"; };
  auto g = only_row(one_lock(LS_FUTEX_BITSET | LS_FUTEX_TIMED, {101, 102}, 800000000, 100, 30, {{101, 50}}), gil);
  CHECK(g.cls == WaitClass::Gil);
  CHECK(reading(g).rfind("GIL: 2 threads", 0) == 0);
  Names path = fake_names();
  path.frames = [](const lockstat_key&) -> std::vector<std::string> {
    return {"__futex_abstimed_wait_common", "take_gil", "PyEval_RestoreThread"};
  };
  // a stale take_gil frame does not make an idle queue's semaphore the GIL
  CHECK(only_row(one_lock(LS_FUTEX_BITSET, {101, 102}, 800000000, 100, 0, {{100, 50}}), path).cls == WaitClass::Idle);
  CHECK(std::string(wait_class_name(WaitClass::Idle)) == "idle");
  // --uprobes: a pthread lock none of whose calls blocked is not contention
  LockRow u;
  u.layer = "user";
  u.kind = "pthread";
  u.calls = 5000;
  u.total_ns = 400000;
  CHECK(classify(u) == WaitClass::Uncontended);
  u.cls = WaitClass::Uncontended;
  CHECK(reading(u).rfind("uncontended: 5000 calls, none blocked (avg 80ns", 0) == 0);
  u.contended = 1;
  CHECK(classify(u) == WaitClass::Contention);
}

TEST_CASE("lockstat: waits on per-thread words: named by the wait-site rules, merged by site") {
  // HotSpot: 8 threads contend one synchronized block; each parks on its own
  // ParkEvent word and is woken by whoever leaves the monitor (7 other workers). By
  // the futex words alone: 8 rows "woken by 7 producers". By where they wait: one
  // Java monitor enter at the block's site, 8 threads.
  Snapshot s;
  s.window_ns = 1000000000ULL;
  for (uint32_t t = 0; t < 8; ++t) {
    auto w = wait(LS_KIND_FUTEX, 100, 101 + t, 0x7000 + 0x100 * t, 50, 500000000, 30000000, LS_FUTEX_BITSET | LS_FUTEX_TIMED, 1);
    s.waits.push_back(w);
    add_hist(s, w, 10000000, 50);
    s.comms[101 + t] = "pool-1-thread";
    for (uint32_t o = 0; o < 8; ++o)
      if (o != t) {
        lockstat_wkey k{};
        k.addr = 0x7000 + 0x100 * t;
        k.pid = 100;
        k.waker = 101 + o;
        s.wakers.push_back({k, 7});
      }
  }
  Names jvm = fake_names();
  jvm.frames = [](const lockstat_key&) -> std::vector<std::string> {
    return {"__futex_abstimed_wait_common", "___pthread_cond_wait", "PlatformEvent::park()",
            "ObjectMonitor::EnterI(JavaThread*)", "ObjectMonitor::enter(JavaThread*)", "[unknown] (perf-100.map+0x10)"};
  };
  jvm.site = [](const lockstat_key&, const std::vector<std::string>& f) -> std::string { return f[3]; };
  auto rows = build_locks(s, jvm, *parse({}));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].cls == WaitClass::Contention);
  CHECK(rows[0].waiters.size() == 8);
  CHECK(rows[0].words.size() == 8);
  CHECK(rows[0].contended == 400);
  CHECK(rows[0].total_ns == 4000000000ULL);
  CHECK(rows[0].name().find("Java monitor enter") == 0);
  CHECK(reading(rows[0]).find("[Java monitor enter") != std::string::npos);
  // the thread view counts every word of the merged row
  auto threads = build_threads(s, jvm, *parse({"-P"}));
  CHECK(threads.size() == 8);

  // the same waits where no rule knows the frames: per-thread words nobody can read
  // are unclassified, still one row at their common site, never "idle"
  Names unknown = fake_names();
  unknown.frames = [](const lockstat_key&) -> std::vector<std::string> {
    return {"__futex_abstimed_wait_common", "[unknown] (libfoo.so+0x100)", "foo_acquire", "handle_request"};
  };
  unknown.site = [](const lockstat_key&, const std::vector<std::string>& f) -> std::string { return f[2]; };
  rows = build_locks(s, unknown, *parse({}));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].cls == WaitClass::Unclassified);
  CHECK(rows[0].waiters.size() == 8);
  CHECK(reading(rows[0]).find("each on its own word") != std::string::npos);
  Report rep = build_report(s, unknown, *parse({}));
  CHECK(rep.locks.empty());  // not ranked as contention
  REQUIRE(rep.other.size() == 1);

  // PostgreSQL: each backend (a process) sleeps on its own semaphore for one LWLock in
  // shared memory: one row across the processes
  Snapshot pg;
  pg.window_ns = 1000000000ULL;
  for (uint32_t b = 0; b < 4; ++b) {
    auto w = wait(LS_KIND_FUTEX, 500 + b, 500 + b, 0x9000 + 0x80 * b, 100, 60000000, 2000000, LS_FUTEX_BITSET, 1);
    pg.waits.push_back(w);
    add_hist(pg, w, 600000, 100);
    pg.comms[500 + b] = "postgres";
  }
  Names lw = fake_names();
  lw.frames = [](const lockstat_key&) -> std::vector<std::string> {
    return {"do_futex_wait", "__new_sem_wait_slow64", "PGSemaphoreLock", "LWLockAcquire", "LockAcquireExtended"};
  };
  lw.site = [](const lockstat_key&, const std::vector<std::string>& f) -> std::string { return f[4]; };
  rows = build_locks(pg, lw, *parse({}));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].cls == WaitClass::Contention);
  CHECK(rows[0].waiters.size() == 4);
  CHECK(rows[0].pid == 0);
  CHECK(rows[0].comm == "postgres");
  CHECK(rows[0].name().find("PostgreSQL LWLock") == 0);
  CHECK(build_threads(pg, lw, *parse({"-P"})).size() == 4);

  // Go: an idle OS thread sleeps on its own note; not a held lock
  Names go = fake_names();
  go.frames = [](const lockstat_key&) -> std::vector<std::string> {
    return {"runtime.futex", "runtime.futexsleep", "runtime.notesleep", "runtime.stopm", "runtime.findRunnable"};
  };
  auto m0 = only_row(one_lock(LS_FUTEX_PLAIN, {101}, 900000000, 3, 0, {{102, 3}}), go);
  CHECK(m0.cls == WaitClass::Idle);
  CHECK(m0.wait_what.find("Go runtime") == 0);
  CHECK(m0.wait_rule.find("wait_sites.rules:") == 0);
}

TEST_CASE("lockstat: a JVM thread's wait is keyed by the Java object the JVM names") {
  // 4 workers parked for one ReentrantLock (each on its own futex word: the key is the
  // blocker object), 2 on a Semaphore, 2 in Object.wait() on a monitor
  Snapshot s;
  auto java = [&](uint32_t tid, uint64_t obj, uint64_t klass, uint32_t jk, uint64_t total) {
    auto w = wait(LS_KIND_JAVA, 100, tid, obj, 10, total, total / 5, LS_FUTEX_BITSET);
    w.key.caller = klass;
    w.key.jvm_kind = jk;
    s.waits.push_back(w);
    s.comms[tid] = "worker-" + std::to_string(tid);
  };
  for (uint32_t t = 1; t <= 4; ++t) java(t, 0xa000, 0x8000, JVM_WAIT_PARK, 300000000);
  java(5, 0xb000, 0x8100, JVM_WAIT_PARK, 200000000);
  java(6, 0xb000, 0x8100, JVM_WAIT_PARK, 200000000);
  java(7, 0x7f00c000, 0x8200, JVM_WAIT_OBJECT, 100000000);
  java(8, 0x7f00c000, 0x8200, JVM_WAIT_OBJECT, 100000000);
  s.window_ns = 1000000000;
  Names n = fake_names();
  n.java_class = [](uint32_t pid, uint64_t klass) -> std::vector<std::string> {
    REQUIRE(pid == 100);
    if (klass == 0x8000)
      return {"java.util.concurrent.locks.ReentrantLock$NonfairSync", "java.util.concurrent.locks.ReentrantLock$Sync",
              "java.util.concurrent.locks.AbstractQueuedSynchronizer"};
    if (klass == 0x8100) return {"java.util.concurrent.Semaphore$NonfairSync", "java.util.concurrent.Semaphore$Sync"};
    return {"com.example.Mailbox"};
  };
  auto rows = build_locks(s, n, *parse({}));
  REQUIRE(rows.size() == 3);
  const LockRow* lock = nullptr;
  const LockRow* sem = nullptr;
  const LockRow* mon = nullptr;
  for (const auto& r : rows) (r.addr == 0xa000 ? lock : r.addr == 0xb000 ? sem : mon) = &r;
  REQUIRE((lock && sem && mon));
  CHECK(lock->kind == "java-park");
  CHECK(lock->symbol == "java.util.concurrent.locks.ReentrantLock$NonfairSync");
  CHECK(lock->waiters.size() == 4);
  CHECK(lock->total_ns == 1200000000);
  CHECK(lock->cls == WaitClass::Contention);  // by the built-in java: rule, whatever the futex flags
  CHECK(lock->wait_what ==
        "java.util.concurrent ReentrantLock (parking to wait for a java.util.concurrent.locks.ReentrantLock$NonfairSync)");
  // no rule for a Semaphore: unclassified, named, even with several waiters on one object
  CHECK(sem->cls == WaitClass::Unclassified);
  CHECK(sem->wait_what == "Java LockSupport.park (parking to wait for a java.util.concurrent.Semaphore$NonfairSync)");
  CHECK(mon->kind == "java-wait");
  CHECK(mon->cls == WaitClass::Condition);
  CHECK(mon->wait_what == "Java Object.wait() (waiting on a com.example.Mailbox)");
  // only the lock is ranked
  Report rep = build_report(s, n, *parse({}));
  REQUIRE(rep.locks.size() == 1);
  CHECK(rep.locks[0].addr == 0xa000);
}

TEST_CASE("lockstat: a tracer's own attach/detach is never the workload's contention") {
  // issue 20: lockstat's #1 row was 3.1 s on the kernel's event_mutex in
  // perf_trace_destroy: tracers detaching (the suite's other tools in a runbook)
  Snapshot s;
  s.window_ns = 1000000000ULL;
  auto k = wait(LS_KIND_KERNEL, 300, 301, 0xffffffff83a0c0e0ULL, 40, 3100000000ULL, 200000000, LS_LCB_MUTEX, 9);
  s.waits.push_back(k);
  add_hist(s, k, 77500000, 40);
  s.comms[301] = "offcputime";
  Names n = fake_names();
  n.frames = [](const lockstat_key&) -> std::vector<std::string> {
    return {"__mutex_lock.constprop.0", "perf_trace_destroy", "_free_event", "perf_event_release_kernel"};
  };
  Report rep = build_report(s, n, *parse({}));
  CHECK(rep.locks.empty());
  REQUIRE(rep.other.size() == 1);
  CHECK(rep.other[0].cls == WaitClass::Tracer);
  CHECK(reading(rep.other[0]).rfind("tracer: 1 thread wait", 0) == 0);
  // the same mutex taken on the workload's own path stays contention
  n.frames = [](const lockstat_key&) -> std::vector<std::string> {
    return {"__mutex_lock.constprop.0", "pipe_write", "vfs_write"};
  };
  CHECK(build_report(s, n, *parse({})).locks.size() == 1);
}

TEST_CASE("lockstat: only contention is ranked; other waits are apart") {
  Snapshot s = sample();
  auto q = one_lock(LS_FUTEX_BITSET, {105, 106, 107}, 3000000000ULL, 10, 0, {{100, 30}});
  for (auto& w : q.waits) s.waits.push_back(w);
  for (auto& h : q.hist) s.hist.push_back(h);
  s.wakers = q.wakers;
  s.window_ns = 1000000000ULL;
  std::ostringstream out, err;
  render(out, err, *parse({}), s, fake_names(), bpfdiag::Window{0, 1000000000ULL, true});
  std::string t = out.str();
  auto apart = t.find("Waits that are not ranked as lock contention");
  REQUIRE(apart != std::string::npos);
  // the 9 s idle queue comes after every contended lock despite the largest total
  CHECK(t.find("cache_lock") < apart);
  CHECK(t.find("mmap_lock") < apart);
  CHECK(t.find("idle: 3 threads wait for work", apart) != std::string::npos);
  // the thread view ranks contention only
  auto threads = build_threads(s, fake_names(), *parse({"-P"}));
  for (const auto& r : threads) CHECK((r.tid < 105 || r.tid > 107));
  std::ostringstream js, jerr;
  render(js, jerr, *parse({"-j"}), s, fake_names(), bpfdiag::Window{0, 1000000000ULL, true});
  CHECK(js.str().find("\"class\":\"idle\"") != std::string::npos);
  CHECK(js.str().find("\"other_lock_count\":1") != std::string::npos);
}

TEST_CASE("lockstat: call-site wrappers, rq_lock, map sizes") {
  CHECK(is_wrapper_frame("psi_mutex_lock"));
  CHECK(is_wrapper_frame("inline_mysql_mutex_lock"));
  CHECK(is_wrapper_frame("PyThread_acquire_lock_timed"));
  CHECK(is_wrapper_frame("rw_pr_wrlock"));
  CHECK(!is_wrapper_frame("tdc_acquire_share(THD*, TABLE_LIST*, unsigned int, TABLE**)"));
  CHECK(!is_wrapper_frame("update_cache"));
  CHECK(is_rq_lock_frame("raw_spin_rq_lock_nested"));
  CHECK(!is_rq_lock_frame("try_to_wake_up"));
  CHECK(!is_rq_lock_frame("task_rq_lock"));  // takes the task's pi_lock first
  CHECK(is_kernel_lock_frame("_raw_spin_lock_irqsave"));  // walked past to the taker
  CHECK(is_kernel_lock_frame("native_queued_spin_lock_slowpath"));
  CHECK(is_rq_lock_frame("_raw_spin_rq_lock_irqsave"));
  // a spinlock taken through raw_spin_rq_lock_nested is named rq_lock
  Snapshot s;
  s.waits.push_back(wait(LS_KIND_KERNEL, 0, 0, 0xffff888627c2ba40ULL, 3, 3000, 2000, LS_LCB_SPIN, 9));
  Names n = fake_names();
  n.frames = [](const lockstat_key&) -> std::vector<std::string> {
    return {"queued_spin_lock_slowpath", "raw_spin_rq_lock_nested", "try_to_wake_up"};
  };
  n.lock_symbol = [](uint32_t, uint64_t) -> std::string { return ""; };
  auto rows = build_locks(s, n, *parse({}));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].symbol == "rq_lock");
  CHECK(rows[0].kind == "spinlock");
  // a task's pi_lock, taken by task_rq_lock before the rq lock, is not rq_lock (a
  // test run named four task_struct+0x7ec addresses rq_lock)
  n.frames = [](const lockstat_key&) -> std::vector<std::string> {
    return {"native_queued_spin_lock_slowpath", "_raw_spin_lock_irqsave", "task_rq_lock",
            "raw_spin_rq_lock_nested", "__sched_setscheduler"};
  };
  rows = build_locks(s, n, *parse({}));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].symbol == "");
  // map sizes follow the target: 2000 threads need more than the 16384 default
  CHECK(map_entries_for_threads(10) == 16384);
  CHECK(map_entries_for_threads(2000) == 16384);
  CHECK(map_entries_for_threads(4000) == 32768);
  Config c;
  c.map_entries = 32768;
  auto sizes = map_sizes(c);
  CHECK(sizes[0] == std::make_pair(std::string("STATS_ENTRIES"), uint64_t(32768)));
  CHECK(sizes[1].second == 8 * 32768);
}

TEST_CASE("lockstat: sampled kernel stacks are scaled to the lock's totals") {
  // 10 waits of one spinlock: 2 with stacks (sites A: 1 wait 1000 ns, B: 1 wait 3000 ns),
  // 8 timed without a stack (LS_STACK_UNSAMPLED, 16000 ns); never lost stacks
  Snapshot s;
  s.waits.push_back(wait(LS_KIND_KERNEL, 300, 301, 0xffff888000002000ULL, 1, 1000, 1000, LS_LCB_SPIN, 1));
  s.waits.push_back(wait(LS_KIND_KERNEL, 300, 301, 0xffff888000002000ULL, 1, 3000, 3000, LS_LCB_SPIN, 2));
  s.waits.push_back(wait(LS_KIND_KERNEL, 300, 302, 0xffff888000002000ULL, 8, 16000, 2500, LS_LCB_SPIN,
                         LS_STACK_UNSAMPLED));
  Names n = fake_names();
  n.frames = [](const lockstat_key& k) -> std::vector<std::string> {
    if (k.stack_id == LS_STACK_UNSAMPLED) FAIL("an unsampled wait was symbolized");
    return {"queued_spin_lock_slowpath", k.stack_id == 1 ? "site_a" : "site_b"};
  };
  auto rows = build_locks(s, n, *parse({}));
  REQUIRE(rows.size() == 1);
  const LockRow& r = rows[0];
  CHECK(r.contended == 10);
  CHECK(r.total_ns == 20000);
  CHECK(r.site_samples == 2);
  REQUIRE(r.sites.size() == 2);
  CHECK(r.sites[0].site == "site_b");  // 3/4 of the sampled time
  CHECK(r.sites[0].contended == 5);
  CHECK(r.sites[0].total_ns == 15000);
  CHECK(r.sites[1].contended == 5);
  CHECK(r.sites[1].total_ns == 5000);
  std::ostringstream out, err;
  render(out, err, *parse({}), s, n, bpfdiag::Window{1700000000000000000ULL, 1000000000ULL, true});
  CHECK(out.str().find("(sites scaled from the stacks of 2 of 10 waits)") != std::string::npos);
}

// --- golden files: whole reports from a fixed model (tests/golden/lockstat_*) --------

namespace {

using bpfdiag_test::check_golden;

// sample() plus an idle queue (not contention), a wait class apart and data quality.
Snapshot golden_fixture() {
  Snapshot s = sample();
  auto q = one_lock(LS_FUTEX_BITSET, {105, 106, 107}, 3000000000ULL, 10, 0, {{100, 30}});
  for (auto& w : q.waits) s.waits.push_back(w);
  for (auto& h : q.hist) s.hist.push_back(h);
  for (auto& [t, c] : q.comms) s.comms[t] = c;
  s.wakers = q.wakers;
  s.window_ns = 1000000000ULL;
  s.dq.add("lost_stacks", 2);
  s.dq.add("stale_begins", 1);
  s.dq.add("unmatched_begin", 3);
  return s;
}

std::string report(std::vector<std::string> args) {
  std::ostringstream out, err;
  render(out, err, *parse(std::move(args)), golden_fixture(), fake_names(),
         bpfdiag::Window{1700000000000000000ULL, 1000000000ULL, true});
  return out.str() + err.str();
}

}  // namespace

TEST_CASE("golden: lock view text, NDJSON and CSV") {
  check_golden("lockstat_locks.txt", report({"-H"}));
  check_golden("lockstat_locks.ndjson", report({"-j", "-H"}));
  check_golden("lockstat_locks.csv", report({"--csv", "--fields", "+layer,comm,addr,calls,avg,p90"}));
}

TEST_CASE("golden: per-thread view text and NDJSON") {
  check_golden("lockstat_threads.txt", report({"-P"}));
  check_golden("lockstat_threads.ndjson", report({"-P", "-j", "-n", "3"}));
}

TEST_CASE("lockstat: --uprobes probe cost is the calibration's median") {
  std::vector<uint64_t> h(1024, 0);
  CHECK(median_probe_cost(h) == 0);  // no calls seen
  h[30] = 10, h[41] = 25, h[42] = 4, h[900] = 5;  // 44 calls: the 22nd is in bucket 41
  CHECK(median_probe_cost(h) == 415);
  h.assign(1024, 0);
  h[0] = 1;
  CHECK(median_probe_cost(h) == 5);
}
