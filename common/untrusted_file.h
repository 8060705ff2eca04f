// Opening files a traced process can influence (perf maps, files named by
// /proc/PID/maps, ELF images, build-id debug files) as untrusted input.
//
// The tools run as root against processes of other users. Such a user controls
// /tmp/perf-PID.map and the paths its own mappings name, and can put a FIFO there (an
// open() would block forever), a symlink to /dev/zero (endless data) or to a device
// whose open() has side effects, or a huge file. Every such open goes through here:
//   - the path is resolved without following symbolic links (RESOLVE_NO_SYMLINKS; the
//     caller may allow kernel magic links such as /proc/PID/map_files/<range>),
//   - an O_PATH descriptor is checked with fstat first: only regular files, size caps,
//     optional owner rule (root or the target's uid, as perf does for perf maps),
//   - only then is the same inode opened for reading (via /proc/self/fd, no second
//     path walk), with O_RDONLY|O_NONBLOCK|O_CLOEXEC.
// A refused file gives ONE line on stderr per path for the life of the process:
//   "offcputime: warning: ignoring /tmp/perf-123.map: not a regular file"
// Missing files (ENOENT, process gone, EACCES) are not refusals and stay silent.
//
// PUBLIC API:
//   UntrustedPolicy pol{.max_size = kMaxElfSize};
//   auto r = open_untrusted("/tmp/perf-1.map", pol);   // or open_in_proc_root(pid, path, pol)
//   if (!r.file) { if (!r.refused.empty()) warn_refused(path, r.refused); }
//   read_capped_lines(*r.file, pol.max_size, kMaxLine, [](std::string_view l) {...});
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

typedef struct Elf Elf;

namespace bpfdiag {

constexpr uint64_t kMaxElfSize = 1ULL << 30;      // ELF images and debug files
constexpr uint64_t kMaxPerfMapSize = 64ULL << 20; // /tmp/perf-PID.map
constexpr size_t kMaxPerfMapLine = 4096;          // longer lines are skipped

// An open, validated regular file (closed on destruction).
class UntrustedFile {
 public:
  UntrustedFile(int fd, uint64_t size, uint64_t dev, uint64_t ino, int64_t mtime_ns, uid_t uid)
      : fd_(fd), size_(size), dev_(dev), ino_(ino), mtime_ns_(mtime_ns), uid_(uid) {}
  ~UntrustedFile();
  UntrustedFile(const UntrustedFile&) = delete;
  UntrustedFile& operator=(const UntrustedFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // at open time
  uint64_t dev() const { return dev_; }
  uint64_t ino() const { return ino_; }
  int64_t mtime_ns() const { return mtime_ns_; }
  uid_t uid() const { return uid_; }
  // The path it was opened by, for messages (a /proc/PID/map_files link: the path the
  // kernel names for it); set_name() when the caller knows a better one.
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  // "/proc/self/fd/N": hands this exact inode to code that wants a path (libbcc,
  // the uprobe API) without a second walk of an attacker-controlled path.
  std::string fd_path() const;
  // Identity for caches: "dev:ino:mtime:size".
  std::string identity() const;

 private:
  int fd_;
  uint64_t size_, dev_, ino_;
  int64_t mtime_ns_;
  uid_t uid_;
  std::string name_;
};

struct UntrustedPolicy {
  uint64_t max_size = kMaxElfSize;
  // Follow symbolic links (the last component included). Only for names the target
  // does not control (kernel magic links like /proc/PID/map_files/..., /proc/PID/exe,
  // root-owned directories like /usr/lib/debug).
  bool follow_links = false;
  // Accept only files owned by root or by this uid (perf maps).
  std::optional<uid_t> owner;
};

struct UntrustedOpen {
  std::shared_ptr<UntrustedFile> file;  // null when not opened
  std::string refused;  // non-empty: the file exists but breaks the policy (warn about it)
  int err = 0;          // errno of an ordinary failure (ENOENT, EACCES, ...): stay silent
};

// Opens `path` under `pol`.
UntrustedOpen open_untrusted(const std::string& path, const UntrustedPolicy& pol);
// Opens absolute `path` as process `pid` sees it: resolved inside /proc/PID/root
// (RESOLVE_IN_ROOT), so neither ".." nor a symlink leaves the process's root.
UntrustedOpen open_in_proc_root(uint32_t pid, const std::string& path, const UntrustedPolicy& pol);

// The file process `pid` (0: this process) maps at `range` ("START-END" in hex, as in
// /proc/PID/maps; "" for none): its /proc/PID/map_files entry, the very inode mapped,
// deleted or replaced or not, so a path swapped meanwhile cannot matter. When that entry
// cannot be opened (gone, no range; not when it is refused: a mapped device or an
// oversized file) and `path` is given, the file at `path` as the process sees it
// (open_in_proc_root; this process: the path itself), no link followed. A " (deleted)"
// suffix on `path` is ignored. The file is named `path` in messages when it is given.
UntrustedOpen open_mapping(uint32_t pid, const std::string& range, const std::string& path);
// `path` without the " (deleted)" /proc/PID/maps appends to a file since removed.
std::string without_deleted_suffix(const std::string& path);
// "START-END" in hex: a mapping's range as /proc/PID/map_files names it.
std::string map_range(uint64_t start, uint64_t end);

// "PROG: warning: ignoring PATH: REASON" on stderr, once per PATH per process
// (returns false when it was already printed). PROG is the tool's name.
bool warn_refused(const std::string& path, const std::string& reason);
// Same line with a separate de-duplication key (e.g. "3 lines of PATH", key PATH#lines).
bool warn_refused_keyed(const std::string& key, const std::string& what, const std::string& reason);
// Shorthand: warns when r.refused is set.
void warn_if_refused(const std::string& path, const UntrustedOpen& r);

// A libelf handle (ELF_C_READ, released with elf_end) of the ELF file `f`, opened only
// after check_elf_headers (common/elf_file.h) accepted its headers; nullptr when `f` is
// not an ELF file or was refused (then one warning line per file, counted in
// elf_files_refused()). The one way the suite hands an untrusted file to libelf
// (implemented in common/elf_file.cpp).
Elf* open_elf_untrusted(const UntrustedFile& f);

// Reads at most `max_bytes` of `f` from its start and calls `line` for each line
// (without '\n'; a final unterminated line included). Lines longer than `max_line`
// are skipped and counted; returns that count. Never blocks on a regular file.
size_t read_capped_lines(const UntrustedFile& f, uint64_t max_bytes, size_t max_line,
                         const std::function<void(std::string_view)>& line);

// The directory `dir` (absolute) as process `pid` sees it, resolved inside its root
// without following any link: an O_PATH descriptor to create or look up names in
// (a JVM's /tmp); -1 with errno when it cannot be opened so.
int open_dir_in_proc_root(uint32_t pid, const std::string& dir);

// Real and effective uid of a process (from /proc/PID/status); nullopt when gone.
struct ProcUids {
  uid_t real, effective;
};
std::optional<ProcUids> process_uids(uint32_t pid);

}  // namespace bpfdiag
