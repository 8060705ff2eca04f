// threadpool's tracer: owns the BPF maps of one session and turns them into
// per-thread times, thread groups and reports, over a pool of one or more processes.
// Internal to the tool.
#pragma once
#include <bcc/BPFTable.h>
#include <linux/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/bpf_maps.h"
#include "common/bpf_session.h"
#include "common/report.h"
#include "common/symbolize.h"
#include "common/target.h"
#include "tools/threadpool/threadpool.h"

extern "C" {
#include "threadpool_shared.h"
}

namespace threadpool {

// --- pool.cpp: which processes form the pool --------------------------------------

constexpr size_t kMaxPoolProcesses = TP_MAX_PROCS;

// The pool's processes: the PIDs given (with --children, their descendants running at
// the start) and the processes they fork while traced (the BPF side adds those, when the
// pool has several processes or --children was given). Keeps the BPF `pool` map (tgid ->
// TP_POOL_* flags): fill() before attaching, rescan() after and then periodically (gone
// processes leave the map). The leader is the pool's main process: the only one; with
// --children the parent; else a PID given that is another pool process's parent (an
// nginx master); 0 if none. Whether it works or only supervises is judged by behaviour
// (infer_work_waits), never by name.
class Pool {
 public:
  Pool(const Config& c, bpfdiag::BpfSession& bpf);
  bpfdiag::Status fill();
  void rescan();
  const std::vector<uint32_t>& pids() const { return pids_; }  // running, the given first
  uint32_t leader() const { return leader_; }

 private:
  uint32_t flags(uint32_t pid) const;
  const Config& c_;
  ebpf::BPFHashTable<uint32_t, uint32_t> map_;
  std::vector<uint32_t> pids_;
  uint32_t leader_ = 0;
};

// --- runtime.cpp: who is in which pool, and runtime locks ---------------------------

// Initial state of a thread from /proc (the tracepoints only see transitions).
tp_thread initial_state(uint32_t pid, uint32_t tid, uint64_t now);

// Group ids for the BPF side's waker classes (TP_W_PEER needs the same id). Threads
// are grouped by name; within a group, a thread that mostly waits in epoll/poll/
// select/accept (a listener handing work to the pool) and the pool's main thread
// (`main`: the leader's, role TP_GID_MAIN) get ids of their own, so that the work they
// hand over reads as coming from outside the pool. Ids are stable for a group name.
class GroupIds {
 public:
  uint32_t id_of(bool main, const std::string& group, const ThreadTimes* t, int current_nr);

 private:
  std::map<std::string, uint32_t> ids_;
};

// Futex words inside a runtime's global lock, named: CPython's GIL lives in
// _PyRuntime (3.11: _PyRuntime.ceval.gil, a mutex and condition variables).
class RuntimeLocks {
 public:
  // Looks up the futex words not seen before (in the process of the thread that waited
  // on each, `pid_of`); returns the named ones.
  const std::map<uint64_t, std::string>& update(const std::map<uint32_t, ThreadTimes>& snap,
                                                const std::function<uint32_t(uint32_t)>& pid_of);

 private:
  bpfdiag::Symbolizer sym_;
  std::set<std::pair<uint32_t, uint64_t>> checked_;
  std::map<uint64_t, std::string> named_;
};

// --- members.cpp: which threads are tracked, in which group ------------------------

struct Member {
  uint32_t pid = 0;  // its process
  std::string comm, group;
  std::string base;  // the group by name (or --threads) before any split into pools
  bool gone = false;  // exited (or its TID now belongs to a new thread): retired after the next report
  uint32_t gid = 0;
  uint32_t born = 0;  // tp_thread.born of its BPF entry: tells a reused TID's new thread apart
};

// The pool's threads from /proc/PID/task of each pool process (names matched against --threads, or grouped
// by name). Keeps the BPF side in step: a thread first seen in /proc gets its initial
// state in `threads`, every member its group id in `gids`. Exited members are retired
// (forgotten, their BPF entries deleted) by the tracer after the report that covers
// their last interval, so a long run under thread churn keeps bounded maps.
class Members {
 public:
  Members(const Config& c, const Pool& pool, bpfdiag::BpfSession& bpf);
  void rescan(uint64_t now);
  // Roles settle as waits are seen: refreshes the group ids from the latest times.
  void update_roles(const std::map<uint32_t, ThreadTimes>& snap);
  // Threads moved from their name group into a pool of their own (tid -> group name);
  // replaces the previous split (a thread not in `to` goes back to its name group).
  void split(const std::map<uint32_t, std::string>& to);
  const std::map<uint32_t, Member>& all() const { return members_; }
  const Member* find(uint32_t tid) const;
  std::vector<uint32_t> gone() const;
  // Forgets member `tid` and deletes its `threads` entry (unless a new thread with the
  // same TID has replaced it since) and its `gids` entry.
  void retire(uint32_t tid);
  uint64_t untracked() const { return untracked_; }          // threads map full
  uint64_t assumed_start() const { return assumed_start_; }  // state read from /proc

