// Reverse data-symbol lookup: where a named global (e.g. `static pthread_mutex_t
// cache_lock`) lives in a running process, or in the kernel (/proc/kallsyms data
// symbols). Used to turn a lock filter like `-L cache_lock` into addresses.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

// Runtime addresses of ELF OBJECT symbols named `name` in every file `pid` maps
// (.symtab and .dynsym, load bias applied; C++ names match demangled, so
// `static pthread_mutex_t cache_lock` (_ZL10cache_lock) is found as cache_lock).
// Empty when there is none.
std::vector<uint64_t> find_user_data_symbol(uint32_t pid, const std::string& name);
// Same for one ELF file given its mapping (exposed for tests): `map_start`,
// `map_offset` of one file-backed mapping of the file.
std::vector<uint64_t> find_data_symbol_in_file(const std::string& path, const std::string& name,
                                               uint64_t map_start, uint64_t map_offset);
// Kernel data symbols (kallsyms types d/D/b/B/r/R) named `name`.
std::vector<uint64_t> find_kernel_data_symbol(const std::string& name);
// Kernel data symbol covering `addr` exactly (no offset): "" if none.
std::string kernel_data_symbol_at(uint64_t addr);

}  // namespace bpfdiag
