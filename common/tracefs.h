// The process's view of the kernel's tracing files: a private mount namespace, tracefs
// mounted in it when the host has not, tracepoint checks, preflight, and the
// compile-time /proc/kallsyms stand-in. No libbcc here.
#pragma once
#include <string>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

// Must run first in main(), before any thread exists (tool_main does): as root, moves
// the process into a private mount namespace and mounts tracefs there if the host has
// not (nothing is left behind on the host). The namespace also lets BpfSession::load
// hide the 120k-line /proc/kallsyms from libbcc's compiler, which cuts startup ~40%.
Status ensure_tracefs();
// True when ensure_tracefs() found tracefs unmounted on the host and mounted it in
// this process's private mount namespace (doctor reports the host's state).
bool tracefs_mounted_privately();
// True when this process runs in the private mount namespace ensure_tracefs() made.
bool private_mount_namespace();
// Root tracing directory in use ("/sys/kernel/tracing" or the debugfs one), or "".
std::string tracefs_dir();
// True if tracepoint "category:name" exists.
bool tracepoint_exists(const std::string& tp);

// Root, BTF and the listed tracepoints. The error is one line with a hint.
Status preflight(const std::vector<std::string>& tracepoints);

// libbcc's compiler (BFrontendAction::DoMiscWorkAround) looks up one kernel symbol,
// bpf_probe_read_kernel, to decide whether the kernel has that helper, and to do so
// it parses all of /proc/kallsyms: ~40% of a compile here. In our private mount
// namespace a one-line stand-in answers the same question (the helper exists from
// 5.5 on) during the compile only; the real file is back before anything else runs.
class KallsymsStandIn {
 public:
  KallsymsStandIn(const std::string& dir, unsigned version_code);
  ~KallsymsStandIn();
  KallsymsStandIn(const KallsymsStandIn&) = delete;
  KallsymsStandIn& operator=(const KallsymsStandIn&) = delete;

 private:
  std::string path_;
  bool active_ = false;
};

}  // namespace bpfdiag
