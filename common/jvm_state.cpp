#include "common/jvm_state.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/bpf_session.h"
#include "common/elf_file.h"
#include "common/jvm_attach.h"
#include "common/proc.h"
#include "common/runloop.h"
#include "common/untrusted_file.h"
#include "common/wait_sites.h"

namespace bpfdiag {

// Reads of one process's memory: /proc/PID/mem opened once (bound to that address
// space: a later process with the same PID is never read), each read bounded, and a
// budget of reads per operation so a hostile table cannot keep us reading.
class JvmState::Memory {
 public:
  explicit Memory(int fd) : fd_(fd) {}
  ~Memory() { close(fd_); }
  void budget(size_t reads) { left_ = reads; }
  bool read(uint64_t addr, void* out, size_t n) {
    if (!addr || left_ == 0) return false;
    --left_;
    return pread(fd_, out, n, static_cast<off_t>(addr)) == static_cast<ssize_t>(n);
  }
  uint64_t u64(uint64_t addr) {
    uint64_t v = 0;
    return read(addr, &v, sizeof v) ? v : 0;
  }
  uint32_t u32(uint64_t addr) {
    uint32_t v = 0;
    return read(addr, &v, sizeof v) ? v : 0;
  }
  uint16_t u16(uint64_t addr) {
    uint16_t v = 0;
    return read(addr, &v, sizeof v) ? v : 0;
  }
  // A C string of at most `max` bytes ("" when unreadable or unterminated).
  std::string cstr(uint64_t addr, size_t max = 128) {
    char buf[256] = {};
    max = std::min(max, sizeof buf - 1);
    if (!addr || !read(addr, buf, max)) {
      // near the end of a mapping: shorter reads
      if (!addr || !read(addr, buf, 32)) return "";
    }
    size_t len = strnlen(buf, max);
    return len < max ? std::string(buf, len) : "";
  }

 private:
  int fd_;
  size_t left_ = 0;
};

namespace {

constexpr size_t kOpenReadBudget = 200000;  // the tables (~1,100 + 2,700 + 400 entries, 4 reads each) and fields
constexpr size_t kThreadsReadBudget = 3 * kMaxJvmThreads + 8;
constexpr size_t kClassReadBudget = 4 * kMaxJvmClassDepth + 4;

// The gHotSpotVM* symbols of libjvm.so, relocated into the process: the JVM that `pid`
// maps. Error when there is none or its file is refused.
Result<std::map<std::string, uint64_t>> hotspot_symbols(uint32_t pid) {
  std::optional<MapsLine> lib = libjvm_mapping(pid);
  if (!lib) return Error{"not a HotSpot JVM (no libjvm.so mapped)"};
  auto opened = open_mapping(pid, map_range(lib->start, lib->end), lib->path);
  if (!opened.file) return Error{"cannot read " + lib->path + (opened.refused.empty() ? "" : ": " + opened.refused)};
  auto elf = ElfFile::open(opened.file);
  if (!elf) return Error{lib->path + " is not a readable ELF file"};
  std::optional<uint64_t> bias;
  for (const auto& s : elf->load_segments())
    if (lib->offset >= (s.offset & ~0xfffULL) && lib->offset < s.offset + std::max<uint64_t>(s.filesz, 1))
      bias = lib->start - (s.vaddr + lib->offset - s.offset);
  if (!bias) return Error{lib->path + ": mapping outside its load segments"};
  std::map<std::string, uint64_t> out;
  elf->for_each_symbol([&](const ElfSymbolEntry& e) {
    std::string_view n = e.name.substr(0, e.name.find('@'));
    if (e.dynamic && n.rfind("gHotSpotVM", 0) == 0) out.emplace(std::string(n), *bias + e.value);
  });
  if (!out.count("gHotSpotVMStructs")) return Error{lib->path + " exports no gHotSpotVMStructs"};
  return out;
}

}  // namespace

// Reads one JVM's tables: field offsets and static addresses by (type, field), type
// sizes, integer constants, and the flags that decide how references are stored.
struct JvmReader {
  JvmState::Memory& m;
  const std::map<std::string, uint64_t>& sym;
  std::map<std::pair<std::string, std::string>, uint64_t> fields;  // offset, or address when static
  std::map<std::string, uint64_t> sizes;
  std::map<std::string, int64_t> ints;

