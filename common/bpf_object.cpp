#include "common/bpf_object.h"

#include "common/kheaders.h"

#include <bcc/bcc_version.h>
#include <bcc/bpf_module.h>
#include <bcc/libbpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <ctime>
#include <random>

namespace bpfdiag {

Result<BpfObject> compile_bpf_object(const std::string& text, const std::vector<std::string>& cflags,
                                     std::vector<int>& fds) {
  fds.clear();
  // rw engine off: we read maps as raw structs, so libbcc need not JIT key/value
  // (s)printf helpers for every table (~tens of ms per load).
  ebpf::BPFModule mod(0, nullptr, false);
  std::vector<const char*> argv;
  for (const auto& f : cflags) argv.push_back(f.c_str());
  if (mod.load_string(text, argv.data(), static_cast<int>(argv.size())) != 0)
    return Error{"Unable to initialize BPF program"};
  BpfObject o;
  o.license = mod.license() ? mod.license() : "GPL";
  o.kern_version = mod.kern_version();
  for (size_t i = 0; i < mod.num_tables(); ++i) {
    BpfMapDef m;
    m.name = mod.table_name(i);
    m.type = mod.table_type(i);
    m.key_size = static_cast<uint32_t>(mod.table_key_size(i));
    m.value_size = static_cast<uint32_t>(mod.table_leaf_size(i));
    m.max_entries = static_cast<uint32_t>(mod.table_max_entries(i));
    m.flags = static_cast<uint32_t>(mod.table_flags(i));
    m.fd = mod.table_fd(i);
    o.maps.push_back(std::move(m));
  }
  for (size_t i = 0; i < mod.num_functions(); ++i) {
    const uint8_t* start = mod.function_start(i);
    if (!start) continue;
    BpfProgDef p;
    p.name = mod.function_name(i);
    p.insns.assign(start, start + mod.function_size(i));
    o.progs.push_back(std::move(p));
  }
  // The module closes its map fds when it goes: keep the maps with fds of our own.
  for (const auto& m : o.maps) {
    int fd = fcntl(m.fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      for (int f : fds) close(f);
      fds.clear();
      return Error{"cannot keep BPF map " + m.name + ": " + std::strerror(errno)};
    }
    fds.push_back(fd);
  }
  return o;
}

Result<std::vector<int>> create_maps(const BpfObject& o) {
  std::vector<int> fds;
  for (const auto& m : o.maps) {
    int fd = bcc_create_map(static_cast<enum bpf_map_type>(m.type), m.name.c_str(), static_cast<int>(m.key_size),
                            static_cast<int>(m.value_size), static_cast<int>(m.max_entries),
                            static_cast<int>(m.flags));
    if (fd < 0) {
      int err = errno;
      for (int f : fds) close(f);
      return Error{"cannot create BPF map " + m.name + ": " + std::strerror(err)};
    }
    fds.push_back(fd);
  }
  return fds;
}

Status relocate_maps(BpfObject& o, const std::vector<int>& fds) {
  if (fds.size() != o.maps.size()) return Error{"internal error: map count differs from the object's"};
  std::map<int32_t, int32_t> to;
  for (size_t i = 0; i < fds.size(); ++i) to[o.maps[i].fd] = fds[i];
  for (auto& p : o.progs) {
    if (p.insns.size() % sizeof(struct bpf_insn)) return Error{"program " + p.name + " is not whole instructions"};
    auto* insn = reinterpret_cast<struct bpf_insn*>(p.insns.data());
    size_t n = p.insns.size() / sizeof(struct bpf_insn);
    for (size_t i = 0; i < n; ++i) {
      if (insn[i].code != (BPF_LD | BPF_IMM | BPF_DW)) continue;
      if (insn[i].src_reg == BPF_PSEUDO_MAP_FD) {
        auto it = to.find(insn[i].imm);
        if (it == to.end())
          return Error{"program " + p.name + " refers to map fd " + std::to_string(insn[i].imm) +
                       ", which is no map of its object"};
        insn[i].imm = it->second;
      }
      ++i;  // ld_imm64 takes two instruction slots
    }
  }
  for (size_t i = 0; i < fds.size(); ++i) o.maps[i].fd = fds[i];
  return std::nullopt;
}

// --- byte form ---------------------------------------------------------------------

namespace {

const char kMagic[] = "BPFDIAG-OBJECT\n";

uint64_t fnv1a(const std::string& s, size_t n = std::string::npos) {
  uint64_t h = 1469598103934665603ULL;
  n = std::min(n, s.size());
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 1099511628211ULL;
  return h;
}

constexpr uint32_t kFormat = 2;  // 2: checksum at the end
constexpr uint32_t kMaxCount = 4096;  // maps or programs in one object

void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_str(std::string& s, const std::string& v) {
  uint64_t n = v.size();
  s.append(reinterpret_cast<const char*>(&n), sizeof n);
  s += v;
}

struct Reader {
  const std::string& b;
  size_t pos = 0;
  bool ok = true;
  bool take(void* out, size_t n) {
    if (!ok || b.size() - pos < n) return ok = false;
    std::memcpy(out, b.data() + pos, n);
    pos += n;
    return true;
  }
  uint32_t u32() {
    uint32_t v = 0;
    take(&v, sizeof v);
    return v;
  }
  std::string str() {
    uint64_t n = 0;
    if (!take(&n, sizeof n) || b.size() - pos < n) {
      ok = false;
      return "";
    }
    std::string v = b.substr(pos, n);
    pos += n;
    return v;
  }
};

}  // namespace

std::string serialize_bpf_object(const BpfObject& o, const std::string& key) {
  std::string s(kMagic);
  put_u32(s, kFormat);
  put_str(s, key);
  put_str(s, o.license);
  put_u32(s, o.kern_version);
  put_u32(s, static_cast<uint32_t>(o.maps.size()));
  for (const auto& m : o.maps) {
    put_str(s, m.name);
    for (uint32_t v : {static_cast<uint32_t>(m.type), m.key_size, m.value_size, m.max_entries, m.flags,
                       static_cast<uint32_t>(m.fd)})
      put_u32(s, v);
  }
  put_u32(s, static_cast<uint32_t>(o.progs.size()));
  for (const auto& p : o.progs) {
    put_str(s, p.name);
    put_str(s, std::string(p.insns.begin(), p.insns.end()));
  }
  s += "END\n";
  uint64_t sum = fnv1a(s);  // a damaged file is a miss, never a wrong program
  s.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  return s;
}

std::optional<BpfObject> deserialize_bpf_object(const std::string& bytes0, const std::string& key) {
  uint64_t sum = 0;
  if (bytes0.size() < sizeof sum) return std::nullopt;
  std::memcpy(&sum, bytes0.data() + bytes0.size() - sizeof sum, sizeof sum);
  if (fnv1a(bytes0, bytes0.size() - sizeof sum) != sum) return std::nullopt;
  const std::string bytes = bytes0.substr(0, bytes0.size() - sizeof sum);
  Reader r{bytes};
  char magic[sizeof kMagic - 1];
  if (!r.take(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0) return std::nullopt;
  if (r.u32() != kFormat || r.str() != key || !r.ok) return std::nullopt;
  BpfObject o;
  o.license = r.str();
  o.kern_version = r.u32();
  uint32_t nmaps = r.u32();
  if (!r.ok || nmaps > kMaxCount) return std::nullopt;
  for (uint32_t i = 0; i < nmaps && r.ok; ++i) {
    BpfMapDef m;
    m.name = r.str();
    m.type = static_cast<int>(r.u32());
    m.key_size = r.u32();
    m.value_size = r.u32();
    m.max_entries = r.u32();
    m.flags = r.u32();
    m.fd = static_cast<int32_t>(r.u32());
    o.maps.push_back(std::move(m));
  }
  uint32_t nprogs = r.u32();
  if (!r.ok || nprogs > kMaxCount) return std::nullopt;
  for (uint32_t i = 0; i < nprogs && r.ok; ++i) {
    BpfProgDef p;
    p.name = r.str();
    std::string insns = r.str();
    if (insns.size() % sizeof(struct bpf_insn)) return std::nullopt;
    p.insns.assign(insns.begin(), insns.end());
    o.progs.push_back(std::move(p));
  }
  char end[4];
  if (!r.take(end, sizeof end) || std::memcmp(end, "END\n", 4) != 0 || r.pos != bytes.size()) return std::nullopt;
  return o;
}

// --- the cache ---------------------------------------------------------------------

namespace {

constexpr off_t kMaxObjectFile = 64 << 20;
constexpr size_t kMaxCachedObjects = 64;  // oldest (by last use) removed beyond this
const char kSuffix[] = ".bpfobj";

// Ours alone: owned by this user, nobody else may write it.
bool private_to_us(const struct stat& st) { return st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH)); }

struct CachedFile {
  int64_t used_ns;  // last use (mtime)
  std::string name;
  uint64_t bytes;
};

// The cached objects in `dir` (regular files named *.bpfobj); with sweep_tmp, temporary
// files a killed writer left (over a minute old) are removed on the way.
std::vector<CachedFile> list_objects(int dir_fd, bool sweep_tmp) {
  std::vector<CachedFile> files;
  int fd = dup(dir_fd);  // fdopendir owns its descriptor; the offset is shared: rewind
  DIR* d = fd >= 0 ? fdopendir(fd) : nullptr;
  if (!d) {
    if (fd >= 0) close(fd);
    return files;
  }
  rewinddir(d);
  const time_t now = time(nullptr);
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (name.rfind(".tmp.", 0) == 0) {
      if (sweep_tmp && st.st_mtim.tv_sec + 60 < now) unlinkat(dirfd(d), e->d_name, 0);
      continue;
    }
    if (name.size() <= sizeof kSuffix - 1 || name.compare(name.size() - (sizeof kSuffix - 1), std::string::npos, kSuffix))
      continue;
    files.push_back({static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, name,
                     static_cast<uint64_t>(st.st_size)});
  }
  closedir(d);
  return files;
}

