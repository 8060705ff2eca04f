// lockstat: lock contention across user space (futex waits or pthread uprobes) and
// the kernel (lock:contention_begin/end), ranked per lock with identity and call sites.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "common/histogram.h"
#include "common/report.h"
#include "common/result.h"
#include "common/runloop.h"

extern "C" {
#include <linux/types.h>
#include "lockstat_shared.h"
}

namespace lockstat {

struct Config {
  bool help = false;
  bool json = false;
  bool csv = false;
  bool ebpf = false;
  bool threads_view = false;  // -t: one row per thread
  bool timestamp = false;     // -T
  bool hist = false;          // -H: per-lock histograms
  bool uprobes = false;       // --uprobes: exact pthread mode
  bool kernel_only = false;   // -K
  bool user_only = false;     // -U
  bool verbose = false;       // -v
  std::vector<uint32_t> pids;            // -p
  std::vector<uint32_t> tids;            // --tid
  std::vector<uint64_t> lock_addrs;      // -L 0x...
  std::vector<std::string> lock_names;   // -L name
  uint64_t min_wait_ns = 0;              // -m
  std::string sort = "total";            // -k
  std::string fields;                    // -F
  size_t entries = 10;                   // -E (0: all)
  size_t top = 3;                        // -s: waiters and call sites shown per lock
  bpfdiag::Schedule schedule;
};

extern const char kHelp[];

bpfdiag::Result<Config> parse_args(int argc, char** argv);

std::string bpf_text();
// Mode, filter and map-size defines (plus optional BTF offsets when `btf` is true).
bpfdiag::Result<std::vector<std::string>> bpf_cflags(const Config& c, bool btf = true);

// --- data model (independent of BPF, so the report is unit-testable) --------------

struct RawWait {
  lockstat_key key;
  lockstat_val val;
};

struct Snapshot {
  std::vector<RawWait> waits;
  std::vector<std::pair<lockstat_hkey, uint64_t>> hist;
  std::map<uint32_t, std::string> comms;  // tid -> comm
  bpfdiag::DataQuality dq;
};

// Name lookups the aggregation needs; the real ones come from the symbolizer.
struct Names {
  // Lock symbol for a user (pid != 0) or kernel (pid == 0) address; "" if none.
  std::function<std::string(uint32_t pid, uint64_t addr)> lock_symbol;
  // Symbolized frames for a key, innermost first (user or kernel as the kind says).
  std::function<std::vector<std::string>(const lockstat_key&)> frames;
  // Call site for a key: the lock call's caller (pthread), the first frame outside
  // libc (futex) or outside the kernel's lock functions (kernel).
  std::function<std::string(const lockstat_key&, const std::vector<std::string>&)> site;
};

struct WaiterRow {
  uint32_t tid = 0;
  std::string comm;
  uint64_t contended = 0, total_ns = 0, max_ns = 0;
};

struct SiteRow {
  std::string site;
  std::vector<std::string> stack;  // innermost first
  uint64_t contended = 0, total_ns = 0;
};

struct LockRow {
  std::string layer;  // "user" or "kernel"
  std::string kind;   // futex-mutex, futex, futex-pi, pthread-mutex, spinlock, rwsem:W, ...
  uint32_t pid = 0;   // user: owning process; kernel: the waiters' process if only one
  std::string comm;
  uint64_t addr = 0;
  std::string symbol;  // "" when the address is not a symbol
  uint64_t contended = 0;  // waits (futex/kernel) or calls that blocked (pthread)
  uint64_t calls = 0;      // pthread: lock calls measured; else == contended
  uint64_t total_ns = 0, max_ns = 0;
  uint64_t p50_ns = 0, p95_ns = 0, p99_ns = 0;
  bpfdiag::Histogram hist;
  std::vector<WaiterRow> waiters;  // sorted by total wait
  std::vector<SiteRow> sites;      // sorted by total wait
  uint64_t avg_ns() const { return calls ? total_ns / calls : 0; }
  std::string name() const;        // symbol, or 0x-address
};

struct ThreadRow {
  uint32_t pid = 0, tid = 0;
  std::string comm;
  uint64_t contended = 0, calls = 0, total_ns = 0, max_ns = 0;
  uint64_t p50_ns = 0, p95_ns = 0, p99_ns = 0;
  size_t locks = 0;
  std::string top_lock;
  bpfdiag::Histogram hist;
  uint64_t avg_ns() const { return calls ? total_ns / calls : 0; }
};

// Kernel contention_begin flags -> "spinlock", "rwsem:W", "mutex", ...
std::string kernel_lock_kind(uint32_t flags);
// User kind from the futex flags / pthread mode.
std::string user_lock_kind(uint32_t kind, uint32_t flags);
// True for kernel frames that belong to the lock implementation (skipped when
// choosing a kernel lock's call site).
bool is_kernel_lock_frame(const std::string& frame);
// One-line reading: convoy vs long hold.
std::string reading(const LockRow& r);

// Groups raw waits into locks (and threads), applying name filters from `c`.
std::vector<LockRow> build_locks(const Snapshot& s, const Names& n, const Config& c);
std::vector<ThreadRow> build_threads(const Snapshot& s, const Names& n, const Config& c);

// Renders one report (text, CSV or NDJSON) to `os`; with --csv the data-quality line
// goes to `err` (stderr in the tool) so the CSV stays machine-readable.
void render(std::ostream& os, std::ostream& err, const Config& c, const Snapshot& s, const Names& n,
            uint64_t interval_ns, bool final);

bpfdiag::Status run(const Config& c);

}  // namespace lockstat
