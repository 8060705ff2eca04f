// mmap_storm: threads of one process map, touch and unmap memory in a loop, so the
// process's mmap_lock (an rwsem: mmap/munmap take it for write, page faults for read)
// is contended in the kernel. Used to check kernel lock reporting (lock:contention_*).
//
// USAGE: mmap_storm [--threads N] [--duration-ms MS] [--pages P] [--go-file PATH]
//
//   --threads N       threads (1-256, default 4)
//   --duration-ms MS  run time (1-3600000, default 2000)
//   --pages P         pages mapped and touched per iteration (1-4096, default 16)
//   --go-file PATH    print "ready <pid>" on stderr, wait until PATH exists, then run
//
// Output: one JSON line on stdout:
//   {"type":"mmap_storm","pid":P,"threads":N,"iterations":n,"duration_ns":D}
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

long g_pages = 16;
std::atomic<bool> g_stop{false};
std::atomic<unsigned long long> g_iters{0};

unsigned long long now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

long parse(const char* flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  long x = v ? std::strtol(v, &end, 10) : 0;
  if (!v || !*v || *end || x < lo || x > hi) {
    std::fprintf(stderr, "mmap_storm: %s needs an integer in [%ld, %ld]\n", flag, lo, hi);
    std::exit(2);
  }
  return x;
}

__attribute__((noinline)) void map_touch_unmap(size_t len, long page) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  for (size_t off = 0; off < len; off += static_cast<size_t>(page))
    static_cast<volatile char*>(p)[off] = 1;  // page fault: mmap_lock for read
  munmap(p, len);                             // mmap_lock for write
}

void* worker(void*) {
  long page = sysconf(_SC_PAGESIZE);
  size_t len = static_cast<size_t>(g_pages * page);
  unsigned long long n = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    map_touch_unmap(len, page);
    ++n;
  }
  g_iters += n;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  long threads = 4, duration_ms = 2000;
  std::string go_file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--threads") threads = parse("--threads", v, 1, 256), ++i;
    else if (a == "--duration-ms") duration_ms = parse("--duration-ms", v, 1, 3600000), ++i;
    else if (a == "--pages") g_pages = parse("--pages", v, 1, 4096), ++i;
    else if (a == "--go-file" && v) go_file = v, ++i;
    else {
      std::fprintf(stderr, "mmap_storm: bad argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (!go_file.empty()) {
    std::fprintf(stderr, "ready %d\n", getpid());
    struct stat sb;
    while (stat(go_file.c_str(), &sb) != 0) usleep(1000);
  }
  unsigned long long start = now_ns();
  std::vector<pthread_t> th(static_cast<size_t>(threads));
  for (auto& t : th) pthread_create(&t, nullptr, worker, nullptr);
  struct timespec d = {duration_ms / 1000, (duration_ms % 1000) * 1000000L};
  clock_nanosleep(CLOCK_MONOTONIC, 0, &d, nullptr);
  g_stop = true;
  for (auto& t : th) pthread_join(t, nullptr);
  std::printf("{\"type\":\"mmap_storm\",\"pid\":%d,\"threads\":%ld,\"iterations\":%llu,\"duration_ns\":%llu}\n",
              getpid(), threads, g_iters.load(), now_ns() - start);
  return 0;
}
