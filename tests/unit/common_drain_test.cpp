// drain_hash under concurrent updates, on a real BPF hash map (bpf() syscall via
// libbcc's wrappers): while one thread keeps inserting and another keeps counting,
// the main thread drains over and over. Every inserted entry must be drained exactly
// once (none lost, none counted twice), and the drained counters must add up to the
// increments made.
#include <doctest/doctest.h>
#include <bcc/libbpf.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <thread>
#include <vector>

#include "common/bpf_maps.h"
#include "tests/unit/test_env.h"

using namespace bpfdiag;
using bpfdiag_test::require_env;

namespace {

struct FdTable {  // the one thing drain_hash needs from a bcc table
  int fd;
  int get_fd() { return fd; }
};

constexpr uint32_t kInserts = 30000;   // unique keys 1..kInserts, value = key * 7
constexpr uint64_t kMinIncrements = 10000;
constexpr uint32_t kCounterBase = 1u << 30;
constexpr uint32_t kCounterKeys = 16;  // counter keys kCounterBase + 0..15
constexpr uint32_t kMapSize = 2048;     // smaller than kInserts: the inserter must wait for drains

}  // namespace

TEST_CASE("drain_hash: concurrent inserts and increments are drained exactly once, never lost") {
  if (!require_env(geteuid() == 0, "creating a BPF map needs root")) return;
  int fd = bcc_create_map(BPF_MAP_TYPE_HASH, "drain_conc", sizeof(uint32_t), sizeof(uint64_t), kMapSize, 0);
  if (!require_env(fd >= 0, "bpf(BPF_MAP_CREATE) failed")) return;
  FdTable t{fd};

  std::atomic<bool> inserting{true}, counting{true};
  std::atomic<uint64_t> increments{0};
  std::atomic<uint64_t> map_full{0}, other_errors{0};
  std::thread inserter([&] {
    for (uint32_t k = 1; k <= kInserts; ++k) {
      uint64_t v = uint64_t{k} * 7;
      // the map is full until the next drain: wait for it (counted, not a retry of a check)
      while (bpf_update_elem(fd, &k, &v, BPF_NOEXIST) != 0) {
        if (errno != E2BIG) ++other_errors;  // checked on the main thread
        ++map_full;
        std::this_thread::yield();
      }
    }
    inserting = false;
  });
  // Counters as a single writer keeps them: read, then replace only if the entry is
  // still there (BPF_EXIST), else start it afresh (BPF_NOEXIST). Against an atomic
  // take every increment lands in exactly one drain; with a separate lookup and
  // delete, an increment written between the two is deleted unseen.
  std::thread counter([&] {
    // at least kMinIncrements, however slow the machine, and until the inserts end
    for (uint64_t n = 0; inserting || n < kMinIncrements; ++n) {
      uint32_t k = kCounterBase + static_cast<uint32_t>(n % kCounterKeys);
      for (;;) {
        uint64_t old = 0, one = 1;
        if (bpf_lookup_elem(fd, &k, &old) == 0) {
          uint64_t v = old + 1;
          if (bpf_update_elem(fd, &k, &v, BPF_EXIST) == 0) break;
        } else if (bpf_update_elem(fd, &k, &one, BPF_NOEXIST) == 0) {
          break;
        }
        if (errno == E2BIG) ++map_full;
      }
      ++increments;
    }
    counting = false;
  });

  std::map<uint32_t, uint64_t> seen;  // inserted keys: key -> times drained
  uint64_t counted = 0;
  uint64_t wrong_value = 0, drains = 0, drained_while_running = 0;
  auto take = [&](bool running) {
    auto got = drain_hash<uint32_t, uint64_t>(t);
    ++drains;
    if (running) drained_while_running += got.size();
    for (auto& [k, v] : got) {
      if (k >= kCounterBase) {
        counted += v;
      } else {
        ++seen[k];
        if (v != uint64_t{k} * 7) ++wrong_value;
      }
    }
  };
  while (inserting || counting) take(true);
  inserter.join();
  counter.join();
  take(false);  // what the last concurrent drain left

  uint64_t missing = 0, twice = 0;
  for (uint32_t k = 1; k <= kInserts; ++k) {
    auto it = seen.find(k);
    if (it == seen.end()) ++missing;
    else if (it->second > 1) ++twice;
  }
  const uint64_t incs = increments, waits = map_full, errs = other_errors;
  INFO(drains << " drains, " << incs << " increments, " << drained_while_running << " entries drained while updates ran, "
              << waits << " updates waited for a full map");
  CHECK(drains > 10);                       // the drains really overlapped the updates
  CHECK(drained_while_running > kInserts / 2);
  CHECK(errs == 0);
  CHECK(seen.size() == kInserts);
  CHECK(missing == 0);
  CHECK(twice == 0);
  CHECK(wrong_value == 0);
  CHECK(counted == incs);  // every increment drained once
  uint32_t next;
  CHECK(bpf_get_next_key(fd, nullptr, &next) != 0);  // nothing left behind
  close(fd);
}
