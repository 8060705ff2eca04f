// BpfSession's loading: compile with libbcc (or take the compiled object from the
// cache), create and relocate the maps, fill the ID filter maps, and load (verify)
// programs ahead of their attach.
#include <bcc/libbpf.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/bcc_stderr.h"
#include "common/bpf_object.h"
#include "common/bpf_session.h"
#include "common/kheaders.h"
#include "common/load_failure.h"
#include "common/timing.h"
#include "common/tracefs.h"

namespace bpfdiag {

// Loads (verifies) `fn` ahead of its attach: a refusal is then reported as the
// verifier's, not as an attach failure. The fd is kept for the session.
Result<int> BpfSession::load_program(const std::string& fn, int type) {
  auto done = prog_fds_.find(fn);
  if (done != prog_fds_.end()) return done->second;
  auto it = progs_.find(fn);
  if (it == progs_.end()) return Error{"cannot load " + fn + ": no such function in the BPF program"};
  const auto& insns = it->second;
  int fd = -1, err = 0;
  std::string printed;
  {
    StderrNoiseFilter quiet;
    // log_buf null: libbcc retries a refused load with the verifier log and prints it
    errno = 0;
    fd = bcc_prog_load(static_cast<enum bpf_prog_type>(type), fn.c_str(),
                       reinterpret_cast<const struct bpf_insn*>(insns.data()), static_cast<int>(insns.size()),
                       license_.c_str(), kern_version_, 0, nullptr, 0);
    if (fd < 0) {
      err = fd < -1 ? -fd : errno;  // libbpf returns -errno; older paths -1 and errno
      printed = quiet.captured();
      quiet.discard();  // the verifier log runs to thousands of lines: one line below
    }
  }
  if (fd < 0) {
    std::string line = load_failure_line(fn, printed, "Failed to load " + fn + ": " + std::strerror(err));
    if (from_cache_) {  // never the same refusal twice from a cached object: recompile next time
      if (auto cache = BpfObjectCache::open()) cache->remove(cache_key_);
      line += " (from the compiled-object cache, now removed: run again to recompile)";
    }
    return Error{line};
  }
  prog_fds_[fn] = fd;
  if (timing_on()) timing_mark("verify " + fn + " (" + std::to_string(verified_insns(fd)) + " insns)");
  return fd;
}

namespace {

// The flags every compile gets besides the plan's defines.
std::vector<std::string> compile_flags(std::vector<std::string> flags, bool keep_btf) {
  // libbcc always compiles with -g to emit BTF for the maps' key/value types, which
  // only its pretty-printers and spin-lock/kptr maps need; we use neither. -g0 (last
  // -g flag wins) saves clang's debug-info generation and libbcc's BTF processing and
  // loading. BPFDIAG_BPF_BTF=1 keeps it (e.g. for bpftool map dump with types), and
  // skips the cache (a cached object has no BTF).
  if (!keep_btf) flags.push_back("-g0");
  // libbcc's clang runs its -O2 pipeline and libbcc then runs LLVM's -O3 pipeline on
  // the result again: let only the second one run (-15% compile time, same code).
  flags.push_back("-Xclang");
  flags.push_back("-disable-llvm-passes");
  return flags;
}

// A fresh compile against a header shim written for it (and removed after); its maps
// are created in `fds`.
Result<BpfObject> compile_fresh(const std::string& text, std::vector<std::string> flags, std::vector<int>& fds) {
  struct utsname u;
  uname(&u);
  auto dir = HeaderDir::create(u.release);
  if (!dir) return Error{dir.error()};
  timing_mark("header shim written");
  setenv("BCC_KERNEL_SOURCE", dir.value()->path().c_str(), 1);
  flags.push_back("-I" + dir.value()->path() + "/include/bpfdiag");
  Result<BpfObject> compiled = Error{""};
  std::string diagnostics;
  {
    CompileExitRescue rescue;  // LLVM's backend exit(1)s on some errors: one line even then
    StderrNoiseFilter quiet;
    rescue.watch(&quiet);
    KallsymsStandIn fast_compile(dir.value()->path(), kernel_version_code(u.release));
    compiled = compile_bpf_object(text, flags, fds);
    if (!compiled) {
      diagnostics = quiet.captured() + "\n" + compiled.error();
      quiet.discard();
    }
  }
  timing_mark("libbcc compile + maps");
  dir.value().reset();  // the headers are not needed once compiled
  timing_mark("header shim removed");
  if (compiled) return compiled;
  // clang's diagnostics run to many lines; the first "error:" line says what broke
  std::string first = first_compile_error(diagnostics);
  if (first.empty()) first = first_line(compiled.error());
  return Error{"cannot compile BPF program: " + first + " (BPFDIAG_DEBUG=1 shows all diagnostics)"};
}

}  // namespace

Status BpfSession::fill_id_maps(const std::vector<IdMapFilter>& maps) {
  for (const auto& m : maps) {
    auto table = get_hash_table<uint32_t, uint8_t>(m.map);
    for (uint32_t id : m.ids) {
      auto ust = table.update_value(id, 1);
      if (!ust.ok()) return Error{"cannot fill the " + m.macro + " filter map: " + bcc_msg(ust)};
    }
  }
  return std::nullopt;
}

Status BpfSession::fill_cgroup_maps(const CgroupFilter& cg) {
  int dir = open(cg.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return Error{"cannot open cgroup " + cg.path + ": " + std::strerror(errno) + "; was it removed?"};
  struct stat st;
  if (fstat(dir, &st) != 0 || st.st_ino != cg.id) {
    close(dir);
    return Error{"cgroup " + cg.path + " was replaced since it was named (id " + std::to_string(cg.id) + ")"};
  }
  int zero = 0;
  int rc = bpf_update_elem(table(kCgroupArrayMap).fd, &zero, &dir, BPF_ANY);
  int err = errno;
  close(dir);  // the map holds its own reference to the cgroup
  if (rc != 0) return Error{"cannot fill the cgroup filter map: " + std::string(std::strerror(err))};
  uint64_t id = cg.id;
  if (bpf_update_elem(table(kCgroupIdMap).fd, &zero, &id, BPF_ANY) != 0)
    return Error{"cannot fill the cgroup id map: " + std::string(std::strerror(errno))};
  return std::nullopt;
}

Result<std::unique_ptr<BpfSession>> BpfSession::load(const BpfPlan& plan) {
  auto rendered = render_plan(plan);
  if (!rendered) return Error{rendered.error()};
  const std::string& text = rendered->text;
  timing_mark("(load start)");
  const bool keep_btf = std::getenv("BPFDIAG_BPF_BTF") != nullptr;
  const std::vector<std::string> flags = compile_flags(rendered->cflags, keep_btf);
  release_kernel_btf();  // offsets are in the plan by now: keep the peak RSS down

  std::optional<BpfObjectCache> cache;
  if (!keep_btf) cache = BpfObjectCache::open();
  const std::string key = cache ? BpfObjectCache::key(text, flags) : "";
  std::optional<BpfObject> obj;
  std::vector<int> fds;
  std::unique_ptr<BpfSession> s(new BpfSession());
  if (cache && (obj = cache->get(key))) {
    timing_mark("compiled object from cache");
    auto made = create_maps(*obj);
    if (!made) return Error{made.error()};
    fds = std::move(made.value());
    s->from_cache_ = true;
    s->cache_key_ = key;
  } else {
    auto compiled = compile_fresh(text, flags, fds);
    if (!compiled) return Error{compiled.error()};
    if (cache) {
      cache->put(key, compiled.value());
      timing_mark("compiled object cached");
    }
    obj = std::move(compiled.value());
  }
  // From here a fresh compile and a cached object are loaded the same way.
  if (auto st = relocate_maps(*obj, fds)) {
    for (int fd : fds) close(fd);
    return Error{"cannot load the compiled BPF program: " + st->message};
  }
  for (size_t i = 0; i < obj->maps.size(); ++i) {
    const auto& m = obj->maps[i];
    s->tables_.emplace(m.name, ebpf::TableDesc(m.name, ebpf::FileDesc(fds[i]), m.type, m.key_size, m.value_size,
                                               m.max_entries, static_cast<int>(m.flags)));
  }
  s->license_ = obj->license;
  s->kern_version_ = obj->kern_version;
  for (auto& p : obj->progs) s->progs_[p.name] = std::move(p.insns);
  // -p/-t lists too long for a constant expression: their maps, filled before any
  // program is attached, so no event is filtered against an empty map
  if (auto st = s->fill_id_maps(rendered->id_maps)) return Error{st->message};
  if (rendered->cgroup)
    if (auto st = s->fill_cgroup_maps(*rendered->cgroup)) return Error{st->message};
  timing_mark("id filter maps");
  return s;
}

}  // namespace bpfdiag