 private:
  void add(uint32_t pid, uint32_t tid, const std::string& comm, const std::string& base, uint64_t now);
  const Config& c_;
  const Pool& pool_;
  ebpf::BPFHashTable<uint32_t, tp_thread> threads_;
  ebpf::BPFHashTable<uint32_t, uint32_t> gids_;
  std::shared_ptr<const regex_t> re_;
  std::map<uint32_t, Member> members_;
  std::map<uint32_t, std::string> split_;
  GroupIds group_ids_;
  std::set<uint32_t> untracked_tids_;
  uint64_t untracked_ = 0, assumed_start_ = 0;
};

// --- snapshot.cpp: BPF maps -> cumulative per-thread times -----------------------------

class Snapshots {
 public:
  explicit Snapshots(bpfdiag::BpfSession& bpf);
  // Every member's cumulative times at `now`, the state in progress included.
  std::map<uint32_t, ThreadTimes> take(const std::map<uint32_t, Member>& members, uint64_t now,
                                       bool with_hist = true);
  bool state(uint32_t tid, tp_thread& t) { return threads_.get_value(tid, t).ok(); }
  // After retiring: deletes the `threads` entries of threads that are neither members
  // nor alive (threads that came and went between two rescans, added at fork), then
  // every `waits` entry not of a remaining thread entry (same TID and `born`) and every
  // `rqhist` entry not of a remaining TID or of a TID in `reused`. Returns the number
  // of `threads` entries left; `alive`: the pool processes' threads.
  size_t sweep(const std::vector<uint32_t>& pids, const std::map<uint32_t, Member>& members,
               const std::set<uint32_t>& reused, size_t* alive);

 private:
  ebpf::BPFHashTable<uint32_t, tp_thread> threads_;
  ebpf::BPFHashTable<tp_wait_key, tp_wait_val> waits_;
  ebpf::BPFHashTable<tp_hist_key, uint64_t> hist_;
};

// --- sites.cpp: wait sites (the waiter's unwound user stack, once per wait) ---------
class WaitSites {
 public:
  // `enabled`: the program was built with the unwinder (UW_DWARF: the `sites` map).
  WaitSites(bpfdiag::BpfSession& bpf, bool enabled);
  ~WaitSites();
  void set_tgid_of(std::function<uint32_t(uint32_t)> f) { tgid_of_ = std::move(f); }
  // Reads and classifies the wait keys unwound since the last call.
  void update();
  const SiteMap& sites() const { return read_; }

 private:
  bpfdiag::BpfSession& bpf_;
  bool enabled_;
  std::function<uint32_t(uint32_t)> tgid_of_ = [](uint32_t) { return 0u; };
  std::unique_ptr<bpfdiag::Symbolizer> sym_;
  SiteMap read_;
  // every key taken from the map (the BPF side unwinds a key once: a stack lost there
  // or not symbolized is not read again)
  std::set<std::pair<uint32_t, WaitKey>> tried_;
};

// --- requests.cpp: request timing and data quality -----------------------------------

// Folds response events into per-reader aggregates as they arrive: the state is bounded
// by the readers (threads) and, for the queue-depth maximum, by the connections accepted
// in the window, not by the requests. The depth average is an incremental integral.
class RequestFold {
 public:
  // The window's start: events answered at or before it are not counted.
  void start(uint64_t t0);
  void add(const tp_req_event& e);
  // Requests completed in (t0, t1] (t0 as given to start(); events are answered by
  // t1, the report's time, taken after the last drain), and the queue depth over it
  // from the events and the `conns` map's entries; starts the next window at t1.
  std::map<std::string, RequestStats> take(uint64_t t1, const std::function<std::string(uint32_t)>& group_of,
                                           const std::vector<std::pair<tp_conn_key, tp_conn>>& conns);
  size_t state_size() const { return readers_.size() + seen_.size() + steps_.size(); }