  uint64_t var(const std::string& name) {  // a gHotSpot* variable's value
    auto it = sym.find(name);
    return it == sym.end() ? 0 : m.u64(it->second);
  }
  // An exported table: the array's address, its stride and the named entry offsets.
  template <typename Fn>
  void table(const std::string& array, const std::string& stride, Fn&& entry) {
    uint64_t at = var(array), step = var(stride);
    if (!at || step == 0 || step > 256) return;
    for (size_t i = 0; i < kMaxJvmStructEntries && entry(at); ++i) at += step;
  }
  void read_all() {
    const std::string p = "gHotSpotVMStructEntry";
    uint64_t tn = var(p + "TypeNameOffset"), fn = var(p + "FieldNameOffset"), st = var(p + "IsStaticOffset"),
             off = var(p + "OffsetOffset"), ad = var(p + "AddressOffset");
    table("gHotSpotVMStructs", p + "ArrayStride", [&](uint64_t e) {
      std::string type = m.cstr(m.u64(e + tn));
      if (type.empty()) return false;
      uint64_t v = m.u32(e + st) ? m.u64(e + ad) : m.u64(e + off);
      fields[{type, m.cstr(m.u64(e + fn))}] = v;
      return true;
    });
    const std::string t = "gHotSpotVMTypeEntry";
    uint64_t tname = var(t + "TypeNameOffset"), tsize = var(t + "SizeOffset");
    table("gHotSpotVMTypes", t + "ArrayStride", [&](uint64_t e) {
      std::string type = m.cstr(m.u64(e + tname));
      if (type.empty()) return false;
      sizes[type] = m.u64(e + tsize);
      return true;
    });
    const std::string c = "gHotSpotVMIntConstantEntry";
    uint64_t cname = var(c + "NameOffset"), cval = var(c + "ValueOffset");
    table("gHotSpotVMIntConstants", c + "ArrayStride", [&](uint64_t e) {
      std::string name = m.cstr(m.u64(e + cname));
      if (name.empty()) return false;
      ints[name] = static_cast<int32_t>(m.u32(e + cval));
      return true;
    });
  }
  std::optional<uint64_t> field(const std::string& type, const std::string& name) const {
    auto it = fields.find({type, name});
    return it == fields.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  }
  // The first of several spellings (HotSpot renames fields between releases).
  std::optional<uint64_t> field_any(const std::vector<std::pair<std::string, std::string>>& names) const {
    for (const auto& [t, f] : names)
      if (auto v = field(t, f)) return v;
    return std::nullopt;
  }
  // A boolean -XX flag's value from JVMFlag's table; nullopt when not found.
  std::optional<bool> flag(const std::string& want) {
    auto table = field("JVMFlag", "flags"), count = field("JVMFlag", "numFlags"), name = field("JVMFlag", "_name"),
         addr = field("JVMFlag", "_addr");
    auto size = sizes.find("JVMFlag");
    if (!table || !count || !name || !addr || size == sizes.end() || size->second == 0 || size->second > 256)
      return std::nullopt;
    uint64_t base = m.u64(*table), n = std::min<uint64_t>(m.u64(*count), 4096);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t f = base + i * size->second;
      if (m.cstr(m.u64(f + *name), 64) != want) continue;
      uint8_t v = 0;
      if (!m.read(m.u64(f + *addr), &v, 1)) return std::nullopt;
      return v != 0;
    }
    return std::nullopt;
  }
};

namespace {

// UNSIGNED5 (HotSpot's compressed stream of JDK 21+ field descriptions): a byte below
// 192 ends a number; each byte adds (byte - 1) << (6 * its position).
struct Unsigned5 {
  const std::vector<uint8_t>& b;
  size_t pos = 0;
  bool bad = false;
  uint32_t next() {
    uint64_t sum = 0;
    for (int i = 0, shift = 0; i < 5; ++i, shift += 6) {
      if (pos >= b.size() || b[pos] == 0) {
        bad = true;
        return 0;
      }
      uint8_t x = b[pos++];
      sum += uint64_t(x - 1) << shift;
      if (x < 192) return static_cast<uint32_t>(sum);
    }
    return static_cast<uint32_t>(sum);
  }
};

std::string symbol_text(JvmState::Memory& m, uint64_t sym, uint64_t len_off, uint64_t body_off) {
  if (!sym) return "";
  uint16_t len = m.u16(sym + len_off);
  if (len == 0 || len > 1024) return "";
  std::string s(len, '\0');
  return m.read(sym + body_off, s.data(), len) ? s : "";
}

}  // namespace

