#include "common/metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "common/cli.h"
#include "common/parse.h"
#include "common/runloop.h"

namespace bpfdiag {

// --- exposition text ---------------------------------------------------------------

namespace {

// Length of the valid UTF-8 sequence at s[i] (0: invalid).
size_t utf8_len(const std::string& s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  if (n == 2 && c < 0xc2) return 0;  // overlong
  if (n == 3) {
    const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0)) return 0;  // overlong, surrogate
  }
  if (n == 4) {
    const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if ((c == 0xf0 && c1 < 0x90) || c > 0xf4 || (c == 0xf4 && c1 >= 0x90)) return 0;
  }
  return n;
}

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::Counter:
      return "counter";
    case MetricType::Gauge:
      return "gauge";
    case MetricType::Histogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

std::string metric_label_value(const std::string& raw) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size();) {
    const size_t n = utf8_len(raw, i);
    if (n == 0) {  // not UTF-8 (a comm is any bytes): U+FFFD
      out += "\xef\xbf\xbd";
      ++i;
      continue;
    }
    const char c = raw[i];
    if (n == 1) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) out += '?';
      else out += c;
    } else {
      out.append(raw, i, n);
    }
    i += n;
  }
  return out;
}

std::string metric_help_text(const std::string& raw) {
  std::string out;
  for (char c : raw) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string metric_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char b[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(b, sizeof b, "%.0f", v);
    return b;
  }
  std::snprintf(b, sizeof b, "%.15g", v);
  if (std::strtod(b, nullptr) != v) std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

bool valid_metric_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool valid_label_name(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0 || name == "le") return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// --- families ----------------------------------------------------------------------

MetricFamily::MetricFamily(std::string name, std::string help, MetricType type, std::vector<std::string> labels,
                           std::vector<double> bounds, size_t max_series)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      labels_(std::move(labels)),
      bounds_(std::move(bounds)),
      max_series_(std::max<size_t>(max_series, 1)) {
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
}

void MetricFamily::merge_into(Series& to, const Series& from) const {
  to.value += from.value;
  to.sum += from.sum;
  to.count += from.count;
  if (to.buckets.size() < from.buckets.size()) to.buckets.resize(from.buckets.size());
  for (size_t i = 0; i < from.buckets.size(); ++i) to.buckets[i] += from.buckets[i];
}

MetricFamily::Series* MetricFamily::find(const std::vector<std::string>& labels) {
  std::vector<std::string> key = labels;
  key.resize(labels_.size());  // a caller's missing values are "", extra ones ignored
  auto it = series_.find(key);
  if (it != series_.end()) {
    it->second.touched = generation_;
    return &it->second;
  }
  const std::vector<std::string> other(labels_.size(), "other");
  const size_t used = series_.size() - series_.count(other);
  Series fresh;
  fresh.touched = generation_;
  if (type_ == MetricType::Histogram) fresh.buckets.assign(bounds_.size() + 1, 0);
  if (labels_.empty() || used < max_series_ || key == other) return &series_.emplace(key, fresh).first->second;
  ++folded_;
  // full: the smallest series no report has touched since the last publish gives way
  auto victim = series_.end();
  auto weight = [&](const Series& s) { return type_ == MetricType::Histogram ? double(s.count) : s.value; };
  for (auto i = series_.begin(); i != series_.end(); ++i) {
    if (i->first == other || i->second.touched >= generation_) continue;
    if (victim == series_.end() || weight(i->second) < weight(victim->second)) victim = i;
  }
  if (type_ == MetricType::Gauge) {  // a gauge has no "other": the new value is dropped
    if (victim == series_.end()) return nullptr;
    series_.erase(victim);
    return &series_.emplace(key, fresh).first->second;
  }
  Series& o = series_[other];
  if (o.buckets.size() < bounds_.size() + 1 && type_ == MetricType::Histogram) o.buckets.resize(bounds_.size() + 1);
  o.touched = generation_;
  if (victim == series_.end()) return &o;
  merge_into(o, victim->second);
  series_.erase(victim);
  return &series_.emplace(key, fresh).first->second;
}

void MetricFamily::add(const std::vector<std::string>& labels, double v) {
  if (!(v > 0)) {  // 0, negative or NaN: a counter never goes down; the series still appears
    if (Series* s = find(labels)) (void)s;
    return;
  }
  if (Series* s = find(labels)) s->value += v;
}

void MetricFamily::set(const std::vector<std::string>& labels, double v) {
  if (Series* s = find(labels)) s->value = v;
}

void MetricFamily::observe(const std::vector<std::string>& labels, double v, uint64_t n) {
  Series* s = find(labels);
  if (!s || n == 0) return;
  size_t b = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();  // first bound >= v
  s->buckets[b] += n;
  s->sum += v * static_cast<double>(n);
  s->count += n;
}

double MetricFamily::value(const std::vector<std::string>& labels) const {
  auto it = series_.find(labels);
  if (it == series_.end()) return std::numeric_limits<double>::quiet_NaN();
  return type_ == MetricType::Histogram ? double(it->second.count) : it->second.value;
}

std::string MetricFamily::labels_text(const std::vector<std::string>& values, const char* extra_name,
                                      const std::string& extra_value) const {
  std::string out;
  for (size_t i = 0; i < labels_.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += labels_[i] + "=\"" + metric_label_value(i < values.size() ? values[i] : "") + "\"";
  }
  if (extra_name) {
    out += out.empty() ? "{" : ",";
    out += std::string(extra_name) + "=\"" + extra_value + "\"";
  }
  if (!out.empty()) out += "}";
  return out;
}

void MetricFamily::render(std::string& out) const {
  out += "# HELP " + name_ + " " + metric_help_text(help_) + "\n";
  out += "# TYPE " + name_ + " " + type_name(type_) + "\n";
  for (const auto& [values, s] : series_) {
    if (type_ != MetricType::Histogram) {
      out += name_ + labels_text(values) + " " + metric_number(s.value) + "\n";
      continue;
    }
    uint64_t cum = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      cum += i < s.buckets.size() ? s.buckets[i] : 0;
      const std::string le = i < bounds_.size() ? metric_number(bounds_[i]) : "+Inf";
      out += name_ + "_bucket" + labels_text(values, "le", le) + " " + metric_number(double(cum)) + "\n";
    }
    out += name_ + "_sum" + labels_text(values) + " " + metric_number(s.sum) + "\n";
    out += name_ + "_count" + labels_text(values) + " " + metric_number(double(s.count)) + "\n";
  }
}

