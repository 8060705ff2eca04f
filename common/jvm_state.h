// HotSpot's own wait state: what jstack prints for a blocked Java thread ("waiting to
// lock <0x...> (a Foo)", "parking to wait for <0x...> (a
// java.util.concurrent.locks.ReentrantLock$NonfairSync)"), read by BPF at the moment
// the thread waits (bpf_sources/jvm.h), named here.
//
// Where a JVM keeps it is in the tables HotSpot exports for its Serviceability Agent
// (gHotSpotVMStructs, gHotSpotVMTypes, gHotSpotVMIntConstants in libjvm.so's dynamic
// symbols: type and field names with their offsets and sizes), so one reader serves
// JDK 17 to 25 without per-version tables. java.lang.Thread.parkBlocker is a Java
// field: its offset comes from the class's field descriptions (JDK 17's FieldInfo
// array, JDK 21+'s UNSIGNED5 field stream).
//
// The JVM is another user's process: its memory is read through /proc/PID/mem (bound
// to that process's address space when opened) with every count capped, every string
// bounded, and a budget of reads per call; libjvm.so is opened as untrusted input. A
// value read is only ever a name to print or an address for BPF to read the same
// process with.
//
// PUBLIC API:
//   JvmWaits j;
//   j.find(pids);                       // the JVMs among pids (every process when empty)
//   j.install(session);                 // jvm_layouts, jvm_threads (bpf_sources/jvm.h)
//   j.refresh(session);                 // new Java threads, JVMs that exited, (system-wide) new JVMs
//   j.class_chain(pid, klass);          // {"a.B$C", its superclasses...}
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/declared_waits.h"
#include "common/result.h"

extern "C" {
#include <linux/types.h>

#include "jvm_shared.h"
}

namespace bpfdiag {

class BpfSession;

// Caps on what a JVM's memory may make us read.
constexpr size_t kMaxJvmStructEntries = 20000;  // gHotSpotVMStructs: ~1,100 in JDK 17/25
constexpr size_t kMaxJvmThreads = 65536;        // one JVM's Java threads
constexpr size_t kMaxJvmClassDepth = 32;        // superclasses followed per class
constexpr size_t kMaxJvmFields = 4096;          // fields of java.lang.Thread looked at

// One JVM, described.
class JvmState {
 public:
  // The layout of JVM `pid` (a process that maps libjvm.so); an error naming what is
  // missing otherwise (not a HotSpot JVM, a JVM still starting, compact object headers).
  static Result<std::unique_ptr<JvmState>> open(uint32_t pid);
  ~JvmState();
  JvmState(const JvmState&) = delete;
  JvmState& operator=(const JvmState&) = delete;

  const jvm_layout& layout() const { return layout_; }
  // Its Java threads now: (tid, JavaThread address), at most kMaxJvmThreads.
  std::vector<std::pair<uint32_t, uint64_t>> threads() const;
  // The class at Klass address `klass`: its name as Java writes it
  // ("java.util.concurrent.locks.ReentrantLock$NonfairSync"), then its superclasses'
  // nearest first (java.lang.Object left out, unless it is the class). Empty when
  // unreadable. Cached.
  const std::vector<std::string>& class_chain(uint64_t klass);

  class Memory;  // bounded reads of the process's memory (jvm_state.cpp)

 private:
  JvmState() = default;
  std::unique_ptr<Memory> mem_;
  jvm_layout layout_{};
  uint64_t thread_list_ = 0;  // &ThreadsSMRSupport::_java_thread_list
  uint32_t list_length_ = 0, list_threads_ = 0, osthread_ = 0, thread_id_ = 0;
  uint32_t klass_name_ = 0, klass_super_ = 0, symbol_length_ = 0, symbol_body_ = 0;
  std::map<uint64_t, std::vector<std::string>> classes_;
  friend struct JvmReader;
};

// A Java thread's wait in jstack's words and its class: a monitor enter is a lock, an
// Object.wait() a condition; a park is what the `java:` rules say of the object's class
// (chain: the class, then its superclasses), else unclassified ("Java LockSupport.park
// (parking to wait for a com.example.Gate)").
DeclaredName java_wait_name(uint32_t jvm_kind, const std::vector<std::string>& chain);

// The JVMs a tool traces, kept in its BPF maps (bpf_sources/jvm.h).
class JvmWaits {
 public:
  // Describes the JVMs among `pids` (every process when empty: refresh then looks for
  // JVMs started since, every kRescanNs). A JVM that cannot be described is a warning
  // on stderr (with -v) and stays undescribed: its waits keep what the stack says.
  void find(const std::vector<uint32_t>& pids, bool verbose);
  // Writes every described JVM's layout and Java threads into the session's maps.
  Status install(BpfSession& s);
  // Java threads started since, JVMs gone (at most once a second; cheap otherwise);
  // system-wide, JVMs started since (every kRescanNs: a JVM maps libjvm.so after its
  // exec, so a new process cannot be judged when it appears).
  void refresh(BpfSession& s);
  static constexpr uint64_t kRescanNs = 10000000000ULL;
  // Class names (see JvmState::class_chain); empty for an unknown JVM or class.
  const std::vector<std::string>& class_chain(uint32_t pid, uint64_t klass);
  bool empty() const { return jvms_.empty(); }
  // offcputime: a period's declared identity (bpf_sources/jvm.h jvm_declared_raw) -> a
  // stable id (one per name), and its name; nullptr for ids that are not ours.
  static bool is_java_raw(uint64_t raw) { return raw >> 56 == JVM_DECL_TAG; }
  uint64_t declared_id(uint32_t pid, uint64_t raw);
  const DeclaredName* declared_name(uint64_t id) const;
  // For start records: each JVM described, its Java threads; what could not be.
  nlohmann::json start_fields() const;

 private:
  void put(BpfSession& s, uint32_t pid, JvmState& j);
  std::map<uint32_t, std::unique_ptr<JvmState>> jvms_;
  std::map<uint32_t, std::set<uint32_t>> tids_;  // Java threads written per JVM
  std::map<uint32_t, std::string> refused_;      // JVM pid -> why it is not described
  std::set<uint32_t> refused_or_found_;  // not looked at again
  bool everywhere_ = false;
  uint64_t last_rescan_ns_ = 0;
  std::set<uint32_t> gone_;
  std::map<std::pair<uint32_t, std::string>, uint64_t> ids_;  // (kind, words) -> id
  std::vector<DeclaredName> names_;                           // by id's index  // JVMs that exited (kept for their class names)
  uint64_t last_refresh_ns_ = 0;
  bool verbose_ = false;
};

}  // namespace bpfdiag
