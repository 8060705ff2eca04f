// lockstat's model: what each wait is (contention, GIL, condition, idle, timed) and
// the per-lock and per-thread rows built from the raw BPF aggregates.
#include <algorithm>
#include <set>
#include <tuple>

#include "tools/lockstat/internal.h"
#include "common/unwind_maps.h"
#include "common/jvm_state.h"
#include "common/wait_sites.h"

namespace lockstat {
using namespace bpfdiag;

// --- thresholds ----------------------------------------------------------------------
// Wake-up shares decide what a user wait is (classify). Where a commit recorded the
// case that set a value it is named; the others came in with the first tool (290fea1)
// or the squashed landing 1558a17 with no measurement behind them: chosen, not measured.
//
// Too few wake-ups to judge who wakes a lock (c08b4b4 / c33721e: InnoDB latches were
// woken 7 times by 7 threads; 3 is the least "again and again" means). Chosen.
constexpr uint64_t kMinWakes = 3;
// A plain FUTEX_WAIT word (no glibc lock word) is idle only with at least this many
// wake-ups from its few wakers (c08b4b4: InnoDB latches, 7 wakes by 7 threads, must
// stay contention, as test_mariadb's performance_schema mapping requires). Chosen above 7.
constexpr uint64_t kMinWakesPlainIdle = 10;
// Each producer woke the word at least this many times on average: "few wakers"
// (c08b4b4: 7 wakes by 7 non-waiting threads is a lock's holders, not producers).
constexpr uint64_t kWakesPerProducer = 3;
// Timed: at least 1/kTimedOutShareDen of the waits ran to their timeout (half). Chosen.
constexpr uint64_t kTimedOutShareDen = 2;
// Contention between peers: fellow waiters made at least 1/kPeerShareDen of the
// wake-ups (half). Chosen, not measured.
constexpr uint64_t kPeerShareDen = 2;
// Woken by others: fellow waiters made under 1/kFewPeerShareDen of the wake-ups (a
// fifth). Chosen, not measured.
constexpr uint64_t kFewPeerShareDen = 5;
// A queue (FUTEX_WAIT_BITSET): at least 1/kQueueOutsideShareDen of the wake-ups from
// threads that do not wait on it (c33721e: CPython's SimpleQueue, 494 of 742 wake-ups
// by fellow waiters, 1 producer, i.e. a third from outside, must be idle; a fifth
// leaves room below that).
constexpr uint64_t kQueueOutsideShareDen = 5;
// reading(): "light" contention when no waiter lost 10% of its time and, all waiters
// together, under 0.1 thread waited on average (16 MariaDB threads each losing 6% on
// LOCK_table_cache are a convoy, 1.03 threads always waiting, not light); a convoy from
// 3 waiting threads; a long hold from a 1 ms median wait. Chosen, not measured
// (290fea1, 1558a17).
constexpr double kLightMaxShare = 0.10;
constexpr size_t kConvoyThreads = 3;
constexpr uint64_t kLongHoldP50Ns = kMs;
// Map sizes for -P: 8 entries per thread, at least 16384, at most 4M (powers of two).
// Chosen, not measured (1558a17).
constexpr uint64_t kMapEntriesPerThread = 8;
constexpr uint64_t kMapEntriesMin = 16384;
constexpr uint64_t kMapEntriesMax = 1u << 22;
constexpr uint64_t kUprobeRowsPerThread = 2048;

bool site_placed(const std::string& site) {
  const size_t n = std::char_traits<char>::length(kUnplacedSite);
  return site.size() < n || site.compare(site.size() - n, n, kUnplacedSite) != 0;
}

std::string LockRow::name() const { return symbol.empty() ? hex_addr(addr) : symbol; }

// --- classification -----------------------------------------------------------------

std::string kernel_lock_kind(uint32_t flags) {
  uint32_t f = flags & 0xffff;
  bool rd = f & LS_LCB_READ, wr = f & LS_LCB_WRITE;
  std::string rw = rd && wr ? "" : rd ? ":R" : wr ? ":W" : "";
  if (f & LS_LCB_MUTEX) return "mutex";
  if (f & LS_LCB_PERCPU) return "pcpu-sem" + rw;
  if (f & LS_LCB_RT) return (rd || wr) ? "rwlock-rt" + rw : "rt-mutex";
  if (f & LS_LCB_SPIN) return (rd || wr) ? "rwlock" + rw : "spinlock";
  if (rd || wr) return "rwsem" + rw;
  return "semaphore";  // down(): contention_begin(sem, 0)
}

uint64_t map_entries_for_threads(uint64_t threads) {
  uint64_t want = std::min<uint64_t>(threads * kMapEntriesPerThread, kMapEntriesMax), n = kMapEntriesMin;
  while (n < want) n <<= 1;
  return n;
}

uint64_t uprobe_map_entries_for_threads(uint64_t threads) {
  uint64_t want = std::min<uint64_t>(threads * kUprobeRowsPerThread, kMapEntriesMax), n = kMapEntriesMin;
  while (n < want) n <<= 1;
  return n;
}

const char* wait_class_name(WaitClass c) {
  switch (c) {
    case WaitClass::Contention: return "contention";
    case WaitClass::Gil: return "gil";
    case WaitClass::Idle: return "idle";
    case WaitClass::Condition: return "condition";
    case WaitClass::Timed: return "timed";
    case WaitClass::Uncontended: return "uncontended";
    case WaitClass::Unclassified: return "unclassified";
    case WaitClass::Tracer: return "tracer";
  }
  return "?";
}

std::string java_kind(uint32_t jvm_kind) {
  switch (jvm_kind) {
    case JVM_WAIT_MONITOR: return "java-monitor";
    case JVM_WAIT_OBJECT: return "java-wait";
    default: return "java-park";
  }
}

std::string user_lock_kind(uint32_t kind, uint32_t flags) {
  if (kind == LS_KIND_PTHREAD) return "pthread";
  if (kind == LS_KIND_DECLARED) return "declared";
  if (kind == LS_KIND_GO) return "go-park";
  if (flags & LS_FUTEX_PI) return "futex-pi";
  if (flags & LS_FUTEX_LOCKWORD) return "futex-mutex";
  if (flags & (LS_FUTEX_BITSET | LS_FUTEX_WAIT2 | LS_FUTEX_WAITV)) return "futex-sync";
  return "futex";
}

bool is_wrapper_frame(const std::string& f) {
  // instrumentation and portability shims around the real lock call: the wait-site
  // rules' `wrapper` entries (common/wait_sites.rules, extensible without rebuilding)
  return bpfdiag::WaitRules::suite().is_wrapper(f);
}

bool is_rq_lock_frame(const std::string& f) {
  // functions that take a run queue's lock themselves (task_rq_lock is not one: it
  // takes the task's pi_lock first, then the rq lock through raw_spin_rq_lock)
  static const char* kPrefixes[] = {"raw_spin_rq_lock", "_raw_spin_rq_lock", "double_rq_lock",
                                    "double_lock_balance", "_double_lock_balance",
                                    "__task_rq_lock", "raw_spin_rq_trylock"};
  for (const char* p : kPrefixes)
    if (f.rfind(p, 0) == 0) return true;
  return false;
}

namespace {

std::string pct_str(double share) {
  if (share > 0 && share < 0.005) return "<1%";
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", share * 100);
  return b;
}

}  // namespace

namespace {

WaitClass class_of_rule(WaitKind k) {
  switch (k) {
    case WaitKind::Lock: return WaitClass::Contention;
    case WaitKind::Gil: return WaitClass::Gil;
    case WaitKind::Idle: return WaitClass::Idle;
    case WaitKind::Condition: return WaitClass::Condition;
    case WaitKind::Sleep: return WaitClass::Timed;
    case WaitKind::Tracer: return WaitClass::Tracer;
    case WaitKind::Io:
    case WaitKind::Cpu:
    case WaitKind::Unclassified: break;
  }
  return WaitClass::Unclassified;
}

}  // namespace

WaitClass classify(const LockRow& r) {
  // a tracer attaching or detaching (the suite's tools, perf, bpftrace): not the workload's
  if (r.wait_decided && r.wait_kind == WaitKind::Tracer) return WaitClass::Tracer;
  if (r.layer == "kernel") return WaitClass::Contention;
  // a goroutine's wait as the Go runtime states it (its waitReason): a go: rule decides, or nothing
  if (r.kind == "go-park") return r.wait_decided ? class_of_rule(r.wait_kind) : WaitClass::Unclassified;
  // a Java thread's wait as the JVM states it: its object's class decides, or nothing
  if (r.jvm_kind) return r.wait_decided ? class_of_rule(r.wait_kind) : WaitClass::Unclassified;
  // --uprobes measures every call: a lock none of whose calls blocked is not contended
  // (its time is the calls' own, and what is left of the probes' after the correction)
  if (r.kind == "pthread") return r.contended ? WaitClass::Contention : WaitClass::Uncontended;
  // the runtime's own words first: a wait-site rule that decided
  if (r.wait_decided) return class_of_rule(r.wait_kind);
  // runtime knowledge on top: CPython's GIL lives in _PyRuntime (3.11); both its
  // mutex and its condition variable are the GIL. (A take_gil frame is no proof:
  // CPython's stack keeps stale take_gil return addresses that the futex-mode stack
  // scan can pick up for an idle queue's semaphore.)
  if (r.symbol.rfind("_PyRuntime", 0) == 0) return WaitClass::Gil;
  uint64_t waits = std::max<uint64_t>(r.contended, 1);
  // timed waits nobody ended early: sleeps, polls, background timers
  if (r.timedout * kTimedOutShareDen >= waits && r.timedout) return WaitClass::Timed;
  bool peers = r.wakes >= kMinWakes && r.peer_wakes * kPeerShareDen >= r.wakes;      // woken by fellow waiters
  bool by_others = r.wakes >= kMinWakes && r.peer_wakes * kFewPeerShareDen < r.wakes;   // woken by others
  // ... and by few of them, again and again (3 wake-ups or more each): a queue's
  // producers. A lock's holders also wake its waiters without waiting on it
  // themselves, but they are whichever threads took it (InnoDB's latches: 7 wakes
  // by 7 threads); a condition that many threads signal (a row lock released by
  // whichever transaction commits) is a condition, not waiting for work.
  bool few_wakers = r.producers && r.producers * kWakesPerProducer <= r.wakes - r.peer_wakes;
  // glibc's mutexes wait with FUTEX_WAIT on a word that is 2 when it has waiters
  // (__lll_lock_wait); PI mutexes lock in the kernel: that is contention, whoever wakes
  if (r.futex_flags & (LS_FUTEX_LOCKWORD | LS_FUTEX_PI | LS_FUTEX_REQUEUE)) return WaitClass::Contention;
  // Who wakes a word says what it is only when several threads wait on it: a word
  // one thread waits on alone is that thread's own park/event word (HotSpot's
  // ParkEvent, PostgreSQL's PGPROC semaphore, Go's per-M note, Rust's parking_lot),
  // woken by whoever releases the real lock or posts the real work, which is elsewhere.
  // A mechanism rule (a condition variable's via) still says how it waits.
  if (r.waiters.size() == 1) return class_of_rule(r.wait_kind);
  bool sync = r.futex_flags & (LS_FUTEX_BITSET | LS_FUTEX_WAIT2 | LS_FUTEX_WAITV);
  if (!sync) {
    // plain FUTEX_WAIT without glibc's lock word: custom locks (InnoDB's srw_mutex,
    // ssux_lock) -- unless a few threads that never wait on it wake it, many times
    return by_others && few_wakers && r.wakes >= kMinWakesPlainIdle ? WaitClass::Idle : WaitClass::Contention;
  }
  // FUTEX_WAIT_BITSET: glibc's condvars, semaphores, rwlocks and barriers. A queue
  // is signalled by its few producers, and its getters pass wake-ups on (CPython's
  // SimpleQueue posts its semaphore again after taking an item: a woken getter that
  // finds it empty waits again), so fellow waiters may end most of the waits: a
  // fifth of the wake-ups from few threads that never wait on it is a queue. A
  // semaphore or rwlock used as a lock is released by the threads that also wait
  // for it (peers).
  const bool queue = r.wakes >= kMinWakes && (r.wakes - r.peer_wakes) * kQueueOutsideShareDen >= r.wakes && few_wakers;
  if (queue) return WaitClass::Idle;
  return peers ? WaitClass::Contention : WaitClass::Condition;
}

bool is_kernel_lock_frame(const std::string& frame) {
  static const char* kPrefixes[] = {"_raw_",      "__raw_",      "do_raw_",      "queued_",
                                    "native_queued", "__pv_queued", "pv_queued",  "mutex_lock",
                                    "__mutex_lock", "mutex_spin",  "down_",       "__down",
                                    "rwsem_",     "__rwsem",     "rt_mutex",     "__rt_mutex",
                                    "rt_spin",    "rt_read",     "rt_write",     "percpu_down",
                                    "__percpu_down", "osq_lock",
                                    "rwbase_", "raw_spin_rq_", "_raw_spin_rq_"};
  for (const char* p : kPrefixes)
    if (frame.rfind(p, 0) == 0) return true;
  return false;
}

namespace {

// Contention: how much of their time the waiters lose, and what the waits say about
// holds (a waiter's wait is the holds queued ahead of it).
std::string contention_reading(const LockRow& r, const std::string& thr, const std::string& share) {
  std::string p50 = fmt_ns(r.p50_ns), mx = fmt_ns(r.max_ns);
  size_t n = r.waiters.size();
  bool long_holds = r.p50_ns >= kLongHoldP50Ns;
  if (r.max_share > 0 && r.max_share < kLightMaxShare && r.mean_waiting < kLightMaxShare)
    return "light: " + thr + " waiting" + share + " (p50 " + p50 + ")";
  if (n >= kConvoyThreads && long_holds)
    return "convoy behind long holds: " + thr + " queue" + share + " (p50 " + p50 + ", max " + mx +
           "); the holder keeps it long";
  if (n >= kConvoyThreads)
    return "convoy: " + thr + " queue" + share + " (p50 " + p50 + "); shorten or split the critical section";
  if (long_holds)
    return "long hold: " + thr + " wait" + share + " (p50 " + p50 + ", max " + mx + "); the holder keeps it long";
  return "contended: " + thr + " wait in short waits" + share + " (p50 " + p50 + "); the lock is taken very often";
}

// The waits that are not lock contention, each saying what it is.
std::string other_reading(const LockRow& r, const std::string& thr, const std::string& share) {
  std::string p50 = fmt_ns(r.p50_ns);
  uint64_t waits = std::max<uint64_t>(r.contended, 1);
  switch (r.cls) {
    case WaitClass::Gil:
      return "GIL: " + thr + " wait for the interpreter lock" + share + " (p50 " + p50 +
             "); CPU-bound Python threads take turns, not lock contention";
    case WaitClass::Timed:
      if (r.wait_decided) return "timed wait: " + thr + " sleep (p50 " + p50 + "); not lock contention";
      return "timed wait: " + pct_str(double(r.timedout) / waits) + " of waits ran to their timeout (p50 " + p50 +
             "): sleeps or polls, not lock contention";
    case WaitClass::Idle:
      if (r.wait_decided) return "idle: " + thr + " wait for work (p50 " + p50 + "); not lock contention";
      return "idle: " + thr + " wait for work, woken by " + std::to_string(r.producers) +
             (r.producers == 1 ? " producer" : " producers") + " (p50 " + p50 + "); not lock contention";
    case WaitClass::Condition:
      return "condition wait: " + thr + " wait for a signal (p50 " + p50 + "); not lock contention";
    case WaitClass::Unclassified:
      return "unclassified: " + thr + " wait" + share + " (p50 " + p50 + ")" +
             (r.words.size() > 1 ? ", each on its own word" : "") +
             (r.wait_what.empty() ? "; no wait-site rule names this wait"
              : r.wait_decided    ? std::string()  // a rule decided: its words follow in brackets
                                  : "; in " + r.wait_what + ", for a reason its stack does not show") +
             " (see 'Wait sites' in lockstat(8))";
    case WaitClass::Tracer:
      return "tracer: " + thr + " wait (p50 " + p50 + ") while a tracer attaches or detaches; the tracing " +
             "tools' own cost, not the workload's";
    case WaitClass::Contention:
    case WaitClass::Uncontended: break;
  }
  return "";
}

}  // namespace

std::string reading(const LockRow& r) {
  if (r.cls == WaitClass::Uncontended)
    return "uncontended: " + std::to_string(r.calls) + " calls, none blocked (avg " + fmt_ns(r.avg_ns()) +
           " per call, probe cost taken off); not lock contention";
  if (!r.contended) return "";
  size_t n = r.waiters.size();
  const std::string who = r.kind == "go-park" ? "goroutine" : "thread";  // Go: the waiters are goroutines
  std::string thr = std::to_string(n) + " " + who + (n == 1 ? "" : "s");
  std::string share = r.max_share > 0 ? ", up to " + pct_str(r.max_share) + " of a " + who + "'s time" : "";
  std::string text = r.cls == WaitClass::Contention ? contention_reading(r, thr, share) : other_reading(r, thr, share);
  // the software's own words, from the wait-site rule that decided
  if (r.wait_decided && !r.wait_what.empty()) text += " [" + r.wait_what + "]";
  return text;
}

// --- aggregation --------------------------------------------------------------------

namespace {

// One lock of the report. Kernel waits at one address are two locks when some spin
// and some sleep (struct semaphore and its own spinlock share the address).
struct GroupKey {
  bool kernel;
  uint32_t pid;
  uint64_t addr;
  bool spin;
  bool java = false;  // addr is a Java object (LS_KIND_JAVA), not a futex word
  bool go = false;    // addr is gopark's lock argument | waitReason << LS_GO_REASON_SHIFT (LS_KIND_GO)
  bool operator<(const GroupKey& o) const {
    return std::tie(kernel, pid, addr, spin, java, go) < std::tie(o.kernel, o.pid, o.addr, o.spin, o.java, o.go);
  }
};

// A declared wait is the software's own name for it, the same in every process (pid 0).
GroupKey group_of(uint32_t kind, uint32_t pid, uint64_t addr, bool spin) {
  bool k = kind == LS_KIND_KERNEL;
  return {k, k || kind == LS_KIND_DECLARED ? 0 : pid, addr, k && spin, kind == LS_KIND_JAVA, kind == LS_KIND_GO};
}
GroupKey group_of(const lockstat_key& k) {
  return group_of(k.kind, k.pid, k.addr, ls_kernel_spins(k.flags));
}
GroupKey group_of(const lockstat_hkey& k) { return group_of(k.kind, k.pid, k.addr, k.spin); }

bool name_filter_pass(const Config& c, uint64_t addr, const std::string& symbol) {
  if (c.lock_addrs.empty() && c.lock_names.empty()) return true;
  if (std::find(c.lock_addrs.begin(), c.lock_addrs.end(), addr) != c.lock_addrs.end()) return true;
  return !symbol.empty() &&
         std::find(c.lock_names.begin(), c.lock_names.end(), symbol) != c.lock_names.end();
}

std::string comm_of(const Snapshot& s, uint32_t tid) {
  auto it = s.comms.find(tid);
  return it == s.comms.end() ? "?" : it->second;
}

template <typename T>
void pct(T& row) {
  row.p50_ns = row.hist.percentile(50);
  row.p90_ns = row.hist.percentile(90);
  row.p99_ns = row.hist.percentile(99);
}

}  // namespace

namespace {

// What the raw aggregates say per lock, before the lock is named and judged.
struct Groups {
  std::map<GroupKey, LockRow> rows;
  std::map<GroupKey, uint32_t> flags;
  std::map<GroupKey, std::set<uint32_t>> pids;
  std::map<GroupKey, std::map<uint32_t, WaiterRow>> waiters;
  std::map<GroupKey, std::map<std::string, SiteRow>> sites;
  std::map<GroupKey, std::pair<uint64_t, uint64_t>> sampled;  // waits, ns with a stack
};

// One wait record's stack into its lock's sites (always: frames name rq_lock and the
// GIL even when -s 0 hides sites).
void add_site(Groups& gs, const GroupKey& g, const RawWait& w, const Names& n) {
  gs.sampled[g].first += w.val.blocked;
  gs.sampled[g].second += w.val.total_ns;
  std::vector<std::string> frames = n.frames ? n.frames(w.key) : std::vector<std::string>{};
  std::string site = n.site ? n.site(w.key, frames) : "";
  if (site.empty()) site = "[unknown]";
  auto& sr = gs.sites[g][site];
  if (sr.stack.empty()) sr.stack = frames;
  sr.site = site;
  sr.contended += w.val.blocked;
  sr.total_ns += w.val.total_ns;
}

Groups group_waits(const Snapshot& s, const Names& n) {
  Groups gs;
  for (const auto& w : s.waits) {
    GroupKey g = group_of(w.key);
    LockRow& r = gs.rows[g];
    r.addr = w.key.addr;
    r.pid = g.pid;
    r.layer = g.kernel ? "kernel" : "user";
    gs.flags[g] |= w.key.flags;
    if (g.kernel) r.kind = "";
    else r.kind = user_lock_kind(w.key.kind, gs.flags[g]);
    if (g.java) {
      r.kind = java_kind(w.key.jvm_kind);
      r.jvm_kind = w.key.jvm_kind;
      r.java_klass = w.key.caller;
    }
    gs.pids[g].insert(w.key.pid);
    r.contended += w.val.blocked;
    r.calls += w.val.count;
    r.total_ns += w.val.total_ns;
    r.max_ns = std::max<uint64_t>(r.max_ns, w.val.max_ns);
    r.timedout += w.val.timedout;
    if (!g.kernel) r.futex_flags |= w.key.flags;
    auto& wr = gs.waiters[g][w.key.tid];
    wr.tid = w.key.tid;
    wr.contended += w.val.blocked;
    wr.total_ns += w.val.total_ns;
    wr.max_ns = std::max<uint64_t>(wr.max_ns, w.val.max_ns);
    if (w.key.stack_id != LS_STACK_UNSAMPLED) add_site(gs, g, w, n);  // kernel: unsampled
  }
  for (const auto& [hk, cnt] : s.hist) {
    auto it = gs.rows.find(group_of(hk));
    if (it != gs.rows.end()) it->second.hist.add_bucket(hk.bucket, cnt);
  }
  return gs;
}

// Who woke the waiters (futex mode): fellow waiters or producers.
void count_wakes(LockRow& r, const std::map<uint32_t, uint64_t>& wakes,
                 const std::map<uint32_t, WaiterRow>& waiters) {
  for (const auto& [tid, cnt] : wakes) {
    r.wakes += cnt;
    if (tid) ++r.wakers;
    if (tid && waiters.count(tid)) r.peer_wakes += cnt;
    else if (tid) ++r.producers;
  }
}

// A Java thread's wait in jstack's words: what for, and the object's class ("parking
// to wait for a java.util.concurrent.locks.ReentrantLock$NonfairSync"); the class
// decides through the java: rules (a park), or the JVM's state does (a monitor).
void name_java(LockRow& r, const Names& n) {
  std::vector<std::string> chain = n.java_class ? n.java_class(r.pid, r.java_klass) : std::vector<std::string>{};
  bpfdiag::DeclaredName d = bpfdiag::java_wait_name(r.jvm_kind, chain);
  r.symbol = chain.empty() ? "" : chain.front();
  r.wait_kind = d.kind;
  r.wait_what = d.what;
  r.wait_rule = d.origin;
  r.wait_decided = d.kind != WaitKind::Unclassified;
}

void name_lock(LockRow& r, const GroupKey& g, uint32_t f, const std::set<uint32_t>& pids, const Names& n) {
  if (g.java) {
    name_java(r, n);
    return;
  }
  if (r.kind == "declared") {  // in the software's words, from the rule that declared it
    if (pids.size() == 1) r.pid = *pids.begin();
    const bpfdiag::DeclaredName* d = n.declared ? n.declared(r.addr) : nullptr;
    if (!d) return;
    r.symbol = r.wait_what = d->what;
    r.wait_rule = d->origin;
    r.wait_kind = d->kind;
    r.wait_decided = true;
    return;
  }
  if (!g.kernel) {
    if (n.lock_symbol) r.symbol = n.lock_symbol(r.pid, r.addr);
    return;
  }
  r.kind = kernel_lock_kind(f);
  r.spin = g.spin;
  if (f & LS_KID_MMAP_LOCK) {
    uint32_t off = f >> LS_KID_OFFSET_SHIFT;
    r.symbol = off ? "mmap_lock+" + std::to_string(off) : "mmap_lock";
  } else if (f & LS_KID_SIGLOCK) {
    r.symbol = "siglock";
  } else if (n.lock_symbol) {
    r.symbol = n.lock_symbol(0, r.addr);
  }
  if (pids.size() == 1) r.pid = *pids.begin();
}

// Kernel stacks are sampled: the sites' shares scaled to the lock's totals. Sites
// known only as a wrapper go last: the ranking is of the code that wanted the lock.
void add_sites(LockRow& r, std::map<std::string, SiteRow>& sites, std::pair<uint64_t, uint64_t> sampled) {
  auto [sn, sns] = sampled;
  r.site_samples = sn;
  for (auto& [name, sr] : sites) {
    if (sn < r.contended && sn) sr.contended = (sr.contended * r.contended + sn / 2) / sn;
    if (sns < r.total_ns && sns) sr.total_ns = uint64_t(double(sr.total_ns) * r.total_ns / sns);
    r.sites.push_back(sr);
  }
  std::stable_sort(r.sites.begin(), r.sites.end(), [](const SiteRow& a, const SiteRow& b) {
    bool pa = site_placed(a.site), pb = site_placed(b.site);
    return pa != pb ? pa : a.total_ns > b.total_ns;
  });
}

// Per-CPU run-queue locks have no symbol of their own: perf calls them rq_lock. The
// frame that took the lock decides: the first past the lock implementation's own
// (_raw_spin_lock*, queued_spin_lock_slowpath). A frame further out proves nothing
// (try_to_wake_up takes the task's pi_lock under task_rq_lock).
void name_rq_lock(LockRow& r) {
  for (const auto& st : r.sites)
    for (const auto& fr : st.stack) {
      if (is_rq_lock_frame(fr)) r.symbol = "rq_lock";
      if (!r.symbol.empty() || !is_kernel_lock_frame(fr)) break;
    }
}

// The wait-site verdict of a user row (common/wait_sites): the rule that covers the
// most of its sites' wait time.
void judge_sites(LockRow& r) {
  if (r.kind == "pthread" || r.kind == "declared" || r.kind == "go-park" || r.jvm_kind) return;  // measured calls; the software's own words
  const bpfdiag::WaitRules& rules = bpfdiag::WaitRules::suite();
  std::map<const bpfdiag::WaitRule*, std::pair<uint64_t, bpfdiag::WaitVerdict>> by;
  for (const auto& st : r.sites) {
    bpfdiag::WaitVerdict v = rules.classify(st.stack);
    if (!v.rule) continue;
    auto& [ns, verdict] = by[v.rule];
    ns += st.total_ns + 1;  // +1: a site of zero-length waits still counts
    verdict = v;
  }
  const std::pair<uint64_t, bpfdiag::WaitVerdict>* best = nullptr;
  for (const auto& [rule, acc] : by)
    if (!best || acc.first > best->first) best = &acc;
  if (!best) return;
  const bpfdiag::WaitVerdict& v = best->second;
  // a kernel lock is a lock: only a tracer's attach/detach says more about its waits
  if (r.layer == "kernel" && v.kind != WaitKind::Tracer) return;
  r.wait_kind = v.kind;
  r.wait_what = v.what;
  r.wait_rule = v.rule->origin;
  r.wait_decided = v.decided;
  r.own_word = v.own_word;
}

// A goroutine's wait in the Go runtime's words: its waitReason (the lock, named by the
// reason: gopark's lock argument is a channel, a semaphore root, a timer...), judged by
// the go: rules over the stacks of its sites, the one that covers the most wait time.
void name_go(LockRow& r, uint64_t raw_addr, const Names& n) {
  uint32_t v = uint32_t(raw_addr >> LS_GO_REASON_SHIFT);
  std::string reason = n.go_reason ? n.go_reason(r.pid, v) : "reason " + std::to_string(v);
  r.symbol = reason;
  r.addr = raw_addr & ((1ULL << LS_GO_REASON_SHIFT) - 1);
  const bpfdiag::WaitRules& rules = bpfdiag::WaitRules::suite();
  std::map<const bpfdiag::WaitRule*, std::pair<uint64_t, bpfdiag::WaitVerdict>> by;
  for (const auto& st : r.sites) {
    bpfdiag::WaitVerdict vd = rules.classify_go(reason, st.stack);
    auto& [ns, verdict] = by[vd.rule];
    ns += st.total_ns + 1;
    verdict = vd;
  }
  if (r.sites.empty()) by[nullptr].second = rules.classify_go(reason, {});
  const std::pair<uint64_t, bpfdiag::WaitVerdict>* best = nullptr;
  for (const auto& [rule, acc] : by)
    if (!best || acc.first > best->first) best = &acc;
  const bpfdiag::WaitVerdict& vd = best->second;
  r.wait_decided = vd.decided;
  r.wait_kind = vd.kind;
  r.wait_what = vd.decided ? vd.what : "Go " + reason;
  r.wait_rule = vd.rule ? vd.rule->origin : "";
}

// The waiters' common name ("" when they differ): a row of several processes.
std::string common_comm(const std::vector<WaiterRow>& waiters) {
  std::set<std::string> comms;
  for (const auto& w : waiters) comms.insert(w.comm);
  return comms.size() == 1 ? *comms.begin() : "";
}

// b's waits into a: waiters and sites by name, the histogram, words.
void absorb(LockRow& a, const LockRow& b) {
  a.contended += b.contended, a.calls += b.calls, a.total_ns += b.total_ns;
  a.max_ns = std::max(a.max_ns, b.max_ns);
  a.timedout += b.timedout, a.wakes += b.wakes, a.peer_wakes += b.peer_wakes;
  a.wakers += b.wakers, a.producers += b.producers, a.futex_flags |= b.futex_flags;
  a.site_samples += b.site_samples;
  a.hist.merge(b.hist);
  for (const auto& w : b.waiters) {
    auto it = std::find_if(a.waiters.begin(), a.waiters.end(), [&](const WaiterRow& x) { return x.tid == w.tid; });
    if (it == a.waiters.end()) {
      a.waiters.push_back(w);
      continue;
    }
    it->contended += w.contended, it->total_ns += w.total_ns, it->max_ns = std::max(it->max_ns, w.max_ns);
  }
  for (const auto& st : b.sites) {
    auto it = std::find_if(a.sites.begin(), a.sites.end(), [&](const SiteRow& x) { return x.site == st.site; });
    if (it == a.sites.end()) {
      a.sites.push_back(st);
      continue;
    }
    it->contended += st.contended, it->total_ns += st.total_ns;
  }
  a.words.insert(a.words.end(), b.words.begin(), b.words.end());
}

// Rows on words that belong to their waiting thread (a rule's /own, or a word one
// thread waits on alone with nothing to decide what it is) are one wait when they
// wait at the same site for the same reason: merged by class, the rule's words and
// the top call site, and by process unless a rule says the word is the waiter's own
// (PostgreSQL's backends are processes that meet at one LWLock in shared memory). A
// per-thread word is not a lock; the site is where the waiters meet.
void merge_own_words(std::vector<LockRow>& rows, uint64_t window_ns) {
  std::map<std::tuple<uint32_t, int, std::string, std::string>, size_t> at;
  std::vector<LockRow> out;
  for (auto& r : rows) {
    bool own = r.layer == "user" && r.kind != "pthread" &&
               (r.own_word || (r.cls == WaitClass::Unclassified && r.waiters.size() == 1));
    if (!own) {
      out.push_back(std::move(r));
      continue;
    }
    auto key = std::make_tuple(r.own_word ? 0u : r.pid, int(r.cls), r.wait_what,
                               r.sites.empty() ? std::string() : r.sites.front().site);
    auto it = at.find(key);
    if (it == at.end()) {
      at[key] = out.size();
      out.push_back(std::move(r));
      continue;
    }
    absorb(out[it->second], r);
  }
  for (auto& [key, i] : at) {
    LockRow& r = out[i];
    if (r.words.size() < 2) continue;
    auto by_total = [](const auto& a, const auto& b) { return a.total_ns > b.total_ns; };
    std::stable_sort(r.waiters.begin(), r.waiters.end(), by_total);
    std::stable_sort(r.sites.begin(), r.sites.end(), by_total);
    r.hist.set_exact_sum(r.total_ns);
    r.hist.set_exact_max(r.max_ns);
    pct(r);
    r.max_share = 0;
    if (window_ns) {
      for (const auto& w : r.waiters)
        if (w.tid) r.max_share = std::max(r.max_share, std::min(1.0, double(w.total_ns) / window_ns));
      r.mean_waiting = double(r.total_ns) / window_ns;
    }
    if (!r.wait_what.empty()) r.symbol = r.wait_what;
    std::set<uint32_t> pids;
    for (auto [pid, w] : r.words) pids.insert(pid);
    if (pids.size() > 1) {  // several processes, as a kernel lock's row: pid 0, their common name
      r.pid = 0;
      r.comm = common_comm(r.waiters);
    }
  }
  rows = std::move(out);
}

}  // namespace

std::vector<LockRow> build_locks(const Snapshot& s, const Names& n, const Config& c) {
  Groups gs = group_waits(s, n);
  std::map<GroupKey, std::map<uint32_t, uint64_t>> wakes;
  for (const auto& [wk, cnt] : s.wakers) {  // a Java object's waits are not keyed by a word a waker could share
    wakes[group_of(LS_KIND_FUTEX, wk.pid, wk.addr, false)][wk.waker] += cnt;
    wakes[group_of(LS_KIND_JAVA, wk.pid, wk.addr, false)][wk.waker] += cnt;
  }
  std::vector<LockRow> out;
  for (auto& [g, r] : gs.rows) {
    const uint32_t f = gs.flags[g];
    count_wakes(r, wakes[g], gs.waiters[g]);
    name_lock(r, g, f, gs.pids[g], n);
    if (!name_filter_pass(c, r.addr, r.symbol)) continue;
    r.hist.set_exact_sum(r.total_ns);
    r.hist.set_exact_max(r.max_ns);
    pct(r);
    for (auto& [tid, wr] : gs.waiters[g]) {
      wr.comm = comm_of(s, tid);
      r.waiters.push_back(wr);
    }
    auto by_total = [](const auto& a, const auto& b) { return a.total_ns > b.total_ns; };
    std::stable_sort(r.waiters.begin(), r.waiters.end(), by_total);
    add_sites(r, gs.sites[g], gs.sampled[g]);
    if (g.kernel && r.symbol.empty() && (f & LS_LCB_SPIN)) name_rq_lock(r);
    if (s.window_ns) {
      for (const auto& w : r.waiters)
        if (w.tid) r.max_share = std::max(r.max_share, std::min(1.0, double(w.total_ns) / s.window_ns));
      r.mean_waiting = double(r.total_ns) / s.window_ns;
    }
    if (!g.kernel) r.words = {{g.pid, r.addr}};
    judge_sites(r);
    if (g.go) name_go(r, g.addr, n);
    r.cls = classify(r);
    r.comm = r.pid ? comm_of(s, r.pid) : common_comm(r.waiters);
    if (r.comm == "?" && !r.waiters.empty()) r.comm = r.waiters.front().comm;
    out.push_back(std::move(r));
  }
  merge_own_words(out, s.window_ns);
  if (!c.stacks)
    for (auto& r : out) r.sites.clear();
  auto t = lock_table(c.uprobes);
  if (!configure(t, c)) t.sort(out);
  return out;
}

namespace {

// Threads waiting on the contended locks of `locks` (on any lock, with -L).
std::vector<ThreadRow> threads_of(const Snapshot& s, const std::vector<LockRow>& locks, const Config& c) {
  std::map<GroupKey, std::string> lock_names;
  bool filtered = !c.lock_addrs.empty() || !c.lock_names.empty();
  for (auto& l : locks) {
    // threads are ranked by lock contention; condition, idle, timed and GIL waits
    // count only when the user asked for that lock by name (-L)
    if (l.cls != WaitClass::Contention && !filtered) continue;
    bool kernel = l.layer == "kernel";
    if (kernel || l.words.empty()) {
      lock_names[GroupKey{kernel, kernel ? 0 : l.pid, l.addr, kernel && l.spin}] = l.name();
      continue;
    }
    for (auto [pid, w] : l.words)  // merged own words; a goroutine wait's words are its group's addr
      lock_names[GroupKey{false, pid, w, false, l.jvm_kind != 0, l.kind == "go-park"}] = l.name();
  }
  std::map<uint32_t, ThreadRow> rows;
  std::map<uint32_t, std::map<std::string, uint64_t>> per_lock;
  for (const auto& w : s.waits) {
    GroupKey g = group_of(w.key);
    auto ln = lock_names.find(g);
    if (ln == lock_names.end()) continue;
    auto& r = rows[w.key.tid];
    r.pid = w.key.pid;
    r.tid = w.key.tid;
    r.contended += w.val.blocked;
    r.calls += w.val.count;
    r.total_ns += w.val.total_ns;
    r.max_ns = std::max<uint64_t>(r.max_ns, w.val.max_ns);
    per_lock[w.key.tid][ln->second] += w.val.total_ns;
  }
  for (const auto& [hk, cnt] : s.hist) {
    auto it = rows.find(hk.tid);
    if (it != rows.end() && lock_names.count(group_of(hk)))
      it->second.hist.add_bucket(hk.bucket, cnt);
  }
  std::vector<ThreadRow> out;
  for (auto& [tid, r] : rows) {
    r.comm = comm_of(s, tid);
    r.locks = per_lock[tid].size();
    uint64_t best = 0;
    for (auto& [name, tot] : per_lock[tid])
      if (tot >= best) best = tot, r.top_lock = name;
    r.hist.set_exact_sum(r.total_ns);
    r.hist.set_exact_max(r.max_ns);
    pct(r);
    out.push_back(std::move(r));
  }
  auto t = thread_table(c.uprobes);
  if (!configure(t, c)) t.sort(out);
  return out;
}

// The lock rows the thread view is built from: every lock, unsorted, no sites.
Config lock_config_for_threads(const Config& c) {
  Config lc = c;
  lc.per_thread = false;
  lc.sort = "wait_total_ns";
  lc.fields.clear();
  lc.entries = 0;
  lc.stacks = 0;
  return lc;
}

}  // namespace

std::vector<ThreadRow> build_threads(const Snapshot& s, const Names& n, const Config& c) {
  return threads_of(s, build_locks(s, n, lock_config_for_threads(c)), c);
}

Report build_report(const Snapshot& s, const Names& n, const Config& c) {
  Report rep;
  auto all = build_locks(s, n, c.per_thread ? lock_config_for_threads(c) : c);
  if (c.per_thread) rep.threads = threads_of(s, all, c);
  // lock contention is ranked; condition, idle, timed and GIL waits are apart
  for (auto& r : all) (r.cls == WaitClass::Contention ? rep.locks : rep.other).push_back(std::move(r));
  return rep;
}

DataQuality empty_dq() {
  std::vector<std::string> keys = {"below_min", "stack_scans_failed", "stale_begins", "nest_overflow", "overflow_stacks",
                                   "go_rate_guard", "go_waits_dropped"};
  for (auto& u : unwind_dq_keys()) keys.push_back(u);  // --unwind=dwarf (zero with fp)
  return DataQuality::with_keys(keys);
}

}  // namespace lockstat