MetricFamily& MetricSet::get(const std::string& name, const std::string& help, MetricType type,
                             std::vector<std::string> labels, std::vector<double> bounds) {
  for (auto& f : families_)
    if (f->name() == name) return *f;
  families_.push_back(std::make_unique<MetricFamily>(name, help, type, std::move(labels), std::move(bounds)));
  return *families_.back();
}

MetricFamily& MetricSet::counter(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  return get(name, help, MetricType::Counter, std::move(labels), {});
}
MetricFamily& MetricSet::gauge(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  return get(name, help, MetricType::Gauge, std::move(labels), {});
}
MetricFamily& MetricSet::histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                                   std::vector<double> bounds) {
  return get(name, help, MetricType::Histogram, std::move(labels), std::move(bounds));
}

const MetricFamily* MetricSet::find(const std::string& name) const {
  for (auto& f : families_)
    if (f->name() == name) return f.get();
  return nullptr;
}

std::string MetricSet::render() const {
  std::string out;
  for (auto& f : families_) f->render(out);
  return out;
}

void MetricSet::next_generation() {
  for (auto& f : families_) f->next_generation();
}

// --- --listen ------------------------------------------------------------------------

Result<ListenAddress> parse_listen_address(const std::string& text) {
  const std::string what = "--listen " + text + ": ";
  ListenAddress a;
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return Error{what + "give [ADDRESS]:PORT for an IPv6 address"};
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
    a.ipv6 = true;
  } else if (auto colon = text.rfind(':'); colon == std::string::npos) {
    port = text;  // PORT alone: loopback
  } else {
    if (text.find(':') != colon) return Error{what + "give an IPv6 address in brackets: [::1]:PORT"};
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  auto p = parse_uint(port, "--listen port", 1, 65535);
  if (!p) return Error{what + p.error()};
  a.port = static_cast<uint16_t>(*p);
  if (host.empty() || host == "localhost") host = a.ipv6 ? "::1" : "127.0.0.1";
  if (a.ipv6) {
    struct in6_addr in6;
    if (inet_pton(AF_INET6, host.c_str(), &in6) != 1) return Error{what + "not a numeric IPv6 address"};
    a.loopback = IN6_IS_ADDR_LOOPBACK(&in6);
  } else {
    struct in_addr in4;
    // inet_pton: dotted quad only (inet_aton would take "1", "0x7f.1")
    if (inet_pton(AF_INET, host.c_str(), &in4) != 1)
      return Error{what + "not a numeric IPv4 address (names are not looked up; loopback is 127.0.0.1, the default)"};
    a.loopback = (ntohl(in4.s_addr) >> 24) == 127;
  }
  a.host = host;
  return a;
}

