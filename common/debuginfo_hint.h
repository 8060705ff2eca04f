// When a traced binary is stripped, say once how to get names for it: the Debian
// -dbgsym package that ships its build-id debug file.
#pragma once
#include <optional>
#include <string>

namespace bpfdiag {

struct ElfNames {
  bool has_symtab = false;  // .symtab or Go's .gopclntab: function names beyond .dynsym
  std::string build_id;     // hex, "" if none
};

// Reads the section headers of an ELF file (opened non-blocking, regular files only,
// size-capped: the path may come from a traced process). nullopt if not ELF64.
std::optional<ElfNames> read_elf_names(const std::string& path);

// The Debian package that owns `path` (searching `dpkg_info`/*.list), or "".
std::string dpkg_owner(const std::string& path, const std::string& dpkg_info = "/var/lib/dpkg/info");

// For the binary opened at `open_path` (e.g. /proc/PID/exe) and installed at
// `path` (its name, e.g. /usr/sbin/mariadbd): "" when it has a .symtab or its
// build-id debug file is installed under `debug_root`; else one line such as
// "mariadbd is stripped: for function names install mariadb-server-core-dbgsym
// (from Debian's debug archive, ...)", ending ", or set DEBUGINFOD_URLS to a
// debuginfod server" when that is unset (common/debuginfod.h).
std::string debuginfo_hint(const std::string& open_path, const std::string& path,
                           const std::string& debug_root = "/usr/lib/debug",
                           const std::string& dpkg_info = "/var/lib/dpkg/info");

}  // namespace bpfdiag