// Keeps the directory to kMaxCachedObjects files (modes and map sizes each make an
// object of their own), and sweeps stale temporary files.
void evict_oldest(int dir_fd) {
  std::vector<CachedFile> files = list_objects(dir_fd, /*sweep_tmp=*/true);
  if (files.size() <= kMaxCachedObjects) return;
  std::sort(files.begin(), files.end(),
            [](const CachedFile& a, const CachedFile& b) { return a.used_ns < b.used_ns; });
  for (size_t i = 0; i + kMaxCachedObjects < files.size(); ++i) unlinkat(dir_fd, files[i].name.c_str(), 0);
}

// The cache directory (created if missing) and whether the tools may use it: off with
// BPFDIAG_CACHE=0, else only if it is a directory of this user's nobody else can write.
// The directory is opened once (no symbolic link followed, not even as the last
// component) and checked on that descriptor, which *fd receives when usable.
BpfObjectCacheState check_dir(std::shared_ptr<const int>* fd_out) {
  BpfObjectCacheState s;
  auto unusable = [&](std::string why) {
    s.why = std::move(why);
    return s;
  };
  const char* env = std::getenv("BPFDIAG_CACHE");
  s.off = env && std::strcmp(env, "0") == 0;
  const char* env_dir = std::getenv("BPFDIAG_CACHE_DIR");
  s.dir = env_dir && *env_dir ? env_dir : "/var/cache/bpfdiag";
  if (s.off) return unusable("turned off (BPFDIAG_CACHE=0)");
  if (mkdir(s.dir.c_str(), 0700) != 0 && errno != EEXIST)
    return unusable(std::string("cannot be created: ") + std::strerror(errno));
  int fd = ::open(s.dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR) return unusable("is not a directory (a symbolic link or a file)");
    return unusable(std::string("cannot be read: ") + std::strerror(errno));
  }
  auto held = std::shared_ptr<const int>(new int(fd), [](const int* p) {
    close(*p);
    delete p;
  });
  struct stat st;
  if (fstat(fd, &st) != 0) return unusable(std::string("cannot be read: ") + std::strerror(errno));
  if (st.st_uid != geteuid())
    return unusable("belongs to uid " + std::to_string(st.st_uid) + ", not to this user");
  if (!private_to_us(st)) return unusable("is writable by group or others");
  s.usable = true;
  if (fd_out) *fd_out = std::move(held);
  return s;
}

}  // namespace

