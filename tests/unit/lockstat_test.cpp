#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "hist.h"
#include "tools/lockstat/lockstat.h"

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
    return {"__lll_lock_wait", "update_cache", "worker"};
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
  CHECK(c->sort == "total");
  CHECK(c->entries == 10);
  CHECK(c->top == 3);
  CHECK(!c->uprobes);
  // -p PIDs must exist (checked at parse time): this process and its parent
  const uint32_t me = static_cast<uint32_t>(getpid()), parent = static_cast<uint32_t>(getppid());
  auto d = parse({"-p", std::to_string(me) + "," + std::to_string(parent), "--tid", "56", "-L", "0x7f00,cache_lock", "-m", "2ms", "-k", "max",
                  "-E", "0", "-s", "5", "-t", "-H", "--csv", "1", "3"});
  REQUIRE(d);
  CHECK(d->pids == std::vector<uint32_t>{me, parent});
  CHECK(d->tids == std::vector<uint32_t>{56});
  CHECK(d->lock_addrs == std::vector<uint64_t>{0x7f00});
  CHECK(d->lock_names == std::vector<std::string>{"cache_lock"});
  CHECK(d->min_wait_ns == 2000000);
  CHECK(d->threads_view);
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
  CHECK(parse({"-k", "bogus"}).error().find("unknown sort key 'bogus'") == 0);
  CHECK(parse({"-F", "kind,nope"}).error().find("unknown field 'nope'") == 0);
  CHECK(parse({"-t", "-k", "top_lock"}));        // thread view has its own columns
  CHECK(!parse({"-t", "-k", "waiters"}));
  CHECK(!parse({"-p", "0"}));
  CHECK(!parse({"-p", "12x"}));
  // a PID that does not exist is bad input (exit 2), named in one line
  auto gone = parse({"-p", "1," + std::to_string(4000000)});
  REQUIRE(!gone);
  CHECK(gone.error().find("no process with PID 4000000") != std::string::npos);
  CHECK(gone.error().find('\n') == std::string::npos);
  CHECK(!parse({"-E", "-1"}));
  CHECK(!parse({"1", "2", "3"}));
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
  CHECK(user_lock_kind(LS_KIND_FUTEX, LS_FUTEX_BITSET) == "futex");
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
  CHECK(reading(rows[0]).rfind("long hold: 1 waiter", 0) == 0);
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

  auto byc = parse({"-k", "contended"});
  CHECK(build_locks(sample(), fake_names(), *byc)[0].symbol == "cache_lock");
  auto named = parse({"-L", "cache_lock"});
  auto only = build_locks(sample(), fake_names(), *named);
  REQUIRE(only.size() == 1);
  CHECK(only[0].symbol == "cache_lock");
}

