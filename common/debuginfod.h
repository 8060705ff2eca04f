// Debug files by build-id from debuginfod servers, for stripped binaries (issue 24).
//
// When DEBUGINFOD_URLS is set (space-separated server URLs, as for gdb and perf), a
// file the Symbolizer loads with no .symtab and no local /usr/lib/debug/.build-id debug
// file is looked up by its build-id through libdebuginfod:
//  - libdebuginfod.so.1 is dlopen'ed on first use: the tools run without it (the
//    package recommends libdebuginfod1 rather than depending on it and its libcurl);
//  - off the critical path: one background thread asks for the files one at a time,
//    in the order they were requested (a process's executable first), while the tool
//    traces. A report that needs a file still being fetched waits for it, but all
//    the reports of a run together wait at most kDebuginfodWaitNs, and not at all after
//    a stop signal; frames of a file not fetched by then stay addresses, and the lookup
//    is counted as failed with one warning line. A lookup the report stopped waiting
//    for goes on in the background (a later interval report gets its names) until the
//    tool exits, when it is cancelled at once;
//  - libdebuginfod's own limits apply (DEBUGINFOD_TIMEOUT, DEBUGINFOD_MAXTIME,
//    DEBUGINFOD_MAXSIZE, DEBUGINFOD_RETRY_LIMIT); a download is also cancelled once it
//    passes DEBUGINFOD_MAXSIZE or kMaxElfSize, and at most kMaxDebuginfodLookups
//    build-ids are asked for per run;
//  - the cache is $DEBUGINFOD_CACHE_PATH, else /var/cache/bpfdiag/debuginfod, and is
//    used only when every directory of its path is owned by root (or this user), none
//    is a symbolic link, none but sticky ones (/tmp) can be written by others, and the
//    cache itself is private (mode 0700; created so when missing). Otherwise no lookup
//    is made and the tool says why, once;
//  - the file libdebuginfod returns is hostile input: reopened by its path in that
//    cache as untrusted (common/untrusted_file.h: no symbolic link, regular file, size
//    cap), read by the suite's ELF reader (header caps), and used only when its
//    build-id is the one asked for.
// Every outcome is said once per build-id on stderr ("PROG: debuginfod: ...") and
// counted by the Symbolizer (Stats::debuginfod_files / debuginfod_failed; the stack
// tools' data_quality).
//
// PUBLIC API:
//   Debuginfod* d = Debuginfod::get();   // nullptr: DEBUGINFOD_URLS unset or empty
//   d->request(build_id, "/usr/bin/prog");  // queued (false: not looked up; said why)
//   auto r = d->result(build_id, wait);  // nullopt: not finished (within the budget)
//   auto e = open_debuginfod_file(*r, build_id);  // the verified ELF file, or why not
//   debuginfod_config()                  // URLs, cache dir and whether it is usable (doctor)
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/elf_file.h"

namespace bpfdiag {

// All reports of one run together wait at most this long for lookups (wall time).
constexpr uint64_t kDebuginfodWaitNs = 4000000000ULL;
// Build-ids asked for per run at most (a system-wide run maps many stripped files).
constexpr size_t kMaxDebuginfodLookups = 64;

// What DEBUGINFOD_URLS / DEBUGINFOD_CACHE_PATH say, and whether the cache can be used.
struct DebuginfodConfig {
  std::string urls;       // DEBUGINFOD_URLS ("" : lookups off)
  std::string cache_dir;  // $DEBUGINFOD_CACHE_PATH or the default
  bool cache_usable = false;
  bool cache_missing = false;  // !create and it does not exist (the tools create it)
  std::string cache_why;       // when not usable: why ("is writable by others", ...)
};
// Reads the environment and checks the cache (created when missing and `create`).
DebuginfodConfig debuginfod_config(bool create = true);
// The default cache directory (root's own).
constexpr const char* kDebuginfodCacheDir = "/var/cache/bpfdiag/debuginfod";

// The checks of the cache directory, on their own: `dir` (absolute) with every parent
// owned by root or `uid`, no symbolic link on the way, parents not writable by group or
// others unless sticky, and `dir` itself owned by `uid` with mode 0700 (created so when
// missing and `create`). "" when usable, else why not.
std::string check_private_dir(const std::string& dir, uid_t uid, bool create);

struct DebuginfodOutcome {
  bool found = false;
  std::string path;   // the file in the cache (found)
  std::string error;  // why not: "not found on the server", "timed out", ...
};

class Debuginfod {
 public:
  // The run's client, started on first use; nullptr when DEBUGINFOD_URLS is unset or
  // empty, or after a fork (the thread stays with the parent).
  static Debuginfod* get();

  // Queues a lookup of `build_id` (lower-case hex) for `name` (messages). False when it
  // is not looked up: the cache is unusable or the run's cap is reached (said once).
  // Asking twice for one build-id queues it once.
  bool request(const std::string& build_id, const std::string& name);
  // The outcome of the lookup of `build_id`: nullopt while it runs. With `wait`, first
  // waits for it as long as the run's wait budget lasts and no stop signal came.
  std::optional<DebuginfodOutcome> result(const std::string& build_id, bool wait);
  // The run's wait budget left (ns).
  uint64_t wait_left_ns() const;
  const std::string& urls() const;

  ~Debuginfod();
  Debuginfod(const Debuginfod&) = delete;
  Debuginfod& operator=(const Debuginfod&) = delete;

  struct Impl;

 private:
  Debuginfod();
  std::unique_ptr<Impl> impl_;
};

// The file of a found outcome opened as untrusted input and read by the ELF reader,
// accepted only when its build-id is `build_id`; nullptr with *why set otherwise.
std::unique_ptr<ElfFile> open_debuginfod_file(const DebuginfodOutcome& o, const std::string& build_id,
                                              std::string* why);

// "prog (build-id 0123456789abcdef...)": a looked-up file in messages.
std::string debuginfod_file_label(const std::string& name, const std::string& build_id);

// "PROG: debuginfod: TEXT" on stderr, once per key, at most 20 lines per run (then one
// line saying the rest are only counted).
void debuginfod_note(const std::string& key, const std::string& text);

}  // namespace bpfdiag
