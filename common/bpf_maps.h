// Reading BPF maps for interval reports without losing what arrives meanwhile.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace bpfdiag {

// Moves every entry out of a BPF hash map: keys are listed first, then each entry is
// taken with one atomic lookup-and-delete, so an update that lands while the report
// is being built either is in this drain or stays in the map for the next one —
// never lost between a read and a clear (in batches of entries where the kernel can). `Table` is an ebpf::BPFHashTable<K, V>
// (anything with get_fd()). Falls back to lookup + delete on kernels without
// lookup-and-delete for hash maps (< 5.14), where a concurrent update can be lost.
template <typename K, typename V, typename Table>
std::vector<std::pair<K, V>> drain_hash(Table& table);

// Per-interval deltas of counters that the BPF side only ever increments (array
// slots, global stats). Resetting such counters from user space races with the
// BPF side; taking deltas of cumulative values does not.
class CounterDeltas {
 public:
  // Delta of counter `slot` since the previous call for that slot.
  uint64_t delta(size_t slot, uint64_t cumulative);

 private:
  std::vector<uint64_t> prev_;
};

namespace detail {
int map_next_key(int fd, void* key, void* next);
bool map_take(int fd, void* key, void* value);
// Every entry moved out with BPF_MAP_LOOKUP_AND_DELETE_BATCH (one syscall per few
// thousand entries, not two per entry: 110k entries took a second one by one on a
// loaded box). Appends to keys/values; false when the kernel or map cannot batch and
// nothing was taken. The caller goes key by key over what is left either way.
bool map_take_batch(int fd, size_t key_size, size_t value_size, std::vector<unsigned char>& keys,
                    std::vector<unsigned char>& values, size_t& n);
}  // namespace detail

// Each key of a hash map, without its value. `keep_going` is asked every 256 keys; the
// walk stops when it says no (a stop signal: under a fork storm the walk of a large
// map took a second) and the result is then false.
template <typename K, typename Table, typename Fn, typename Go>
bool for_each_key(Table& table, Fn&& fn, Go&& keep_going) {
  int fd = table.get_fd();
  K cur{}, next{};
  bool first = true;
  size_t n = 0;
  while (detail::map_next_key(fd, first ? nullptr : &cur, &next) == 0) {
    fn(next);
    cur = next;
    first = false;
    if ((++n & 255) == 0 && !keep_going()) return false;
  }
  return true;
}

template <typename K, typename V, typename Table>
std::vector<std::pair<K, V>> drain_hash(Table& table) {
  int fd = table.get_fd();
  std::vector<std::pair<K, V>> out;
  {
    std::vector<unsigned char> kb, vb;
    size_t n = 0;
    if (detail::map_take_batch(fd, sizeof(K), sizeof(V), kb, vb, n)) {
      out.resize(n);
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(&out[i].first, kb.data() + i * sizeof(K), sizeof(K));
        std::memcpy(&out[i].second, vb.data() + i * sizeof(V), sizeof(V));
      }
    }
  }
  // what the batch left (all of it without batches; else normally nothing: one call)
  std::vector<K> keys;
  K cur{}, next{};
  bool first = true;
  while (detail::map_next_key(fd, first ? nullptr : &cur, &next) == 0) {
    keys.push_back(next);
    cur = next;
    first = false;
  }
  out.reserve(out.size() + keys.size());
  for (auto& k : keys) {
    V v{};
    if (detail::map_take(fd, &k, &v)) out.emplace_back(k, v);
  }
  return out;
}

}  // namespace bpfdiag