std::optional<BpfObjectCache> BpfObjectCache::open() {
  std::shared_ptr<const int> fd;
  BpfObjectCacheState s = check_dir(&fd);
  if (!s.usable) return std::nullopt;
  return BpfObjectCache(s.dir, std::move(fd));
}

BpfObjectCacheState BpfObjectCache::state() {
  std::shared_ptr<const int> fd;
  BpfObjectCacheState s = check_dir(&fd);
  if (!s.usable) return s;
  for (const auto& f : list_objects(*fd, /*sweep_tmp=*/false)) {
    s.objects++;
    s.bytes += f.bytes;
  }
  return s;
}

#ifndef BPFDIAG_SUITE_VERSION
#define BPFDIAG_SUITE_VERSION "unknown"
#endif

const char* suite_build() { return BPFDIAG_SUITE_VERSION; }

std::string BpfObjectCache::key(const std::string& text, const std::vector<std::string>& cflags,
                                const EmbeddedFile* headers) {
  struct utsname u;
  uname(&u);
  std::string k = "bpfdiag object 3\nsuite " BPFDIAG_SUITE_VERSION "\nlibbcc " LIBBCC_VERSION "\n";
  k += std::string("kernel ") + u.release + " " + u.version + " " + u.machine + "\n";
  k += "cpus " + std::to_string(libbpf_num_possible_cpus()) + "\n";
  for (const auto& f : cflags) k += "cflag " + f + "\n";
  // lengths first: no file's text can pass for the next file's header
  for (const auto& [path, body] : header_shim_files(u.release))
    k += "shim " + path + " " + std::to_string(body.size()) + "\n" + body;
  for (const EmbeddedFile* e = headers; e && e->name; ++e)
    k += std::string("header ") + e->name + " " + std::to_string(std::strlen(e->text)) + "\n" + e->text;
  k += "text " + std::to_string(text.size()) + "\n" + text;
  return k;
}