namespace {

// The byte offset of java.lang.Thread.parkBlocker in a Thread object, from the class's
// field descriptions; nullopt when they cannot be read.
std::optional<uint32_t> park_blocker_offset(JvmReader& r) {
  JvmState::Memory& m = r.m;
  auto thread_klass = r.field("vmClasses", "_klasses[static_cast<int>(vmClassID::Thread_klass_knum)]");
  auto constants = r.field("InstanceKlass", "_constants");
  auto len = r.field("Symbol", "_length"), body = r.field("Symbol", "_body");
  auto cp_size = r.sizes.find("ConstantPool");
  if (!thread_klass || !constants || !len || !body || cp_size == r.sizes.end()) return std::nullopt;
  uint64_t k = m.u64(*thread_klass), cp = m.u64(k + *constants);
  if (!k || !cp) return std::nullopt;
  auto cp_name = [&](uint32_t index) {
    return symbol_text(m, m.u64(cp + cp_size->second + 8ULL * index), *len, *body);
  };
  if (auto fields = r.field("InstanceKlass", "_fields")) {  // JDK 17: u2 tuples
    auto count = r.field("InstanceKlass", "_java_fields_count");
    auto data = r.field("Array<u2>", "_data");
    int64_t slots = r.ints.count("FieldInfo::field_slots") ? r.ints["FieldInfo::field_slots"] : 0;
    int64_t tag_size = r.ints.count("FIELDINFO_TAG_SIZE") ? r.ints["FIELDINFO_TAG_SIZE"] : -1;
    int64_t tag_offset = r.ints.count("FIELDINFO_TAG_OFFSET") ? r.ints["FIELDINFO_TAG_OFFSET"] : -1;
    int64_t internal = r.ints.count("JVM_ACC_FIELD_INTERNAL") ? r.ints["JVM_ACC_FIELD_INTERNAL"] : 0;
    if (!count || !data || slots < 6 || slots > 16 || tag_size < 0 || tag_size > 8 || tag_offset < 0) return std::nullopt;
    uint64_t arr = m.u64(k + *fields), n = std::min<uint64_t>(m.u16(k + *count), kMaxJvmFields);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t f = arr + *data + 2 * uint64_t(slots) * i;
      uint16_t access = m.u16(f + 2 * r.ints["FieldInfo::access_flags_offset"]);
      if (access & internal) continue;
      if (cp_name(m.u16(f + 2 * r.ints["FieldInfo::name_index_offset"])) != "parkBlocker") continue;
      uint32_t packed = uint32_t(m.u16(f + 2 * r.ints["FieldInfo::high_packed_offset"])) << 16 |
                        m.u16(f + 2 * r.ints["FieldInfo::low_packed_offset"]);
      if ((packed & ((1u << tag_size) - 1)) != uint32_t(tag_offset)) return std::nullopt;
      return packed >> tag_size;
    }
    return std::nullopt;
  }
  auto stream = r.field("InstanceKlass", "_fieldinfo_stream");  // JDK 21+: UNSIGNED5
  auto data = r.field("Array<u1>", "_data");
  if (!stream || !data) return std::nullopt;
  uint64_t arr = m.u64(k + *stream);
  uint32_t n = m.u32(arr);
  if (!arr || n == 0 || n > 65536) return std::nullopt;
  std::vector<uint8_t> bytes(n);
  if (!m.read(arr + *data, bytes.data(), n)) return std::nullopt;
  auto bit = [&](const char* name) {
    auto it = r.ints.find(std::string("FieldInfo::FieldFlags::_ff_") + name);
    return it == r.ints.end() || it->second < 0 || it->second > 31 ? 0u : 1u << it->second;
  };
  const uint32_t initialized = bit("initialized"), generic = bit("generic"), contended = bit("contended");
  if (!initialized || !generic || !contended) return std::nullopt;
  Unsigned5 in{bytes};
  uint32_t java_fields = in.next();
  in.next();  // injected fields (the VM's own, after the Java ones)
  for (uint32_t i = 0; i < java_fields && i < kMaxJvmFields && !in.bad; ++i) {
    uint32_t name = in.next(), sig = in.next(), offset = in.next(), access = in.next(), flags = in.next();
    (void)sig, (void)access;
    if (flags & initialized) in.next();
    if (flags & generic) in.next();
    if (flags & contended) in.next();
    if (!in.bad && cp_name(name) == "parkBlocker") return offset;
  }
  return std::nullopt;
}

}  // namespace