TEST_CASE("lockstat: per-thread view") {
  auto c = parse({"-t"});
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
  render(txt, txt_err, *parse({}), s, fake_names(), 1000000000ULL, true);
  std::string t = txt.str();
  CHECK(t.find("KIND           PID    CONT   TOTAL     MAX     P50     P99 WTR LOCK\n") == 0);
  CHECK(t.find("rwsem:W        200       2  10.0ms  6.00ms") != std::string::npos);
  CHECK(t.find("futex-mutex    100      40  8.00ms   400us") != std::string::npos);
  CHECK(t.find("cache_lock\n    convoy: 4 threads") != std::string::npos);
  CHECK(t.find("    site         40  8.00ms  update_cache <- worker\n") != std::string::npos);
  CHECK(t.find("data quality: lost events 0, lost stacks 3") != std::string::npos);
  CHECK(txt_err.str().empty());

  std::ostringstream csv, csv_err;
  render(csv, csv_err, *parse({"--csv", "-F", "kind,lock,contended,total"}), s, fake_names(), 0, true);
  CHECK(csv.str() == "kind,lock,contended,total\nrwsem:W,mmap_lock,2,10000000\nfutex-mutex,cache_lock,40,8000000\n");
  // the data-quality line goes to the error stream, one line, keeping the CSV pure
  CHECK(csv_err.str().rfind("data quality: lost events 0, lost stacks 3", 0) == 0);
  const std::string ce = csv_err.str();
  CHECK(std::count(ce.begin(), ce.end(), '\n') == 1);
  std::ostringstream tcsv, tcsv_err;
  render(tcsv, tcsv_err, *parse({"-t", "--csv", "-F", "tid,total"}), s, fake_names(), 0, true);
  CHECK(tcsv.str().rfind("tid,total\n", 0) == 0);
  CHECK(tcsv.str().find("data quality") == std::string::npos);
  CHECK(tcsv_err.str().rfind("data quality: lost events 0, lost stacks 3", 0) == 0);

  std::ostringstream js, js_err;
  render(js, js_err, *parse({"-j", "-H"}), s, fake_names(), 5, true);
  std::istringstream in(js.str());
  std::string line;
  std::vector<nlohmann::json> recs;
  while (std::getline(in, line)) recs.push_back(nlohmann::json::parse(line));
  REQUIRE(recs.size() == 3);
  auto& u = recs[1];
  CHECK(u["type"] == "lock");
  CHECK(u["kind"] == "futex-mutex");
  CHECK(u["pid"] == 100);
  CHECK(u["addr"] == 0x5000);
  CHECK(u["symbol"] == "cache_lock");
  CHECK(u["contended"] == 40);
  CHECK(u["total_wait_ns"] == 8000000);
  CHECK(u["max_wait_ns"] == 400000);
  CHECK(u["avg_wait_ns"] == 200000);
  CHECK(u["p99_ns"].get<uint64_t>() >= u["p50_ns"].get<uint64_t>());
  CHECK(u["threads"].size() == 4);
  CHECK(u["callsites"][0]["stack"][1] == "update_cache");
  CHECK(u["hist"]["buckets"][0]["count"] == 40);
  CHECK(u["data_quality"]["lost_stacks"] == 3);
  CHECK(recs[2]["type"] == "summary");
  CHECK(recs[2]["total_wait_ns"] == 18000000);
  CHECK(js_err.str().empty());
}

TEST_CASE("lockstat: BPF text and mode flags") {
  CHECK(bpf_text().find("TRACEPOINT_PROBE(lock, contention_begin)") != std::string::npos);
  CHECK(bpf_text().find("TRACEPOINT_PROBE(syscalls, sys_enter_futex)") != std::string::npos);
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  auto f = *bpf_cflags(*parse({}), false);
  CHECK(has(f, "-DUSER_FUTEX"));
  CHECK(has(f, "-DKERNEL_LOCKS"));
  CHECK(has(f, "-DTGID_OK(x)=(1)"));  // no -p/--tid: everything passes
  CHECK(has(f, "-DTID_OK(x)=(1)"));
  CHECK(!has(f, "-DFILTER_ADDRS"));
  auto k = *bpf_cflags(*parse({"-K", "-p", "1", "--tid", "7,8"}), false);
  CHECK(!has(k, "-DUSER_FUTEX"));
  CHECK(has(k, "-DTGID_OK(x)=((x)==1)"));
  CHECK(has(k, "-DTID_OK(x)=((x)==7||(x)==8)"));
  auto u = *bpf_cflags(*parse({"--uprobes", "-U", "-L", "0x10", "-m", "5"}), false);
  CHECK(has(u, "-DUSER_PTHREAD"));
  CHECK(!has(u, "-DKERNEL_LOCKS"));
  CHECK(has(u, "-DFILTER_ADDRS"));
  CHECK(has(u, "-DADDR_FILTER_ENTRIES=1"));
  // the address filter map is sized from the list: no silently shorter filter
  std::string many;
  for (int i = 1; i <= 1500; ++i) many += (many.empty() ? "0x" : ",0x") + std::to_string(i);
  CHECK(has(*bpf_cflags(*parse({"-L", many}), false), "-DADDR_FILTER_ENTRIES=1500"));
  CHECK(has(u, "-DMIN_WAIT_NS=5000ULL"));
  // a symbolic name is matched after symbolization, so no in-kernel address filter
  CHECK(!has(*bpf_cflags(*parse({"-L", "mmap_lock"}), false), "-DFILTER_ADDRS"));
}