// --- --prometheus ----------------------------------------------------------------------

namespace {

std::string reason() { return std::strerror(errno); }

std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// A directory FILE may be replaced in: nobody but root and us can write it, or it is
// sticky (nobody can rename or remove our file) and owned by root or us.
std::optional<std::string> unsafe_dir(const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return std::string("is not a directory");
  const uid_t me = geteuid();
  if (st.st_uid != 0 && st.st_uid != me) return "is owned by uid " + std::to_string(st.st_uid) + " (another user)";
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
    return std::string("is writable by other users and not sticky (they could replace the file)");
  return std::nullopt;
}

std::optional<std::string> unsafe_target(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return std::string("is a symbolic link (refused: give the file itself)");
  if (!S_ISREG(st.st_mode)) return std::string("exists and is not a regular file");
  if (st.st_uid != 0 && st.st_uid != geteuid())
    return "exists and belongs to uid " + std::to_string(st.st_uid) + " (another user)";
  return std::nullopt;
}

}  // namespace

Status check_prometheus_file(const std::string& path) {
  const std::string what = "--prometheus " + path + ": ";
  if (path.empty() || path.back() == '/') return Error{what + "names a directory, not a file"};
  const std::string base = path.substr(path.rfind('/') + 1);
  if (base == "." || base == "..") return Error{what + "names a directory, not a file"};
  const std::string dir = dir_of(path);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return Error{what + "cannot use directory " + dir + ": " + reason()};
  if (auto bad = unsafe_dir(st)) return Error{what + "directory " + dir + " " + *bad};
  if (access(dir.c_str(), W_OK | X_OK) != 0) return Error{what + "directory " + dir + " is not writable: " + reason()};
  if (lstat(path.c_str(), &st) == 0)
    if (auto bad = unsafe_target(st)) return Error{what + *bad};
  return std::nullopt;
}

// --- the sinks ---------------------------------------------------------------------------

namespace {
constexpr size_t kMaxConns = 8;                     // clients served at once; more wait in the backlog
constexpr size_t kMaxRequest = 8192;                // bytes of request line and headers
constexpr uint64_t kConnTimeoutNs = 5000000000ULL;  // a whole exchange
std::unique_ptr<MetricsOutput> g_output;
}  // namespace

MetricsOutput* metrics_output() { return g_output.get(); }
void set_metrics_output(std::unique_ptr<MetricsOutput> out) { g_output = std::move(out); }

