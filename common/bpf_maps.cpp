#include "common/bpf_maps.h"

#include <bcc/libbpf.h>

#include <cerrno>

namespace bpfdiag {

int detail::map_next_key(int fd, void* key, void* next) { return bpf_get_next_key(fd, key, next); }

bool detail::map_take(int fd, void* key, void* value) {
  if (bpf_lookup_and_delete(fd, key, value) == 0) return true;
  if (errno == ENOENT) return false;
  // kernels before 5.14 cannot lookup-and-delete hash entries
  if (bpf_lookup_elem(fd, key, value) != 0) return false;
  bpf_delete_elem(fd, key);
  return true;
}

bool detail::map_take_batch(int fd, size_t key_size, size_t value_size, std::vector<unsigned char>& keys,
                            std::vector<unsigned char>& values, size_t& n) {
  // A hash map's batch is whole buckets: a bucket longer than `chunk` gives ENOSPC,
  // and the call is repeated with room for more.
  uint32_t chunk = 4096, in = 0, out = 0;
  bool first = true;
  for (;;) {
    keys.resize((n + chunk) * key_size);
    values.resize((n + chunk) * value_size);
    uint32_t count = chunk;
    errno = 0;
    int r = bpf_lookup_and_delete_batch(fd, first ? nullptr : &in, &out, keys.data() + n * key_size,
                                        values.data() + n * value_size, &count);
    int err = r == 0 ? 0 : errno ? errno : -r;
    if (r != 0 && err == ENOSPC && count == 0 && chunk < (1u << 20)) {
      chunk *= 2;
      continue;
    }
    if (r != 0 && err != ENOENT) {
      if (first && n == 0) return false;  // cannot batch (old kernel, map type)
      count = 0;                          // taken so far is kept; the caller takes the rest
    }
    n += count;
    first = false;
    in = out;
    if (r != 0) break;  // ENOENT: the last bucket was read
  }
  keys.resize(n * key_size);
  values.resize(n * value_size);
  return true;
}

uint64_t CounterDeltas::delta(size_t slot, uint64_t cumulative) {
  if (slot >= prev_.size()) prev_.resize(slot + 1, 0);
  uint64_t d = cumulative >= prev_[slot] ? cumulative - prev_[slot] : cumulative;
  prev_[slot] = cumulative;
  return d;
}

}  // namespace bpfdiag
