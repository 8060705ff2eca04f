// common/metrics: the exposition text (escaping, numbers, histograms), the series cap
// with its `other` series, --listen's address rules, --prometheus's file rules and
// atomic replacement, and the HTTP endpoint answering a real client over loopback.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/metrics.h"

using namespace bpfdiag;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/metrics_test.XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace

TEST_CASE("metrics: label values and help are escaped, numbers in Prometheus' form") {
  CHECK(metric_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
  CHECK(metric_label_value(std::string("x\xff\x01y")) == "x\xef\xbf\xbd?y");  // not UTF-8, control
  CHECK(metric_label_value("caf\xc3\xa9") == "caf\xc3\xa9");
  CHECK(metric_help_text("a\\b\nc") == "a\\\\b\\nc");
  CHECK(metric_number(3) == "3");
  CHECK(metric_number(0.25) == "0.25");
  CHECK(metric_number(1e-6) == "1e-06");
  CHECK(metric_number(INFINITY) == "+Inf");
  CHECK(metric_number(NAN) == "NaN");
  CHECK(valid_metric_name("bpfdiag_up"));
  CHECK_FALSE(valid_metric_name("1x"));
  CHECK(valid_label_name("comm"));
  CHECK_FALSE(valid_label_name("__name"));
  CHECK_FALSE(valid_label_name("le"));
}

TEST_CASE("metrics: counters, gauges and histograms render with HELP and TYPE") {
  MetricSet m;
  auto& c = m.counter("x_seconds_total", "Time.", {"comm"});
  c.add({"a"}, 0.5);
  c.add({"a"}, 0.25);
  c.add({"b\"q"}, 1);
  m.gauge("x_ratio", "Ratio.").set({}, 0.5);
  auto& h = m.histogram("x_length", "Length.", {"cpu"}, {0, 1, 4});
  h.observe({"0"}, 0, 3);
  h.observe({"0"}, 2, 1);
  h.observe({"0"}, 9, 1);
  const std::string t = m.render();
  CHECK(t.find("# HELP x_seconds_total Time.\n# TYPE x_seconds_total counter\n") == 0);
  CHECK(t.find("x_seconds_total{comm=\"a\"} 0.75\n") != std::string::npos);
  CHECK(t.find("x_seconds_total{comm=\"b\\\"q\"} 1\n") != std::string::npos);
  CHECK(t.find("# TYPE x_ratio gauge\nx_ratio 0.5\n") != std::string::npos);
  CHECK(t.find("x_length_bucket{cpu=\"0\",le=\"0\"} 3\n") != std::string::npos);
  CHECK(t.find("x_length_bucket{cpu=\"0\",le=\"1\"} 3\n") != std::string::npos);
  CHECK(t.find("x_length_bucket{cpu=\"0\",le=\"4\"} 4\n") != std::string::npos);
  CHECK(t.find("x_length_bucket{cpu=\"0\",le=\"+Inf\"} 5\n") != std::string::npos);
  CHECK(t.find("x_length_sum{cpu=\"0\"} 11\n") != std::string::npos);
  CHECK(t.find("x_length_count{cpu=\"0\"} 5\n") != std::string::npos);
  c.add({"a"}, -1);  // a counter never goes down
  CHECK(c.value({"a"}) == doctest::Approx(0.75));
}

TEST_CASE("metrics: a family keeps at most its cap; idle series fold into other, sums stay") {
  MetricFamily f("y_total", "Y.", MetricType::Counter, {"comm"}, {}, 3);
  f.add({"a"}, 1);
  f.add({"b"}, 5);
  f.add({"c"}, 7);
  f.add({"d"}, 2);  // full, every series in use this generation: into other
  CHECK(f.series() == 4);
  CHECK(f.value({"other"}) == 2);
  CHECK(f.folded() == 1);
  f.next_generation();
  f.add({"b"}, 1);  // b in use; a (1) and c (7) idle: a, the smallest, gives way
  f.add({"e"}, 3);
  CHECK(std::isnan(f.value({"a"})));
  CHECK(f.value({"e"}) == 3);
  CHECK(f.value({"other"}) == 3);  // 2 + a's 1
  double sum = 0;
  for (const char* k : {"b", "c", "e", "other"}) sum += f.value({k});
  CHECK(sum == 1 + 5 + 7 + 2 + 1 + 3);  // everything ever added, nothing lost
  for (int i = 0; i < 1000; ++i) f.add({"n" + std::to_string(i)}, 1);
  CHECK(f.series() <= 4);
}

TEST_CASE("metrics: --listen addresses") {
  auto a = parse_listen_address("9464");
  REQUIRE(a);
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 9464);
  CHECK(a->loopback);
  CHECK(parse_listen_address(":9464")->host == "127.0.0.1");
  CHECK(parse_listen_address("localhost:1")->loopback);
  CHECK(parse_listen_address("[::1]:9464")->ipv6);
  CHECK(parse_listen_address("[::1]:9464")->loopback);
  auto any = parse_listen_address("0.0.0.0:9464");  // explicit: allowed, not loopback
  REQUIRE(any);
  CHECK_FALSE(any->loopback);
  CHECK_FALSE(parse_listen_address("example.com:9464"));
  CHECK_FALSE(parse_listen_address("127.0.0.1:0"));
  CHECK_FALSE(parse_listen_address("127.0.0.1:70000"));
  CHECK_FALSE(parse_listen_address("::1:9464"));
  CHECK_FALSE(parse_listen_address("127.0.0.1:"));
  CHECK_FALSE(parse_listen_address("1:80"));  // inet_aton's short forms are not taken
}