Result<std::unique_ptr<MetricsOutput>> MetricsOutput::open(const std::string& prometheus_file,
                                                           const std::string& listen) {
  std::unique_ptr<MetricsOutput> m(new MetricsOutput());
  if (!prometheus_file.empty()) {
    const std::string dir = dir_of(prometheus_file);
    m->file_ = prometheus_file;
    m->file_base_ = prometheus_file.substr(prometheus_file.rfind('/') + 1);
    m->dir_fd_ = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (m->dir_fd_ < 0)
      return Error{"--prometheus " + prometheus_file + ": cannot open directory " + dir + ": " + reason()};
    struct stat st;  // the directory held open is the one checked
    if (fstat(m->dir_fd_, &st) != 0) return Error{"--prometheus " + prometheus_file + ": " + reason()};
    if (auto bad = unsafe_dir(st)) return Error{"--prometheus " + prometheus_file + ": directory " + dir + " " + *bad};
    if (fstatat(m->dir_fd_, m->file_base_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      if (auto bad = unsafe_target(st)) return Error{"--prometheus " + prometheus_file + ": " + *bad};
  }
  if (!listen.empty()) {
    auto a = parse_listen_address(listen);
    if (!a) return Error{a.error()};
    const int fam = a->ipv6 ? AF_INET6 : AF_INET;
    m->listen_fd_ = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (m->listen_fd_ < 0) return Error{"--listen " + listen + ": cannot create a socket: " + reason()};
    int one = 1;
    setsockopt(m->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one,
               sizeof one);  // TIME_WAIT only; a live listener still conflicts
    struct sockaddr_storage ss = {};
    socklen_t len;
    if (a->ipv6) {
      setsockopt(m->listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
      auto* s6 = reinterpret_cast<struct sockaddr_in6*>(&ss);
      s6->sin6_family = AF_INET6;
      s6->sin6_port = htons(a->port);
      inet_pton(AF_INET6, a->host.c_str(), &s6->sin6_addr);
      len = sizeof *s6;
    } else {
      auto* s4 = reinterpret_cast<struct sockaddr_in*>(&ss);
      s4->sin_family = AF_INET;
      s4->sin_port = htons(a->port);
      inet_pton(AF_INET, a->host.c_str(), &s4->sin_addr);
      len = sizeof *s4;
    }
    if (bind(m->listen_fd_, reinterpret_cast<struct sockaddr*>(&ss), len) != 0) {
      const std::string why = errno == EADDRINUSE      ? "port " + std::to_string(a->port) + " is in use"
                              : errno == EADDRNOTAVAIL ? "no local interface has address " + a->host
                                                       : reason();
      return Error{"--listen " + listen + ": cannot listen: " + why};
    }
    if (::listen(m->listen_fd_, 16) != 0) return Error{"--listen " + listen + ": cannot listen: " + reason()};
    m->port_ = a->port;
  }
  return m;
}

MetricsOutput::~MetricsOutput() {
  for (auto& c : conns_) ::close(c.fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

Status MetricsOutput::write_file(const std::string& text) {
  auto fail = [&](const std::string& why) -> Status { return Error{"cannot write " + file_ + ": " + why}; };
  static std::mt19937_64 rng(std::random_device{}() ^ monotonic_ns());
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    char suffix[40];
    std::snprintf(suffix, sizeof suffix, ".tmp.%d.%016llx", static_cast<int>(getpid()),
                  static_cast<unsigned long long>(rng()));
    tmp = "." + file_base_.substr(0, 200) + suffix;  // not *.prom: the collector skips it
    fd = openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) return fail(reason());
  }
  if (fd < 0) return fail("no free temporary name");
  bool ok = fchmod(fd, 0644) == 0;
  for (size_t off = 0; ok && off < text.size();) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ok = false;
    else off += static_cast<size_t>(n);
  }
  std::string why = ok ? "" : reason();
  if (::close(fd) != 0 && ok) ok = false, why = reason();
  if (ok && renameat(dir_fd_, tmp.c_str(), dir_fd_, file_base_.c_str()) != 0) ok = false, why = reason();
  if (!ok) {
    unlinkat(dir_fd_, tmp.c_str(), 0);
    return fail(why);
  }
  return std::nullopt;
}

void MetricsOutput::publish(const std::string& text) {
  if (listen_fd_ >= 0) body_ = text;
  if (dir_fd_ < 0) return;
  failure_ = write_file(text);
  if (failure_ && failure_->message != last_warning_) {  // once per distinct problem
    last_warning_ = failure_->message;
    std::fprintf(stderr, "%s: warning: %s\n", program_invocation_short_name, failure_->message.c_str());
  } else if (!failure_) {
    last_warning_.clear();
  }
}

void MetricsOutput::close_conn(size_t i) {
  ::close(conns_[i].fd);
  conns_.erase(conns_.begin() + static_cast<long>(i));
}

void MetricsOutput::accept_new() {
  while (conns_.size() < kMaxConns) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;  // EAGAIN, or a client gone before we got to it
    Conn c;
    c.fd = fd;
    c.deadline_ns = monotonic_ns() + kConnTimeoutNs;
    conns_.push_back(std::move(c));
  }
}

void MetricsOutput::respond(Conn& c) {
  // request line: METHOD SP TARGET SP VERSION
  std::string line = c.in.substr(0, c.in.find('\n'));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const auto sp1 = line.find(' '), sp2 = line.rfind(' ');
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  bool head = false;
  if (sp1 == std::string::npos || sp2 == sp1 || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    status = "400 Bad Request", type = "text/plain", body = "bad request\n";
  } else {
    const std::string method = line.substr(0, sp1);
    std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    head = method == "HEAD";
    if (method != "GET" && !head) {
      status = "405 Method Not Allowed", type = "text/plain", body = "only GET\n";
    } else if (target == "/metrics") {
      body = body_;
      ++scrapes_;
    } else if (target == "/") {
      type = "text/plain", body = "metrics: /metrics\n";
    } else {
      status = "404 Not Found", type = "text/plain", body = "not found (the metrics are at /metrics)\n";
    }
  }
  c.out = "HTTP/1.0 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\nConnection: close\r\n\r\n" + (head ? "" : body);
  c.sent = 0;
}

void MetricsOutput::handle_read(Conn& c) {
  char buf[2048];
  for (;;) {
    ssize_t n = recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
      c.in.append(buf, static_cast<size_t>(n));
      if (c.in.size() > kMaxRequest) {
        c.in = "BAD";  // too large: answered 400 below
        break;
      }
      continue;
    }
    if (n == 0) {  // EOF before a whole request: nothing to answer
      if (c.in.find("\n\n") == std::string::npos && c.in.find("\r\n\r\n") == std::string::npos) c.deadline_ns = 0;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      c.deadline_ns = 0;  // reset by the client
    }
    break;
  }
  if (c.in == "BAD" || c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos) respond(c);
}

