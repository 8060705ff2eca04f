// Continuous mode's metrics: Prometheus text exposition (format 0.0.4) of a tool's
// cumulative counters, gauges and histograms, and the two places it goes:
//   --prometheus FILE   node_exporter's textfile collector: FILE is replaced atomically
//                       at every report (a temp file in FILE's directory, created
//                       O_EXCL|O_NOFOLLOW, then renamed over FILE);
//   --listen ADDR:PORT  an HTTP/1.0 endpoint (GET /metrics) served from the tool's run
//                       loop (poll, no thread): the latest report's snapshot.
//
//   MetricSet m;                                      // one tool's families
//   auto& f = m.counter("bpfdiag_sleep_seconds_total", "Time slept, by command.", {"comm"});
//   f.add({"sleepers"}, 0.25);                        // cumulative: reports add their deltas
//   std::string text = m.render();                    // HELP/TYPE lines, escaped labels
//
// Bounded: a family keeps at most kMaxSeries label sets. A new label set past that
// takes the place of the smallest series that no report has touched since the last
// publish (its value moves into the family's `other` series: every label "other", so
// sums over a family stay monotonic), or, when every series is in use, is added to
// `other` directly. Either way it is counted (folded()). A label set that comes back
// after being folded starts again from 0 (a counter reset to rate()).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/report.h"
#include "common/result.h"

namespace bpfdiag {

constexpr size_t kMaxSeries = 100;  // label sets per family, `other` not counted

enum class MetricType { Counter, Gauge, Histogram };

// Exposition text helpers (exposed for tests).
std::string metric_label_value(const std::string& raw);  // escaped \ " \n, valid UTF-8
std::string metric_help_text(const std::string& raw);    // escaped \ and \n
std::string metric_number(double v);                     // 3, 0.25, +Inf, NaN
bool valid_metric_name(const std::string& name);
bool valid_label_name(const std::string& name);

class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, MetricType type, std::vector<std::string> labels,
               std::vector<double> bounds = {}, size_t max_series = kMaxSeries);
  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }
  // Counter: adds `v` (>= 0) to the series of `labels` (one value per label name).
  void add(const std::vector<std::string>& labels, double v);
  // Gauge: sets the series.
  void set(const std::vector<std::string>& labels, double v);
  // Histogram: `n` observations of `v`.
  void observe(const std::vector<std::string>& labels, double v, uint64_t n = 1);
  // Gauges of one report: drop every series (the next report sets what is current).
  void clear() { series_.clear(); }
  size_t series() const { return series_.size(); }
  uint64_t folded() const { return folded_; }
  // A report was published: series touched from now on are "in use".
  void next_generation() { ++generation_; }
  void render(std::string& out) const;
  // The value of a counter/gauge series (tests); NaN when absent.
  double value(const std::vector<std::string>& labels) const;

 private:
  struct Series {
    double value = 0;
    std::vector<uint64_t> buckets;  // histogram: per bound (not cumulative), then +Inf
    double sum = 0;
    uint64_t count = 0;
    uint64_t touched = 0;  // generation
  };
  Series* find(const std::vector<std::string>& labels);
  void merge_into(Series& to, const Series& from) const;
  std::string labels_text(const std::vector<std::string>& values, const char* extra_name = nullptr,
                          const std::string& extra_value = {}) const;

  std::string name_, help_;
  MetricType type_;
  std::vector<std::string> labels_;
  std::vector<double> bounds_;
  size_t max_series_;
  std::map<std::vector<std::string>, Series> series_;
  uint64_t folded_ = 0, generation_ = 1;
};

