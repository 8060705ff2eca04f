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

uint64_t CounterDeltas::delta(size_t slot, uint64_t cumulative) {
  if (slot >= prev_.size()) prev_.resize(slot + 1, 0);
  uint64_t d = cumulative >= prev_[slot] ? cumulative - prev_[slot] : cumulative;
  prev_[slot] = cumulative;
  return d;
}

}  // namespace bpfdiag
