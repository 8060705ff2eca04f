// lockstat internals shared by its source files (not part of the tool's API).
#pragma once
#include <string>

#include "common/table.h"
#include "tools/lockstat/lockstat.h"

namespace lockstat {

bpfdiag::Table<LockRow> lock_table(bool uprobes);
bpfdiag::Table<ThreadRow> thread_table(bool uprobes);

// Table configured from -S/--fields/-n.
template <typename Row>
bpfdiag::Status configure(bpfdiag::Table<Row>& t, const Config& c) {
  if (!c.fields.empty())
    if (auto st = t.set_fields(c.fields)) return st;
  if (auto st = t.set_sort(c.sort)) return st;
  t.set_entries(c.entries);
  return std::nullopt;
}

constexpr uint64_t kUs = 1000ULL, kMs = 1000000ULL, kSec = 1000000000ULL;

}  // namespace lockstat
