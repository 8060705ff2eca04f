// pool_load: closed-loop load generator for pool_server (or any loopback HTTP/1.0
// server): C client threads each connect, send a request, read the whole response and
// close, again and again, for a fixed time.
//
//   pool_load --port P [--clients C] [--duration S] [--think-us US] [--rate R]
//
// --rate R paces the clients to R requests/s in total (each client R/C per second,
// on a fixed schedule, catching up without bursts beyond it when late).
//
// Prints {"type":"load","requests":..,"errors":..,"rps":..,"latency_avg_ns":..}.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

std::atomic<uint64_t> n_ok{0}, n_err{0}, sum_lat{0};

void client(int port, int64_t end, int64_t think_ns, int64_t period_ns) {
  int64_t next = now_ns();
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  static const char req[] = "GET / HTTP/1.0\r\n\r\n";
  char buf[1024];
  while (now_ns() < end) {
    if (period_ns > 0) {
      int64_t now = now_ns();
      if (next > now) usleep(static_cast<useconds_t>((next - now) / 1000));
      next += period_ns;
      if (next < now_ns() - 100 * period_ns) next = now_ns();  // far behind: do not burst
    }
    int64_t t0 = now_ns();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
              write(fd, req, sizeof req - 1) == static_cast<ssize_t>(sizeof req - 1);
    size_t got = 0;
    while (ok) {
      ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0) ok = false;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    close(fd);
    if (ok && got > 0) {
      n_ok++;
      sum_lat += static_cast<uint64_t>(now_ns() - t0);
    } else {
      n_err++;
      usleep(1000);
    }
    if (think_ns > 0) usleep(static_cast<useconds_t>(think_ns / 1000));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0, clients = 4;
  double duration = 5, think_us = 0, rate = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    double v = std::atof(argv[i + 1]);
    if (a == "--port") port = static_cast<int>(v);
    else if (a == "--clients") clients = static_cast<int>(v);
    else if (a == "--duration") duration = v;
    else if (a == "--think-us") think_us = v;
    else if (a == "--rate") rate = v;
    else {
      std::fprintf(stderr, "pool_load: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (port <= 0) {
    std::fprintf(stderr, "pool_load: --port is required\n");
    return 2;
  }
  int64_t start = now_ns(), end = start + static_cast<int64_t>(duration * 1e9);
  std::vector<std::thread> ts;
  for (int i = 0; i < clients; ++i)
    ts.emplace_back(client, port, end, static_cast<int64_t>(think_us * 1000),
                    rate > 0 ? static_cast<int64_t>(1e9 * clients / rate) : 0);
  for (auto& t : ts) t.join();
  double secs = (now_ns() - start) / 1e9;
  uint64_t ok = n_ok.load();
  std::printf("{\"type\":\"load\",\"requests\":%llu,\"errors\":%llu,\"rps\":%.1f,"
              "\"latency_avg_ns\":%llu}\n",
              static_cast<unsigned long long>(ok), static_cast<unsigned long long>(n_err.load()),
              ok / secs, static_cast<unsigned long long>(ok ? sum_lat.load() / ok : 0));
  return 0;
}
