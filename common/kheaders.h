// The minimal kernel-header tree libbcc needs to compile our BPF programs on a
// machine without kernel headers (see shared GUIDE, "Compiling BPF without kernel
// headers"). Nothing here depends on kernel struct layouts: those come from BTF.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

// The header shim's files for kernel `release` (path under the shim, text), without
// the embedded bpf_sources/*.h: what write_header_shim writes, and part of the
// compiled-object cache key.
std::vector<std::pair<std::string, std::string>> header_shim_files(const std::string& release);

// Writes the header shim (and the embedded bpf_sources/*.h) under `dir`.
// Kernel version macros come from `release` (uname -r).
Status write_header_shim(const std::string& dir, const std::string& release);

// The directory temp files go under: $TMPDIR when it names an existing directory by an
// absolute path, else /tmp.
std::string temp_root();

// The header shim's private directory, $TMPDIR/bpfdiag-kheaders-PID-START-XXXXXX (PID
// and start time of its creator): removed by the destructor, by a stop signal before
// the run loop (see register_temp_paths), and, after a SIGKILL, by the next tool that
// starts (sweep_stale_header_dirs), which can tell its creator is gone.
class HeaderDir {
 public:
  static Result<std::unique_ptr<HeaderDir>> create(const std::string& release);
  ~HeaderDir();
  const std::string& path() const { return path_; }
  HeaderDir(const HeaderDir&) = delete;
  HeaderDir& operator=(const HeaderDir&) = delete;

 private:
  HeaderDir() = default;
  std::string path_;
};

// Removes header dirs under `root` whose creator is no longer running (only
// directories owned by this user). Returns how many were removed.
size_t sweep_stale_header_dirs(const std::string& root);

// LINUX_VERSION_CODE for a release string such as "6.18.44-fc": (6<<16)+(18<<8)+min(44,255).
unsigned kernel_version_code(const std::string& release);

}  // namespace bpfdiag
