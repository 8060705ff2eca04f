// A compiled BPF program set: each program's instructions and the definitions of the
// maps they use. libbcc compiles BPF C into one (compile_bpf_object); a cache keeps it
// so a later start skips the compiler (BpfObjectCache). Either way the maps are then
// created by create_maps and the programs' map references rewritten to them
// (relocate_maps), so a cached object and a fresh compile are loaded the same way.
//
// Why: libbcc runs clang and LLVM at every start (65-300 ms of the 70-400 ms a tool
// takes to attach here); the object they produce depends only on the BPF text, the
// cflags, libbcc and the running kernel, all of which are the cache key.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/embedded.h"
#include "common/result.h"

namespace bpfdiag {

struct BpfMapDef {
  std::string name;
  int type = 0;  // enum bpf_map_type
  uint32_t key_size = 0;
  uint32_t value_size = 0;
  uint32_t max_entries = 0;
  uint32_t flags = 0;
  int32_t fd = -1;  // the fd the programs' instructions refer to (see relocate_maps)
};

struct BpfProgDef {
  std::string name;
  std::vector<uint8_t> insns;  // struct bpf_insn[], 8 bytes each
};

struct BpfObject {
  std::string license;
  uint32_t kern_version = 0;
  std::vector<BpfMapDef> maps;
  std::vector<BpfProgDef> progs;
};

// Compiles `text` with libbcc (no rw engine, no BTF unless the cflags ask for it).
// The maps libbcc created are returned as fresh fds in `fds` (same order as maps);
// the caller owns them. Compiler diagnostics go to stderr.
Result<BpfObject> compile_bpf_object(const std::string& text, const std::vector<std::string>& cflags,
                                     std::vector<int>& fds);

// Creates every map of `o` (no fd recorded in `o` is used); their fds, same order.
// On error the fds created so far are closed.
Result<std::vector<int>> create_maps(const BpfObject& o);

// Rewrites every map reference in the programs (ld_imm64 with BPF_PSEUDO_MAP_FD) from
// o.maps[i].fd to fds[i], then records fds[i] as o.maps[i].fd. An instruction naming an
// fd that is no map of `o` is an error (the object is then not loadable).
Status relocate_maps(BpfObject& o, const std::vector<int>& fds);

// Byte form for the cache; `key` is stored whole and must match on read.
std::string serialize_bpf_object(const BpfObject& o, const std::string& key);
// nullopt when the bytes are not a complete object for exactly this key.
std::optional<BpfObject> deserialize_bpf_object(const std::string& bytes, const std::string& key);

// The compiled-object cache: one file per key in a root-only directory,
// $BPFDIAG_CACHE_DIR or /var/cache/bpfdiag; BPFDIAG_CACHE=0 turns it off.
// Files are written whole (temporary file + rename) and read only when they and the
// directory belong to this user and nobody else can write them.
// What the cache is doing on this machine (doctor): its directory, whether the tools
// use it and why not, and what it holds.
struct BpfObjectCacheState {
  std::string dir;
  bool off = false;      // BPFDIAG_CACHE=0
  bool usable = false;   // the tools read and write it
  std::string why;       // when not usable: what is wrong with the directory
  uint64_t objects = 0;  // cached objects (files of the cache's own form)
  uint64_t bytes = 0;
};

// The suite's build as the caches key it: version, git describe and a hash of the
// sources (CMakeLists.txt), so a rebuild never reads what another build wrote.
const char* suite_build();

class BpfObjectCache {
 public:
  static BpfObjectCacheState state();
  // nullopt when caching is off or the directory is unusable (not ours, writable by
  // others, cannot be created): the tools then compile every time, as before.
  static std::optional<BpfObjectCache> open();
  // The key of a compile: everything the preprocessor and compiler read from us and
  // the machine: the program text, the cflags (the plan's rendered defines), every
  // embedded BPF header (`headers`, a null-named entry ends it) and the header shim,
  // in full, the suite's build (version, git describe, source hash), libbcc's
  // version, the kernel release and build, possible CPUs, and the key's format.
  static std::string key(const std::string& text, const std::vector<std::string>& cflags,
                         const EmbeddedFile* headers = kEmbeddedBpfHeaders);

  // Every file operation is relative to the directory's descriptor, opened and checked
  // once in open(): the path is never walked again (a directory swapped for a link or
  // another one after the check is not followed).
  std::optional<BpfObject> get(const std::string& key) const;
  void put(const std::string& key, const BpfObject& o) const;
  void remove(const std::string& key) const;
  const std::string& dir() const { return dir_; }
  // A file of the cache's directory other than an object (`name`: a plain file name),
  // read under the same rules (ours, nobody else may write it, at most `max` bytes),
  // written whole (temporary file + rename).
  std::optional<std::string> read_file(const std::string& name, size_t max) const;
  bool write_file(const std::string& name, const std::string& bytes) const;

 private:
  BpfObjectCache(std::string dir, std::shared_ptr<const int> fd) : dir_(std::move(dir)), fd_(std::move(fd)) {}
  static std::string name_for(const std::string& key);
  std::string dir_;
  std::shared_ptr<const int> fd_;  // the directory (O_DIRECTORY|O_NOFOLLOW), closed with the last copy
};

}  // namespace bpfdiag
