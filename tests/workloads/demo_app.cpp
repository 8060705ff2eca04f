// demo_app: a small "slow service" for the demo runbook. A producer feeds a work
// queue; worker threads ("worker") take items, burn CPU, update shared statistics
// under a deliberately coarse lock (stats_lock, held ~200 us), and sometimes nap;
// background threads ("hog") oversubscribe the CPUs. Every tool in the suite has
// something to find here.
// usage: demo_app [SECONDS] [WORKERS] [HOGS]   (defaults: 30 4 3)
// Prints a JSON line with what it did when it exits.
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <thread>
#include <vector>

static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static std::mutex queue_mu;
static std::condition_variable queue_cv;
static std::deque<int> work_queue;
static std::atomic<bool> stop{false};
static unsigned long stats_total = 0;
static std::atomic<unsigned long> done{0}, naps{0};

static void burn_cpu_us(long us) {
  auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  volatile unsigned long x = 0;
  while (std::chrono::steady_clock::now() < end)
    for (int i = 0; i < 1000; ++i) x += i;
}

__attribute__((noinline)) void update_stats(int item) {
  pthread_mutex_lock(&stats_lock);
  burn_cpu_us(200);  // too much work under the lock
  stats_total += item;
  pthread_mutex_unlock(&stats_lock);
}

__attribute__((noinline)) void take_a_nap() {
  struct timespec ts = {0, 5 * 1000 * 1000};  // 5 ms
  nanosleep(&ts, nullptr);
  naps++;
}

static void worker() {
  pthread_setname_np(pthread_self(), "worker");
  while (true) {
    int item;
    {
      std::unique_lock<std::mutex> lk(queue_mu);
      queue_cv.wait(lk, [] { return stop || !work_queue.empty(); });
      if (stop && work_queue.empty()) return;
      item = work_queue.front();
      work_queue.pop_front();
    }
    burn_cpu_us(300);
    update_stats(item);
    if (item % 10 == 0) take_a_nap();
    done++;
  }
}

static void hog() {
  pthread_setname_np(pthread_self(), "hog");
  while (!stop) burn_cpu_us(10000);
}

int main(int argc, char** argv) {
  double secs = argc > 1 ? std::atof(argv[1]) : 30;
  int workers = argc > 2 ? std::atoi(argv[2]) : 4;
  int hogs = argc > 3 ? std::atoi(argv[3]) : 3;
  std::vector<std::thread> ts;
  for (int i = 0; i < workers; ++i) ts.emplace_back(worker);
  for (int i = 0; i < hogs; ++i) ts.emplace_back(hog);
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
  int n = 0;
  while (std::chrono::steady_clock::now() < end) {
    {
      std::lock_guard<std::mutex> lk(queue_mu);
      for (int i = 0; i < 20; ++i) work_queue.push_back(n++);
    }
    queue_cv.notify_all();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  queue_cv.notify_all();
  for (auto& t : ts) t.join();
  std::printf("{\"pid\":%d,\"seconds\":%.1f,\"workers\":%d,\"hogs\":%d,\"items_done\":%lu,\"naps\":%lu}\n",
              getpid(), secs, workers, hogs, done.load(), naps.load());
  return 0;
}
