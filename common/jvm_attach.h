// HotSpot's attach mechanism, for one request: a JVM's perf map. Java frames are JIT
// code, which no ELF file names; HotSpot (JDK 17+) writes /tmp/perf-PID.map (address,
// size, method) on request, as `jcmd PID Compiler.perfmap` asks, without a restart or
// perf-map flags. The stack tools' --jvm-perfmap makes that request before tracing.
//
// The JVM is another user's process: everything under its /tmp is resolved inside its
// root without following links; the attach socket must be a socket owned by the JVM's
// user; the trigger file is created (never opened if it exists) and removed; SIGQUIT,
// which would end a process that is not a JVM, is sent only to one that maps
// libjvm.so; every wait is bounded.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "common/proc.h"
#include "common/result.h"

namespace bpfdiag {

// What the attach mechanism needs of process `pid`, from /proc/PID/status (doctor -p
// reports the same): effective uid and gid, its PID in its own namespace, whether it
// handles SIGQUIT. nullopt when the process is gone or the file is malformed.
struct JvmIds {
  uid_t uid = 0;
  gid_t gid = 0;
  uint32_t nspid = 0;  // its PID in its own PID namespace (names its files)
  bool catches_sigquit = false;  // SigCgt: a handler is installed (else SIGQUIT kills it)
};
std::optional<JvmIds> jvm_ids(uint32_t pid);

// The mapping of libjvm.so with the lowest file offset in process `pid`'s
// /proc/PID/maps (a HotSpot JVM); nullopt when none.
std::optional<MapsLine> libjvm_mapping(uint32_t pid);
// True when process `pid` maps a libjvm.so (a HotSpot JVM).
bool is_hotspot_jvm(uint32_t pid);

// Asks JVM `pid` to write its perf map (Compiler.perfmap). Waits at most `timeout_ms`
// for the attach listener to start and the answer to come. The map is
// /tmp/perf-NSPID.map in the JVM's mount namespace (NSPID: its PID there).
Status request_jvm_perfmap(uint32_t pid, int timeout_ms = 5000);

// --jvm-perfmap for `tool`: asks every JVM among `pids` (each at most 5 s); a failure,
// or a PID that is no JVM, is a warning line on stderr, not an error.
void request_jvm_perfmaps(const char* tool, const std::vector<uint32_t>& pids);

}  // namespace bpfdiag