JvmState::~JvmState() = default;

Result<std::unique_ptr<JvmState>> JvmState::open(uint32_t pid) {
  auto sym = hotspot_symbols(pid);
  if (!sym) return Error{sym.error()};
  int fd = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{std::string("cannot read its memory: ") + std::strerror(errno)};
  std::unique_ptr<JvmState> j(new JvmState);
  j->mem_ = std::make_unique<Memory>(fd);
  j->mem_->budget(kOpenReadBudget);
  JvmReader r{*j->mem_, *sym, {}, {}, {}};
  r.read_all();
  if (r.fields.empty()) return Error{"its VM structure table is empty (still starting?)"};
  if (r.flag("UseCompactObjectHeaders").value_or(false))
    return Error{"compact object headers (-XX:+UseCompactObjectHeaders) are not read"};
  auto oops = r.flag("UseCompressedOops"), klass = r.flag("UseCompressedClassPointers");
  if (!oops) return Error{"its UseCompressedOops flag cannot be read"};
  jvm_layout& l = j->layout_;
  l.compressed_oops = *oops;
  l.compressed_klass = klass.value_or(true);  // JDK 25 has no flag: always compressed
  auto u = [&](std::optional<uint64_t> v) { return static_cast<uint32_t>(v.value_or(0)); };
  auto oop_base = r.field_any({{"CompressedOops", "_narrow_oop._base"}, {"CompressedOops", "_base"}});
  auto oop_shift = r.field_any({{"CompressedOops", "_narrow_oop._shift"}, {"CompressedOops", "_shift"}});
  auto k_base = r.field_any({{"CompressedKlassPointers", "_narrow_klass._base"}, {"CompressedKlassPointers", "_base"}});
  auto k_shift = r.field_any({{"CompressedKlassPointers", "_narrow_klass._shift"}, {"CompressedKlassPointers", "_shift"}});
  if (l.compressed_oops && (!oop_base || !oop_shift)) return Error{"no CompressedOops base/shift"};
  if (l.compressed_klass && (!k_base || !k_shift)) return Error{"no CompressedKlassPointers base/shift"};
  if (l.compressed_oops) l.oop_base = j->mem_->u64(*oop_base), l.oop_shift = j->mem_->u32(*oop_shift);
  if (l.compressed_klass) l.klass_base = j->mem_->u64(*k_base), l.klass_shift = j->mem_->u32(*k_shift);
  auto thread_obj = r.field("JavaThread", "_threadObj"), pending = r.field("JavaThread", "_current_pending_monitor"),
       waiting = r.field("JavaThread", "_current_waiting_monitor"), object = r.field("ObjectMonitor", "_object"),
       klass_word = r.field_any({{"oopDesc", "_metadata._compressed_klass"}, {"oopDesc", "_metadata._klass"}});
  if (!thread_obj || !pending || !waiting || !object || !klass_word)
    return Error{"its VM structure table lacks a JavaThread or ObjectMonitor field"};
  l.thread_obj = u(thread_obj), l.pending_monitor = u(pending), l.waiting_monitor = u(waiting);
  l.monitor_object = u(object), l.klass_in_oop = u(klass_word);
  auto blocker = park_blocker_offset(r);
  if (!blocker || *blocker == 0 || *blocker > 4096) return Error{"java.lang.Thread.parkBlocker not found"};
  l.park_blocker = *blocker;
  auto list = r.field("ThreadsSMRSupport", "_java_thread_list");
  auto osthread = r.field_any({{"JavaThread", "_osthread"}, {"Thread", "_osthread"}});
  if (!list || !osthread || !r.field("ThreadsList", "_length") || !r.field("OSThread", "_thread_id"))
    return Error{"its thread list cannot be found"};
  j->thread_list_ = *list, j->osthread_ = u(osthread);
  j->list_length_ = u(r.field("ThreadsList", "_length")), j->list_threads_ = u(r.field("ThreadsList", "_threads"));
  j->thread_id_ = u(r.field("OSThread", "_thread_id"));
  j->klass_name_ = u(r.field("Klass", "_name")), j->klass_super_ = u(r.field("Klass", "_super"));
  j->symbol_length_ = u(r.field("Symbol", "_length")), j->symbol_body_ = u(r.field("Symbol", "_body"));
  if (!j->klass_name_ || !j->symbol_body_) return Error{"its Klass or Symbol layout cannot be found"};
  return j;
}

