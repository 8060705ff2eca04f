// threadpool's metrics (--prometheus / --listen, common/metrics.h): per thread group
// ("pool", the JSON's group) its threads' time by state (oncpu_total_ns,
// runnable_total_ns, idle_total_ns, blocked_total_ns by reason), the requests
// answered, and the last interval's utilization, busy average and thread count.
#include "common/metrics.h"

#include "tools/threadpool/threadpool.h"

namespace threadpool {
using namespace bpfdiag;

void add_report_metrics(MetricSet& m, const std::vector<GroupReport>& groups) {
  auto& secs = m.counter("bpfdiag_pool_thread_seconds_total",
                         "Time the group's threads spent in each state: oncpu, runnable, idle (waiting for "
                         "work), blocked_<reason> (oncpu_total_ns, runnable_total_ns, idle_total_ns, "
                         "blocked_total_ns).",
                         {"pool", "state"});
  auto& requests =
      m.counter("bpfdiag_pool_requests_total", "Requests answered by the group (request_count).", {"pool"});
  auto& util = m.gauge("bpfdiag_pool_utilization_ratio",
                       "Share of the group's thread time that was busy over the last report (utilization).", {"pool"});
  auto& busy =
      m.gauge("bpfdiag_pool_busy_threads", "Busy threads on average over the last report (busy_avg).", {"pool"});
  auto& threads = m.gauge("bpfdiag_pool_threads", "Threads in the group at the last report (thread_count).", {"pool"});
  util.clear();  // groups of this report only
  busy.clear();
  threads.clear();
  for (const auto& g : groups) {
    secs.add({g.name, "oncpu"}, double(g.on_ns) / 1e9);
    secs.add({g.name, "runnable"}, double(g.rq_ns) / 1e9);
    secs.add({g.name, "idle"}, double(g.idle_ns) / 1e9);
    for (int r = 0; r < kNumReasons; ++r)
      secs.add({g.name, std::string("blocked_") + reason_name(r)}, double(g.blocked_ns[r]) / 1e9);
    requests.add({g.name}, double(g.req.requests));
    util.set({g.name}, g.utilization);
    busy.set({g.name}, g.busy_avg);
    threads.set({g.name}, double(g.threads));
  }
}

}  // namespace threadpool
