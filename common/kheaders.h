// The minimal kernel-header tree libbcc needs to compile our BPF programs on a
// machine without kernel headers (see shared GUIDE, "Compiling BPF without kernel
// headers"). Nothing here depends on kernel struct layouts: those come from BTF.
#pragma once
#include <string>

#include "common/result.h"

namespace bpfdiag {

// Writes the header shim (and the embedded bpf_sources/*.h) under `dir`.
// Kernel version macros come from `release` (uname -r).
Status write_header_shim(const std::string& dir, const std::string& release);

// LINUX_VERSION_CODE for a release string such as "6.18.44-fc": (6<<16)+(18<<8)+min(44,255).
unsigned kernel_version_code(const std::string& release);

}  // namespace bpfdiag
