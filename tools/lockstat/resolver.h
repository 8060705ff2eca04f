// lockstat's name resolution: lock symbols, stacks and call sites for the report.
#pragma once
#include <bcc/BPF.h>

#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "common/stack_reader.h"
#include "common/stacks.h"
#include "common/symbolize.h"
#include "common/unwind_maps.h"
#include "tools/lockstat/lockstat.h"

namespace lockstat {

using bpfdiag::SymbolInfo;
using bpfdiag::Symbolizer;

// Names for the report, from the symbolizer and the BPF stack maps (common/stack_reader).
class Resolver {
 public:
  explicit Resolver(const bpfdiag::BpfSession& session) : session_(session) {}
  Symbolizer& sym() { return sym_; }

  // Futex mode's user-stack scans (stack id -> words at the user sp), per report.
  void set_scans(std::map<int32_t, std::vector<uint64_t>> scans) { scans_ = std::move(scans); }

  // --unwind=dwarf: the unwound user stacks (uw_stacks), per report.
  void set_unwound(bpfdiag::UnwoundStacks u) { unwound_ = std::move(u); }

  // Each CPU's run-queue lock address (BPF rq_locks map), named rq_lock as perf does.
  void set_rq_locks(std::set<uint64_t> a) { rq_locks_ = std::move(a); }

  Names names();

  // Call at the start of every report: the stack addresses cached for the previous one
  // go (stack ids are reused once the BPF stack table is cleared, and a long run under
  // a fork storm would otherwise keep one entry per process and stack forever).
  // The stack maps are read again at the first stack of the report (after the drain,
  // so the overflow map holds every stack of the waits drained).
  void new_report() {
    cache_.clear();
    stacks_.reset();
  }
  size_t cached_stacks() const { return cache_.size(); }

 private:
  static bool in_libc(const SymbolInfo& s) {
    const std::string& m = s.module;
    return m.find("libc.so") != std::string::npos || m.find("libpthread") != std::string::npos ||
           m.find("ld-linux") != std::string::npos;
  }
  // The innermost word of the scanned user stack that looks like a return address
  // into code outside the C library: inside a known function but not at its first
  // byte, and not a pointer to a global (the mutex's own address is usually saved on
  // the stack too; the code lookup alone would attribute it to the sizeless _fini
  // that precedes the data segments).
  // Instrumentation wrappers (psi_mutex_lock, PyThread_acquire_lock_timed, ...) are
  // skipped: the site is the code that wanted the lock.
  SymbolInfo scanned_caller(const lockstat_key& k) {
    auto it = scans_.find(k.stack_id);
    if (k.stack_id < 0 || it == scans_.end()) return {};
    SymbolInfo wrapper;
    for (uint64_t w : it->second) {
      if (w < 4096) continue;
      SymbolInfo s = sym_.lookup_user(k.pid, w);
      if (!s.found || s.offset == 0 || in_libc(s) || s.name == "_fini" || s.name == "_init") continue;
      if (sym_.lookup_data(k.pid, w).found) continue;
      if (is_wrapper_frame(s.name)) {
        if (!wrapper.found) wrapper = s;
        continue;
      }
      return s;
    }
    return wrapper;  // only wrappers within reach: better than nothing
  }
  // The stack's addresses, innermost first: from the stack table, or unwound
  // (--unwind=dwarf).
  const std::vector<uint64_t>& addrs(const lockstat_key& k) {
    auto key = std::make_tuple(k.kind == LS_KIND_KERNEL ? 0u : k.pid, k.stack_id, k.user_hash);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    if (!k.user_hash && !stacks_) stacks_ = bpfdiag::StackReader::from_session(session_);
    return cache_[key] = k.user_hash ? bpfdiag::unwound_lookup_addrs(unwound_, k.user_hash)
                                     : stacks_->addrs(k.stack_id);
  }
  // The marker frame of a stack the BPF side could not store, or that was gone from
  // the stack maps when read ("" otherwise, and for stacks not taken: -1, unsampled).
  // A site found from such a stack is marked by it, never a silent guess.
  std::string missing_marker(const lockstat_key& k) {
    if (k.user_hash || k.stack_id == -1 || k.stack_id == LS_STACK_UNSAMPLED) return "";
    auto kind = bpfdiag::stack_id_kind(k.stack_id);
    if (kind == bpfdiag::StackIdKind::None) return "";
    if (kind != bpfdiag::StackIdKind::Lost && !addrs(k).empty()) return "";
    return k.kind == LS_KIND_KERNEL ? "[Missed Kernel Stack]" : "[Missed User Stack]";
  }
  // The marker frame of an unwound stack that stopped early ("" otherwise).
  std::string marker(const lockstat_key& k) const {
    auto u = k.user_hash ? unwound_.find(k.user_hash) : unwound_.end();
    return u == unwound_.end() ? "" : bpfdiag::unwind_marker(u->second.status);
  }
  Symbolizer sym_;
  const bpfdiag::BpfSession& session_;
  std::optional<bpfdiag::StackReader> stacks_;  // this report's, read at first use
  std::map<std::tuple<uint32_t, int32_t, uint64_t>, std::vector<uint64_t>> cache_;
  bpfdiag::UnwoundStacks unwound_;
  std::map<int32_t, std::vector<uint64_t>> scans_;
  std::set<uint64_t> rq_locks_;
};


}  // namespace lockstat