std::vector<std::pair<uint32_t, uint64_t>> JvmState::threads() const {
  Memory& m = *mem_;
  m.budget(kThreadsReadBudget);
  std::vector<std::pair<uint32_t, uint64_t>> out;
  uint64_t list = m.u64(thread_list_);
  uint32_t n = std::min<uint32_t>(m.u32(list + list_length_), kMaxJvmThreads);
  uint64_t arr = m.u64(list + list_threads_);
  if (!list || !arr) return out;
  std::vector<uint64_t> jts(n);
  if (n && !m.read(arr, jts.data(), n * sizeof(uint64_t))) return out;
  for (uint64_t jt : jts) {
    uint32_t tid = m.u32(m.u64(jt + osthread_) + thread_id_);
    if (tid) out.emplace_back(tid, jt);
  }
  return out;
}

const std::vector<std::string>& JvmState::class_chain(uint64_t klass) {
  auto it = classes_.find(klass);
  if (it != classes_.end() || classes_.size() >= 65536) return it != classes_.end() ? it->second : classes_[0];
  Memory& m = *mem_;
  m.budget(kClassReadBudget);
  std::vector<std::string> chain;
  for (uint64_t k = klass; k && chain.size() < kMaxJvmClassDepth; k = klass_super_ ? m.u64(k + klass_super_) : 0) {
    std::string name = symbol_text(m, m.u64(k + klass_name_), symbol_length_, symbol_body_);
    if (name.empty() || (name == "java/lang/Object" && !chain.empty())) break;  // every class's last
    for (char& c : name) {
      if (c == '/') c = '.';
      else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';  // printable only
    }
    chain.push_back(name);
  }
  return classes_[klass] = std::move(chain);
}

// --- JvmWaits -----------------------------------------------------------------------

void JvmWaits::find(const std::vector<uint32_t>& pids0, bool verbose) {
  verbose_ = verbose;
  if (pids0.empty()) everywhere_ = true;
  last_rescan_ns_ = monotonic_ns();
  for (uint32_t pid : pids0.empty() ? proc_all_pids(65536) : pids0) {
    // a system-wide rescan reads every process's mappings (a fork storm: thousands);
    // a stop signal wants the final report now, and the next rescan finds the rest
    if (pids0.empty() && stop_signal()) break;
    if (refused_or_found_.count(pid) || refused_or_found_.size() >= kMaxJvmThreads) continue;
    auto j = JvmState::open(pid);
    if (!j && j.error().rfind("not a HotSpot JVM", 0) == 0) continue;  // may become one (system-wide rescans)
    refused_or_found_.insert(pid);
    if (j) {
      jvms_[pid] = std::move(j.value());
      continue;
    }
    refused_[pid] = j.error();
    if (verbose_)
      std::fprintf(stderr, "%s: JVM %u: its wait state is not read: %s\n", program_invocation_short_name, pid,
                   j.error().c_str());
  }
}

void JvmWaits::put(BpfSession& s, uint32_t pid, JvmState& j) {
  auto layouts = s.get_hash_table<uint32_t, jvm_layout>("jvm_layouts");
  auto threads = s.get_hash_table<uint32_t, uint64_t>("jvm_threads");
  if (!layouts.update_value(pid, j.layout()).ok()) return;  // full (256 JVMs): their waits keep their stacks
  std::set<uint32_t> now;
  for (auto [tid, jt] : j.threads())
    if (threads.update_value(tid, jt).ok()) now.insert(tid);
  for (uint32_t tid : tids_[pid])  // threads that ended (a new thread may reuse the tid: written above)
    if (!now.count(tid)) threads.remove_value(tid);
  tids_[pid] = std::move(now);
}