class MetricSet {
 public:
  // The family `name`, created on first use (families render in creation order).
  MetricFamily& counter(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  MetricFamily& gauge(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  MetricFamily& histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                          std::vector<double> bounds);
  const MetricFamily* find(const std::string& name) const;
  std::string render() const;
  void next_generation();
  const std::vector<std::unique_ptr<MetricFamily>>& families() const { return families_; }

 private:
  MetricFamily& get(const std::string& name, const std::string& help, MetricType type, std::vector<std::string> labels,
                    std::vector<double> bounds);
  std::vector<std::unique_ptr<MetricFamily>> families_;
};

// --- the sinks ---------------------------------------------------------------------

struct ListenAddress {
  std::string host;  // numeric, as given ("127.0.0.1", "::1")
  uint16_t port = 0;
  bool ipv6 = false;
  bool loopback = false;
};
// "PORT", ":PORT", "localhost:PORT" (all 127.0.0.1), "ADDR:PORT", "[ADDR6]:PORT":
// numeric addresses only (no name lookups); port 1-65535. A usage error otherwise.
Result<ListenAddress> parse_listen_address(const std::string& text);

// --prometheus FILE checked before tracing: a usage error when FILE is a symbolic link,
// exists and is not a regular file owned by root or this user, or its directory is
// missing, not writable, or writable by another user without being a sticky directory
// owned by root or this user (in a world-writable sticky directory such as /tmp the
// file is created O_EXCL under a fresh name and renamed: nobody else can replace it).
Status check_prometheus_file(const std::string& path);

// The sinks of a run, opened before tracing (tool_main): the file's directory is held
// open, the socket is bound and listening. publish() writes the file and keeps the
// text for the endpoint; serve() answers HTTP clients for at most timeout_ms.
class MetricsOutput {
 public:
  static Result<std::unique_ptr<MetricsOutput>> open(const std::string& prometheus_file, const std::string& listen);
  ~MetricsOutput();
  MetricsOutput(const MetricsOutput&) = delete;
  MetricsOutput& operator=(const MetricsOutput&) = delete;

  void publish(const std::string& text);
  // Waits up to timeout_ms for the socket and the clients (0: only what is ready now).
  void serve(int timeout_ms);
  bool listening() const { return listen_fd_ >= 0; }
  uint16_t port() const { return port_; }
  // Problems seen while running (a write that failed): the last one, or none.
  const Status& failure() const { return failure_; }
  uint64_t scrapes() const { return scrapes_; }

 private:
  MetricsOutput() = default;
  struct Conn {
    int fd = -1;
    std::string in, out;
    size_t sent = 0;
    uint64_t deadline_ns = 0;
  };
  Status write_file(const std::string& text);
  void accept_new();
  void handle_read(Conn& c);
  void respond(Conn& c);
  void close_conn(size_t i);

  std::string file_, file_base_;
  int dir_fd_ = -1;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::vector<Conn> conns_;
  std::string body_;
  Status failure_;
  std::string last_warning_;
  uint64_t scrapes_ = 0;
};

// The process's sinks (set by tool_main for a tool with --prometheus/--listen), or null.
MetricsOutput* metrics_output();
void set_metrics_output(std::unique_ptr<MetricsOutput> out);

// --- a tool's metrics over a run ----------------------------------------------------

// The series every tool exports, and the publishing: bpfdiag_up, bpfdiag_build_info,
// bpfdiag_start_time_seconds, bpfdiag_last_report_timestamp_seconds,
// bpfdiag_reports_total, bpfdiag_data_quality_events_total{kind} (the JSON
// data_quality keys, summed over reports), bpfdiag_unmatched_begins (in progress at
// the last report), bpfdiag_metric_series_folded_total{metric}; all with tool="NAME".
class ToolMetrics {
 public:
  explicit ToolMetrics(std::string tool);
  // Whether the run has a sink (otherwise nothing needs building).
  bool enabled() const { return metrics_output() != nullptr; }
  MetricSet& set() { return set_; }
  const std::string& tool() const { return tool_; }
  // One report's data quality (per-report deltas; unmatched_begin is a level).
  void add_data_quality(const DataQuality& dq);
  // The snapshot after the probes are attached (every counter at 0; `zero`: the
  // tool's data_quality keys).
  void publish_start(const DataQuality& zero = DataQuality{});
  // After a report: counts it, renders and hands the text to the sinks; the final one
  // says bpfdiag_up 0 (the file outlives the run).
  void publish(bool final);

 private:
  std::string tool_;
  MetricSet set_;
};

}  // namespace bpfdiag