 private:
  struct Reader {
    RequestStats stats;
  };
  void span(uint64_t a, uint64_t r);
  uint64_t t0_ = 0;
  std::map<uint32_t, Reader> readers_;
  std::set<std::pair<uint32_t, uint64_t>> seen_;  // (fd, accept_ts) of the events with an accept
  std::map<uint64_t, int64_t> steps_;             // depth changes, clipped to the window
  long double integral_ = 0;                      // area under the depth curve so far
  std::string taker_;
  bool any_accept_ = false;
};

class Requests {
 public:
  explicit Requests(bpfdiag::BpfSession& bpf);
  void start(uint64_t t0) { fold_.start(t0); }
  void on_event(const tp_req_event& e) { fold_.add(e); }
  void on_lost(uint64_t n) { lost_ += n; }
  uint64_t lost() const { return lost_; }
  // Requests completed in (t0, t1] and queue depth over it, per group (`group_of`:
  // a reader's group, "" if unknown); t0 must be the previous call's t1 (or start()'s).
  std::map<std::string, RequestStats> collect(uint64_t t0, uint64_t t1,
                                              const std::function<std::string(uint32_t)>& group_of);
  // Requests accepted or being served but not answered yet.
  uint64_t in_flight();
  // Connections the pool's processes accepted before tracing began (keep-alive
  // clients, a database's pooled connections): tracked from their next read, each
  // read -> response turn one request (no queue wait: its accept was not seen).
  // Entries the probes made meanwhile are kept. Returns how many were added.
  size_t seed(const std::vector<uint32_t>& pids);

 private:
  ebpf::BPFHashTable<tp_conn_key, tp_conn> conns_;
  RequestFold fold_;
  uint64_t lost_ = 0;
};

// Data quality of the interval just ended and of the whole run.
struct Quality {
  bpfdiag::DataQuality interval, total;
};

// --- tracer.cpp ----------------------------------------------------------------------

struct GroupAcc {  // per group, across the whole run (for the summary)
  RequestStats req;
  long double depth_integral = 0;
  uint64_t depth_ns = 0;
  uint64_t busy_max = 0;
  uint64_t interval_busy_max = 0;
  RetiredTimes retired;  // the group's exited threads, for the summary
};

// Ties the pieces together: every ~10 ms tick() rescans and samples busy workers;
// report() turns two snapshots into one GroupReport per thread group and renders it.
class Tracer {
 public:
  Tracer(const Config& c, bpfdiag::BpfSession& s, Pool& pool, MapSizes sizes, bool sites = false);
  bpfdiag::Status init();  // reads /proc/PID/task, fills the maps; error if no pool
  nlohmann::json start_fields() const;  // with the cgroup, when one is traced
  nlohmann::json start_fields_base() const;
  Requests& requests() { return requests_; }
  void tick();
  bool target_gone();
  bpfdiag::Status report(bool final);
  // One warning on stderr when anything was lost during the run, naming the option.
  void warn_loss(std::ostream& err);
  uint64_t suggested_map_entries();

 private:
  void sample();
  void follow_boundary();
  void refresh_inference(const std::map<uint32_t, ThreadTimes>* snap = nullptr);
  void accumulate(const std::map<std::string, RequestStats>& req, uint64_t t0, uint64_t t1);
  std::vector<GroupReport> build(const std::map<uint32_t, ThreadTimes>& cur,
                                 const std::map<uint32_t, ThreadTimes>& prev, uint64_t t0,
                                 uint64_t t1, bool summary, const bpfdiag::DataQuality& dq);
  bpfdiag::Result<Quality> quality(bool final);
  // Retires the members that are gone, folding their cumulative `times` (this report's
  // snapshot, else the last one) into their group's RetiredTimes. Returns the TIDs a
  // new thread took meanwhile (their rqhist entries are not the new thread's).
  std::set<uint32_t> retire(const std::map<uint32_t, ThreadTimes>& times);
  uint32_t pid_of(uint32_t tid) const;
  // The pool's main thread for inference: the leader's, if it is a member of `group`.
  uint32_t main_of(const std::string& group, bool by_base) const;

  const Config& c_;
  bpfdiag::BpfSession& s_;
  MapSizes sizes_;
  Pool& pool_;
  Members members_;
  Snapshots snapshots_;
  Requests requests_;
  size_t seeded_ = 0;  // connections accepted before tracing, tracked from their next request
  std::string comm_;
  std::map<std::string, WorkWaits> work_;
  std::map<std::string, GroupAcc> acc_;
  std::map<uint32_t, ThreadTimes> prev_;
  std::map<uint32_t, ThreadTimes> base_;  // the times at the summary's start (a report boundary)
  std::map<std::string, RequestStats> interval_req_;
  bpfdiag::CounterDeltas deltas_;
  RuntimeLocks runtime_locks_;
  WaitSites sites_;
  bool exited_ = false;
  bpfdiag::TargetWatch watch_{c_.pids};  // PID + start time: a reused PID is not the target
  uint64_t untracked_reported_ = 0;
  uint64_t retired_ = 0;       // threads retired so far
  size_t bpf_entries_ = 0;     // `threads` entries after the last sweep
  size_t alive_ = 0;           // the process's threads at the last sweep
  uint64_t start_ = 0, last_ = 0, last_rescan_ = 0, last_sample_ = 0;
  uint64_t boundaries_ = 0;  // bpfdiag::report_boundaries() at the summary's start
  bpfdiag::ToolMetrics metrics_{"threadpool"};  // --prometheus/--listen
};

}  // namespace threadpool