Status JvmWaits::install(BpfSession& s) {
  for (auto& [pid, j] : jvms_) put(s, pid, *j);
  last_refresh_ns_ = monotonic_ns();
  return std::nullopt;
}

void JvmWaits::refresh(BpfSession& s) {
  uint64_t now = monotonic_ns();
  if (everywhere_ && now - last_rescan_ns_ >= kRescanNs) {
    std::set<uint32_t> known;
    for (const auto& [pid, j] : jvms_) known.insert(pid);
    find({}, verbose_);
    for (auto& [pid, j] : jvms_)
      if (!known.count(pid)) put(s, pid, *j);
  }
  if (jvms_.empty() || now - last_refresh_ns_ < 1000000000ULL) return;
  last_refresh_ns_ = now;
  for (auto& [pid, j] : jvms_) {
    if (gone_.count(pid)) continue;
    if (pid_exists(pid)) {
      put(s, pid, *j);
      continue;
    }
    // gone: out of the maps; its class names stay for the report of its last waits
    auto threads = s.get_hash_table<uint32_t, uint64_t>("jvm_threads");
    for (uint32_t tid : tids_[pid]) threads.remove_value(tid);
    s.get_hash_table<uint32_t, jvm_layout>("jvm_layouts").remove_value(pid);
    tids_.erase(pid);
    gone_.insert(pid);
  }
}

const std::vector<std::string>& JvmWaits::class_chain(uint32_t pid, uint64_t klass) {
  static const std::vector<std::string> none;
  auto it = jvms_.find(pid);
  return it == jvms_.end() || !klass ? none : it->second->class_chain(klass);
}

DeclaredName java_wait_name(uint32_t jvm_kind, const std::vector<std::string>& chain) {
  const std::string cls = chain.empty() ? "an object of unknown class" : "a " + chain.front();
  DeclaredName d;
  d.origin = "HotSpot JavaThread state";
  switch (jvm_kind) {
    case JVM_WAIT_MONITOR:
      d.kind = WaitKind::Lock;
      d.what = "Java monitor enter (waiting to lock " + cls + ")";
      return d;
    case JVM_WAIT_OBJECT:
      d.kind = WaitKind::Condition;
      d.what = "Java Object.wait() (waiting on " + cls + ")";
      return d;
    default: break;
  }
  WaitVerdict v = WaitRules::suite().classify_object(chain);
  d.kind = v.decided ? v.kind : WaitKind::Unclassified;
  d.what = (v.decided ? v.what : std::string("Java LockSupport.park")) + " (parking to wait for " + cls + ")";
  if (v.rule) d.origin = v.rule->origin;
  return d;
}

namespace {
constexpr uint64_t kJavaIdTag = 0xfeULL << 56;  // DeclaredWaits' ids are tagged 0xff
}

uint64_t JvmWaits::declared_id(uint32_t pid, uint64_t raw) {
  uint32_t kind = (raw >> 48) & 0xff;
  DeclaredName d = java_wait_name(kind, class_chain(pid, raw & 0xffffffffffffULL));
  auto [at, fresh] = ids_.try_emplace({kind, d.what}, kJavaIdTag | names_.size());
  if (fresh) names_.push_back(std::move(d));
  return at->second;
}

const DeclaredName* JvmWaits::declared_name(uint64_t id) const {
  if ((id & (0xffULL << 56)) != kJavaIdTag) return nullptr;
  size_t i = id & ~(0xffULL << 56);
  return i < names_.size() ? &names_[i] : nullptr;
}

nlohmann::json JvmWaits::start_fields() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [pid, j] : jvms_) {
    auto t = tids_.find(pid);
    out.push_back({{"pid", pid}, {"java_threads", t == tids_.end() ? 0 : t->second.size()}});
  }
  for (const auto& [pid, why] : refused_) out.push_back({{"pid", pid}, {"not_read", why}});
  return out;
}

}  // namespace bpfdiag
