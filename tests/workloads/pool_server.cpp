// pool_server: a loopback TCP server with an acceptor thread, a work queue and a fixed
// pool of workers, for threadpool's integration test. It measures its own ground truth.
//
//   pool_server [--workers N] [--cpu-us US] [--block-us US] [--lock-us US] [--port P]
//               [--exit-after S]
//
// Per connection: the acceptor accepts it (timestamp A) and queues the fd; a worker
// dequeues it and reads the request (timestamp R, just before read()), burns --cpu-us
// of its own CPU time, then holds one global mutex for --lock-us while blocked in
// read() on a timerfd (I/O under a lock: the other workers queue on the mutex),
// then blocks --block-us in read() on a timerfd (I/O wait),
// writes the response (timestamp W, just before write()) and closes.
// A worker is idle while it waits in the queue (condition variable) and busy otherwise.
//
// Prints {"type":"ready","pid":..,"port":..} at start. SIGUSR1 starts the measurement
// window (resets counters); SIGTERM/SIGINT (or --exit-after) prints the ground truth of
// the window and exits:
//   {"type":"truth","workers":N,"window_ns":..,"requests":..,"utilization":..,
//    "busy_avg":..,"queue_wait_avg_ns":..,"service_avg_ns":..,"response_avg_ns":..,
//    "lock_wait_ns":..}   (lock_wait_ns: total time spent acquiring the global mutex)
// queue wait = R - A, service = W - R, response = W - A, over requests whose response
// was written inside the window; utilization = busy worker-time / (workers * window).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

int64_t now_ns(clockid_t clk = CLOCK_MONOTONIC) {
  timespec ts;
  clock_gettime(clk, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct Item {
  int fd;
  int64_t accept_ns;
};

std::mutex mu;
std::condition_variable cv;
std::deque<Item> queue_;

int g_workers = 4;
int64_t g_cpu_ns = 0, g_block_ns = 0, g_lock_ns = 0;
std::mutex g_lock;

// ground truth of the current window
std::atomic<int64_t> window_start{0};
std::mutex stats_mu;
uint64_t n_req = 0;
long double sum_q = 0, sum_s = 0, sum_r = 0, sum_lock = 0;
struct WorkerState {
  std::atomic<int64_t> idle_ns{0};
  std::atomic<int64_t> wait_start{0};  // 0: busy
};
std::vector<WorkerState>* states;

void burn_cpu(int64_t ns) {
  if (ns <= 0) return;
  int64_t end = now_ns(CLOCK_THREAD_CPUTIME_ID) + ns;
  volatile uint64_t x = 0;
  while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end)
    for (int i = 0; i < 200; ++i) x = x + i;
}

void block_io(int tfd, int64_t ns) {
  if (ns <= 0) return;
  itimerspec its = {};
  its.it_value.tv_sec = ns / 1000000000LL;
  its.it_value.tv_nsec = ns % 1000000000LL;
  timerfd_settime(tfd, 0, &its, nullptr);
  uint64_t exp;
  if (read(tfd, &exp, sizeof exp) < 0) perror("timerfd read");
}

void worker(int id) {
  char name[16];
  std::snprintf(name, sizeof name, "worker-%d", id);
  pthread_setname_np(pthread_self(), name);
  int tfd = timerfd_create(CLOCK_MONOTONIC, 0);
  WorkerState& st = (*states)[id];
  char buf[512];
  while (true) {
    int64_t w0 = now_ns();
    st.wait_start.store(w0);
    Item it;
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [] { return !queue_.empty(); });
      it = queue_.front();
      queue_.pop_front();
    }
    int64_t r = now_ns();  // dequeued: the first read follows at once
    st.wait_start.store(0);
    int64_t ws = window_start.load();
    if (r > ws) st.idle_ns.fetch_add(r - std::max(w0, ws));
    ssize_t n = read(it.fd, buf, sizeof buf);
    if (n <= 0) {
      close(it.fd);
      continue;
    }
    burn_cpu(g_cpu_ns);
    int64_t lock_wait = 0;
    if (g_lock_ns > 0) {
      int64_t l0 = now_ns();
      std::lock_guard<std::mutex> lk(g_lock);
      lock_wait = now_ns() - l0;
      block_io(tfd, g_lock_ns);
    }
    block_io(tfd, g_block_ns);
    static const char resp[] = "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok";
    // W is taken just before write(): once write() returns, the worker may be
    // preempted by the client it just woke, and a timestamp taken after that
    // would include a run-queue wait that is not part of serving the request.
    int64_t w = now_ns();
    ssize_t wn = write(it.fd, resp, sizeof resp - 1);
    close(it.fd);
    if (wn > 0 && w >= window_start.load()) {
      std::lock_guard<std::mutex> lk(stats_mu);
      n_req++;
      sum_q += r - it.accept_ns;
      sum_s += w - r;
      sum_r += w - it.accept_ns;
      sum_lock += lock_wait;
    }
  }
}

