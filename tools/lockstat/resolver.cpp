#include "tools/lockstat/resolver.h"

#include "common/data_symbols.h"
#include "common/go_runtime.h"

namespace lockstat {
using namespace bpfdiag;

Names Resolver::names() {
    Names n;
    n.lock_symbol = [this](uint32_t pid, uint64_t addr) -> std::string {
      if (pid == 0) return rq_locks_.count(addr) ? "rq_lock" : kernel_data_symbol_at(addr);
      SymbolInfo s = sym_.lookup_data(pid, addr);
      return s.found ? format_data_symbol(s) : "";
    };
    n.frames = [this](const lockstat_key& k) {
      std::vector<std::string> out;
      if (k.kind == LS_KIND_KERNEL) {
        for (uint64_t a : addrs(k)) out.push_back(sym_.kernel(a));
        if (auto m = missing_marker(k); !m.empty()) out.push_back(m);
        return out;
      }
      if (k.kind == LS_KIND_GO) {
        // the walk at gopark's park point skips gopark's caller (its frame is not set
        // up yet): [rsp], put back after gopark
        const auto& a = addrs(k);
        for (size_t i = 0; i < a.size(); ++i) {
          out.push_back(format_symbol(sym_.lookup_user(k.pid, a[i]), false));
          if (i == 0 && k.caller) out.push_back(format_symbol(sym_.lookup_user(k.pid, k.caller), false));
        }
        if (a.empty() && k.caller) out.push_back(format_symbol(sym_.lookup_user(k.pid, k.caller), false));
        if (auto m = missing_marker(k); !m.empty()) out.push_back(m);
        return out;
      }
      // user: the frame-pointer walk, with the lock call's caller found by the stack
      // scan put back in front of the first frame outside the C library
      SymbolInfo caller = k.kind == LS_KIND_FUTEX ? scanned_caller(k) : SymbolInfo{};
      bool inserted = !caller.found;
      for (uint64_t a : addrs(k)) {
        SymbolInfo s = sym_.lookup_user(k.pid, a);
        if (!inserted && !in_libc(s)) {
          if (s.name != caller.name) out.push_back(format_symbol(caller, false));
          inserted = true;
        }
        out.push_back(format_symbol(s, false));
      }
      if (!inserted) out.push_back(format_symbol(caller, false));
      if (auto m = marker(k); !m.empty()) out.push_back(m);  // a stack cut short says so
      if (auto m = missing_marker(k); !m.empty()) out.push_back(m);  // and one not there
      return out;
    };
    n.site = [this](const lockstat_key& k, const std::vector<std::string>& frames) -> std::string {
      if (k.kind == LS_KIND_PTHREAD && k.caller) {
        // the probed call's caller, or past wrappers the first frame that is not one
        SymbolInfo s = sym_.lookup_user(k.pid, k.caller);
        if (!is_wrapper_frame(s.name)) return sym_.user(k.pid, k.caller, true);
        for (uint64_t a : addrs(k)) {
          SymbolInfo f = sym_.lookup_user(k.pid, a);
          if (f.found && !in_libc(f) && !is_wrapper_frame(f.name)) return format_symbol(f, true);
        }
        return sym_.user(k.pid, k.caller, true) + kUnplacedSite;
      }
      if (k.kind == LS_KIND_GO) {  // the program's code that waited: past the runtime and sync
        for (const auto& f : frames)
          if (!bpfdiag::is_go_runtime_frame(f) && f.rfind("[Missed", 0) != 0) return f;
        return frames.size() > 1 ? frames[1] : frames.empty() ? "" : frames.front();
      }
      if (k.kind == LS_KIND_KERNEL) {
        for (const auto& f : frames)
          if (!is_kernel_lock_frame(f)) return f;
        return frames.empty() ? "" : frames.front();
      }
      // futex: the caller of the lock function (fp mode: the stack scan's), else the
      // first named frame outside libc and wrappers (dwarf mode: the whole stack is
      // there; a stripped binary's unnamed helpers, e.g. mariadbd's inlined
      // mysql_mutex_lock, are skipped for the site as the scan skips them), else the
      // first frame outside libc
      SymbolInfo caller = scanned_caller(k);
      if (caller.found) return format_symbol(caller, true);
      for (bool named : {true, false})
        for (uint64_t a : addrs(k)) {
          SymbolInfo s = sym_.lookup_user(k.pid, a);
          if ((s.found || !named) && !in_libc(s) && !is_wrapper_frame(s.name)) return format_symbol(s, false);
        }
      return frames.empty() ? "" : frames.front();
    };
    return n;
  }

}  // namespace lockstat
