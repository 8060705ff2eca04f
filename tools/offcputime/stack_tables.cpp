// offcputime's stack tables: sizing them from the threads traced (stacks are read
// back by common/stack_reader).
#include <dirent.h>

#include <algorithm>

#include "tools/offcputime/offcputime.h"

namespace offcputime {
using namespace bpfdiag;

namespace {
uint64_t count_dir_entries(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (!d) return 0;
  uint64_t n = 0;
  while (auto* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}
}  // namespace

uint64_t auto_stack_storage(uint64_t threads) {
  uint64_t want = std::clamp<uint64_t>(threads * kStacksPerThread, kDefaultStackStorage, kMaxAutoStackStorage);
  uint64_t n = 1;
  while (n < want) n <<= 1;
  return n;
}

uint64_t overflow_storage_size(uint64_t stack_storage_size) {
  return std::clamp<uint64_t>(stack_storage_size / 2, 16384, 65536);  // ~580 bytes each
}

uint64_t count_traced_threads(const Config& c) {
  if (!c.tids.empty()) return c.tids.size();
  if (!c.pids.empty()) {
    uint64_t n = 0;
    for (auto p : c.pids) n += std::max<uint64_t>(1, count_dir_entries("/proc/" + std::to_string(p) + "/task"));
    return n;
  }
  uint64_t n = 0;  // every task on the system
  DIR* d = opendir("/proc");
  if (!d) return 0;
  while (auto* e = readdir(d))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
      n += count_dir_entries(std::string("/proc/") + e->d_name + "/task");
  closedir(d);
  return n;
}

}  // namespace offcputime