void acceptor(int lfd) {
  pthread_setname_np(pthread_self(), "acceptor");
  while (true) {
    int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int64_t a = now_ns();
    {
      std::lock_guard<std::mutex> lk(mu);
      queue_.push_back({fd, a});
    }
    cv.notify_one();
  }
}

void reset_window() {
  std::lock_guard<std::mutex> lk(stats_mu);
  int64_t t = now_ns();
  window_start.store(t);
  n_req = 0;
  sum_q = sum_s = sum_r = sum_lock = 0;
  for (auto& s : *states) s.idle_ns.store(0);
}

void print_truth() {
  int64_t end = now_ns(), ws = window_start.load();
  int64_t win = end - ws;
  int64_t idle = 0;
  for (auto& s : *states) {
    idle += s.idle_ns.load();
    int64_t w0 = s.wait_start.load();
    if (w0) idle += end - std::max(w0, ws);
  }
  std::lock_guard<std::mutex> lk(stats_mu);
  double busy = static_cast<double>(static_cast<long double>(g_workers) * win - idle);
  double util = busy / (static_cast<double>(g_workers) * win);
  auto avg = [&](long double s) { return n_req ? static_cast<long long>(s / n_req) : 0LL; };
  std::printf(
      "{\"type\":\"truth\",\"workers\":%d,\"window_ns\":%lld,\"requests\":%llu,"
      "\"utilization\":%.4f,\"busy_avg\":%.4f,\"queue_wait_avg_ns\":%lld,"
      "\"service_avg_ns\":%lld,\"response_avg_ns\":%lld,\"lock_wait_ns\":%lld}\n",
      g_workers, static_cast<long long>(win), static_cast<unsigned long long>(n_req), util,
      busy / win, avg(sum_q), avg(sum_s), avg(sum_r), static_cast<long long>(sum_lock));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  double exit_after = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    double v = std::atof(argv[i + 1]);
    if (a == "--workers") g_workers = static_cast<int>(v);
    else if (a == "--cpu-us") g_cpu_ns = static_cast<int64_t>(v * 1000);
    else if (a == "--block-us") g_block_ns = static_cast<int64_t>(v * 1000);
    else if (a == "--lock-us") g_lock_ns = static_cast<int64_t>(v * 1000);
    else if (a == "--port") port = static_cast<int>(v);
    else if (a == "--exit-after") exit_after = v;
    else {
      std::fprintf(stderr, "pool_server: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) || listen(lfd, 4096)) {
    perror("pool_server: bind/listen");
    return 1;
  }
  socklen_t len = sizeof addr;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);

  states = new std::vector<WorkerState>(g_workers);
  window_start.store(now_ns());
  for (int i = 0; i < g_workers; ++i) std::thread(worker, i).detach();
  std::thread(acceptor, lfd).detach();
  std::printf("{\"type\":\"ready\",\"pid\":%d,\"port\":%d,\"workers\":%d}\n", getpid(),
              ntohs(addr.sin_port), g_workers);
  std::fflush(stdout);

  int64_t deadline = exit_after > 0 ? now_ns() + static_cast<int64_t>(exit_after * 1e9) : 0;
  while (true) {
    timespec ts = {0, 50000000};
    int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGUSR1) reset_window();
    if (sig == SIGTERM || sig == SIGINT || (deadline && now_ns() >= deadline)) break;
  }
  print_truth();
  _exit(0);
}