std::string BpfObjectCache::name_for(const std::string& key) {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(fnv1a(key)));
  return name + std::string(kSuffix);
}

std::optional<std::string> BpfObjectCache::read_file(const std::string& name, size_t max) const {
  int fd = ::openat(*fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  std::optional<std::string> bytes;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && private_to_us(st) && static_cast<uint64_t>(st.st_size) <= max) {
    bytes.emplace(static_cast<size_t>(st.st_size), '\0');
    size_t got = 0;
    while (got < bytes->size()) {
      ssize_t n = read(fd, &(*bytes)[got], bytes->size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    bytes->resize(got);
    futimens(fd, nullptr);  // last use, for evict_oldest
  }
  close(fd);
  return bytes;
}

std::optional<BpfObject> BpfObjectCache::get(const std::string& key) const {
  auto bytes = read_file(name_for(key), kMaxObjectFile);
  if (!bytes) return std::nullopt;
  return deserialize_bpf_object(*bytes, key);
}

void BpfObjectCache::remove(const std::string& key) const { unlinkat(*fd_, name_for(key).c_str(), 0); }

bool BpfObjectCache::write_file(const std::string& name, const std::string& bytes) const {
  std::random_device rd;
  std::string tmp = ".tmp." + std::to_string(getpid()) + "." + std::to_string(rd());
  int fd = ::openat(*fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  bool ok = close(fd) == 0 && done == bytes.size();
  if (!ok || renameat(*fd_, tmp.c_str(), *fd_, name.c_str()) != 0) {
    unlinkat(*fd_, tmp.c_str(), 0);
    return false;
  }
  return true;
}

void BpfObjectCache::put(const std::string& key, const BpfObject& o) const {
  if (write_file(name_for(key), serialize_bpf_object(o, key))) evict_oldest(*fd_);
}

}  // namespace bpfdiag