void MetricsOutput::serve(int timeout_ms) {
  if (listen_fd_ < 0) {
    if (timeout_ms > 0) {
      struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
      nanosleep(&ts, nullptr);  // a signal ends it early
    }
    return;
  }
  const uint64_t now = monotonic_ns();
  for (size_t i = conns_.size(); i-- > 0;)
    if (conns_[i].deadline_ns <= now) close_conn(i);
  std::vector<struct pollfd> fds;
  for (auto& c : conns_) fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
  const bool accepting = conns_.size() < kMaxConns;
  if (accepting) fds.push_back({listen_fd_, POLLIN, 0});
  int wait = timeout_ms;
  for (auto& c : conns_) wait = std::min<int>(wait, static_cast<int>((c.deadline_ns - now) / 1000000ULL) + 1);
  if (poll(fds.data(), fds.size(), std::max(wait, 0)) <= 0) return;  // timeout, or a signal
  for (size_t i = conns_.size(); i-- > 0;) {
    Conn& c = conns_[i];
    const short ev = fds[i].revents;
    if (!ev) continue;
    if (c.out.empty()) {
      if (ev & (POLLIN | POLLHUP | POLLERR)) handle_read(c);
      if (c.deadline_ns == 0) {
        close_conn(i);
        continue;
      }
    }
    if (!c.out.empty()) {  // write what the socket takes now; the rest on the next poll
      while (c.sent < c.out.size()) {
        ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        c.sent += static_cast<size_t>(n);
      }
      if (c.sent >= c.out.size() || (ev & (POLLERR | POLLHUP))) close_conn(i);
    }
  }
  if (accepting && (fds.back().revents & POLLIN)) accept_new();
}