TEST_CASE("metrics: --prometheus FILE rules") {
  const std::string d = temp_dir();
  CHECK_FALSE(check_prometheus_file(d + "/m.prom"));
  CHECK(check_prometheus_file(d + "/"));
  CHECK(check_prometheus_file(d + "/missing/m.prom"));
  REQUIRE(symlink("/etc/passwd", (d + "/link.prom").c_str()) == 0);
  auto st = check_prometheus_file(d + "/link.prom");
  REQUIRE(st);
  CHECK(st->message.find("symbolic link") != std::string::npos);
  REQUIRE(mkdir((d + "/open").c_str(), 0777) == 0);
  chmod((d + "/open").c_str(), 0777);  // writable by all, not sticky: refused
  st = check_prometheus_file(d + "/open/m.prom");
  REQUIRE(st);
  CHECK(st->message.find("not sticky") != std::string::npos);
  chmod((d + "/open").c_str(), 01777);  // sticky and ours (as /tmp): accepted
  CHECK_FALSE(check_prometheus_file(d + "/open/m.prom"));
  CHECK_FALSE(check_prometheus_file("/tmp/bpfdiag-metrics-test.prom"));
  std::system(("rm -rf " + d).c_str());
}

TEST_CASE("metrics: the textfile is replaced whole, never through a link, no temp left") {
  const std::string d = temp_dir();
  const std::string file = d + "/m.prom";
  auto out = MetricsOutput::open(file, "");
  REQUIRE(out);
  out.value()->publish("a 1\n");
  CHECK(slurp(file) == "a 1\n");
  struct stat st;
  REQUIRE(stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
  // someone puts a symlink at FILE meanwhile: it is replaced, its target untouched
  unlink(file.c_str());
  std::ofstream(d + "/victim") << "keep";
  REQUIRE(symlink((d + "/victim").c_str(), file.c_str()) == 0);
  out.value()->publish("a 2\n");
  REQUIRE(lstat(file.c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK(slurp(file) == "a 2\n");
  CHECK(slurp(d + "/victim") == "keep");
  CHECK_FALSE(out.value()->failure());
  int entries = 0;
  for (const char* n : {"m.prom", "victim"}) entries += access((d + "/" + n).c_str(), F_OK) == 0;
  CHECK(entries == 2);
  CHECK(std::system(("test $(ls -A " + d + " | wc -l) -eq 2").c_str()) == 0);  // no temp file left
  std::system(("rm -rf " + d).c_str());
}

TEST_CASE("metrics: the endpoint answers GET /metrics, 404 and 405, over loopback") {
  const uint16_t port = free_port();
  auto out = MetricsOutput::open("", "127.0.0.1:" + std::to_string(port));
  REQUIRE(out);
  MetricsOutput& m = *out.value();
  m.publish("z_total 4\n");
  auto ask = [&](const std::string& req) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size()));
    std::string got;
    for (int i = 0; i < 100; ++i) {
      m.serve(10);
      char buf[4096];
      struct pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, 0) > 0) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
      }
    }
    close(fd);
    return got;
  };
  std::string r = ask("GET /metrics HTTP/1.0\r\n\r\n");
  CHECK(r.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
  CHECK(r.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(r.size() >= 10);
  CHECK(r.substr(r.size() - 10) == "z_total 4\n");
  CHECK(ask("GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").rfind("HTTP/1.0 404", 0) == 0);
  CHECK(ask("POST /metrics HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 405", 0) == 0);
  CHECK(ask(std::string(9000, 'A')).rfind("HTTP/1.0 400", 0) == 0);  // too large
  CHECK(m.scrapes() == 1);
  // a second listener on the same port: one line, "in use"
  auto again = MetricsOutput::open("", "127.0.0.1:" + std::to_string(port));
  REQUIRE_FALSE(again);
  CHECK(again.error().find("in use") != std::string::npos);
}