int open_metrics_sinks(const char* tool, const std::string& prometheus, const std::string& listen) {
  if (!prometheus.empty()) {
    if (Status bad = check_prometheus_file(prometheus)) {
      std::fprintf(stderr, "%s: %s (see %s --help)\n", tool, one_line(bad->message).c_str(), tool);
      return 2;
    }
  }
  auto out = MetricsOutput::open(prometheus, listen);
  if (!out) {
    std::fprintf(stderr, "%s: %s\n", tool, one_line(out.error()).c_str());
    return 1;
  }
  set_metrics_output(std::move(out.value()));
  return 0;
}

int metrics_sinks_status(const char* tool) {
  MetricsOutput* m = metrics_output();
  if (!m || !m->failure()) return 0;
  std::fprintf(stderr, "%s: %s\n", tool, one_line(m->failure()->message).c_str());
  return 1;
}

// --- a tool's metrics ----------------------------------------------------------------

ToolMetrics::ToolMetrics(std::string tool) : tool_(std::move(tool)) {}

void ToolMetrics::add_data_quality(const DataQuality& dq) {
  auto& events = set_.counter("bpfdiag_data_quality_events_total",
                              "What made reports incomplete, by the JSON data_quality key "
                              "(lost events, lost stacks, unmatched ends, map-full drops, ...).",
                              {"tool", "kind"});
  const nlohmann::json keys = dq.to_json();  // kept alive: items() refers to it
  for (const auto& [k, v] : keys.items()) {
    if (k == "unmatched_begin" || !v.is_number()) continue;
    events.add({tool_, k}, v.get<double>());
  }
  set_.gauge("bpfdiag_unmatched_begins", "Begins without an end at the last report (in progress).", {"tool"})
      .set({tool_}, double(dq.unmatched_begin));
}

void ToolMetrics::publish_start(const DataQuality& zero) {
  set_.gauge("bpfdiag_up", "1 while the tool traces; the last write of a textfile says 0.", {"tool"}).set({tool_}, 1);
  set_.gauge("bpfdiag_build_info", "The suite's version.", {"tool", "version"}).set({tool_, suite_version()}, 1);
  set_.gauge("bpfdiag_start_time_seconds", "When tracing started (Unix time).", {"tool"})
      .set({tool_}, double(realtime_ns()) / 1e9);
  set_.counter("bpfdiag_reports_total", "Reports made (interval and final).", {"tool"}).add({tool_}, 0);
  add_data_quality(zero);
  if (MetricsOutput* out = metrics_output()) out->publish(set_.render());
}

void ToolMetrics::publish(bool final) {
  MetricsOutput* out = metrics_output();
  if (!out) return;
  set_.counter("bpfdiag_reports_total", "Reports made (interval and final).", {"tool"}).add({tool_}, 1);
  set_.gauge("bpfdiag_last_report_timestamp_seconds", "When the last report was made (Unix time).", {"tool"})
      .set({tool_}, double(realtime_ns()) / 1e9);
  auto& folded =
      set_.counter("bpfdiag_metric_series_folded_total",
                   "Updates of label sets past a family's cap, added to its \"other\" series.", {"tool", "metric"});
  for (auto& f : set_.families())
    if (f->folded() && f.get() != &folded) folded.set({tool_, f->name()}, double(f->folded()));
  if (final) set_.gauge("bpfdiag_up", "", {"tool"}).set({tool_}, 0);
  out->publish(set_.render());
  set_.next_generation();
}

}  // namespace bpfdiag
