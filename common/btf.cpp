#include "common/btf.h"

#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include <sys/stat.h>
#include <sys/utsname.h>

#include "common/bpf_object.h"

#include "common/timing.h"

namespace bpfdiag {
namespace {

// Depth-first search through a composite type's members, descending into anonymous
// structs/unions. Returns bit offset or -1.
long find_member(const struct btf* b, const struct btf_type* t, const std::string& name,
                 uint32_t* size_out) {
  if (!btf_is_composite(t)) return -1;
  const struct btf_member* m = btf_members(t);
  for (unsigned i = 0; i < btf_vlen(t); ++i, ++m) {
    const char* mname = btf__name_by_offset(b, m->name_off);
    uint32_t bit_off = btf_member_bit_offset(t, i);
    if (mname && name == mname) {
      if (size_out) {
        long sz = btf__resolve_size(b, m->type);
        *size_out = sz > 0 ? static_cast<uint32_t>(sz) : 0;
      }
      return bit_off;
    }
    if (!mname || !*mname) {
      const struct btf_type* inner = btf__type_by_id(b, m->type);
      while (inner && (btf_is_mod(inner) || btf_is_typedef(inner))) inner = btf__type_by_id(b, inner->type);
      if (inner) {
        long off = find_member(b, inner, name, size_out);
        if (off >= 0) return bit_off + off;
      }
    }
  }
  return -1;
}

const struct btf_type* find_struct(const struct btf* b, const std::string& type) {
  int id = btf__find_by_name_kind(b, type.c_str(), BTF_KIND_STRUCT);
  if (id < 0) id = btf__find_by_name_kind(b, type.c_str(), BTF_KIND_UNION);
  return id < 0 ? nullptr : btf__type_by_id(b, id);
}

}  // namespace

namespace {

constexpr char kFactsFile[] = "kernel.btffacts";
constexpr size_t kMaxFactsFile = 1 << 20;
constexpr size_t kMaxFacts = 20000;

std::string read_small(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// What the facts depend on: this boot (the kernel cannot change without one), its build
// and the BTF file as the kernel shows it. Empty when something cannot be read.
std::string facts_key(const std::string& path) {
  struct stat st;
  std::string boot = read_small("/proc/sys/kernel/random/boot_id");
  if (boot.empty() || stat(path.c_str(), &st) != 0) return "";
  struct utsname u;
  uname(&u);
  // the suite's and libbpf's versions: an upgrade that looks fields up differently
  // must not be answered from the old one's record
  return "bpfdiag btf facts 2\nsuite " + std::string(suite_build()) + "\nlibbpf " + libbpf_version_string() +
         "\nboot " + boot + "\nkernel " + u.release + " " + u.version + "\nbtf " + path + " " +
         std::to_string(st.st_size) + "\n";
}

bool plain_word(const std::string& w) {
  return !w.empty() && w.size() <= 128 &&
         std::all_of(w.begin(), w.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

Result<std::shared_ptr<KernelBtf>> KernelBtf::load(const std::string& path) {
  std::shared_ptr<KernelBtf> k(new KernelBtf());
  k->path_ = path;
  if (auto cache = BpfObjectCache::open()) {
    k->key_ = facts_key(path);
    auto bytes = k->key_.empty() ? std::nullopt : cache->read_file(kFactsFile, kMaxFactsFile);
    // the record: the key whole, then "TYPE NAME FOUND BITS SIZE" lines; anything else
    // (another boot's, a damaged file) is not used
    if (bytes && bytes->compare(0, k->key_.size(), k->key_) == 0) {
      std::istringstream in(bytes->substr(k->key_.size()));
      std::string type, name;
      int found;
      long bits, size;
      std::map<std::pair<std::string, std::string>, Member> facts;
      bool good = true;
      while (good && facts.size() < kMaxFacts && in >> type >> name >> found >> bits >> size) {
        // what a lookup can answer: a member at a bit offset inside a struct of at most
        // 4 GiB, or none (-1, size 0), the struct found or not
        good = plain_word(type) && plain_word(name) && (found == 0 || found == 1) && bits >= -1 &&
               bits < (1L << 35) && size >= 0 && size <= UINT32_MAX && (found == 1 || bits == -1) &&
               (bits >= 0 || size == 0);
        facts[{type, name}] = Member{found == 1, bits, static_cast<uint32_t>(size)};
      }
      in >> std::ws;
      if (good && in.eof()) k->facts_ = std::move(facts);
    }
  }
  if (k->facts_.empty() && !k->parse())
    return Error{k->parse_error_};
  timing_mark(k->parsed() ? "BTF parse" : "BTF facts from the cache");
  return k;
}

namespace {
// The one parse of a BTF file; on failure *error says why.
struct btf* parse_btf_file(const std::string& path, std::string* error) {
  struct btf* b = btf__parse(path.c_str(), nullptr);
  if (!b)
    *error = "cannot read kernel BTF from " + path + ": " + std::strerror(errno) +
             " (a kernel built with CONFIG_DEBUG_INFO_BTF=y is required)";
  return b;
}
}  // namespace

Status check_btf_file(const std::string& path) {
  std::string error;
  struct btf* b = parse_btf_file(path, &error);
  if (!b) return Error{error};
  btf__free(b);
  return std::nullopt;
}

bool KernelBtf::parse() const {
  if (btf_) return true;
  if (!parse_error_.empty()) return false;
  btf_ = parse_btf_file(path_, &parse_error_);
  return btf_ != nullptr;
}

KernelBtf::~KernelBtf() {
  save();
  btf__free(btf_);
}

void KernelBtf::save() const {
  if (!dirty_ || key_.empty()) return;
  auto cache = BpfObjectCache::open();
  if (!cache) return;
  std::string out = key_;
  for (const auto& [tn, m] : facts_)
    out += tn.first + " " + tn.second + " " + (m.struct_found ? "1 " : "0 ") + std::to_string(m.bits) + " " +
           std::to_string(m.size) + "\n";
  if (cache->write_file(kFactsFile, out)) dirty_ = false;
}

KernelBtf::Member KernelBtf::member(const std::string& type, const std::string& name) const {
  auto it = facts_.find({type, name});
  if (it != facts_.end()) return it->second;
  Member m;
  if (!parse()) return m;  // not recorded: the next start asks again
  if (const struct btf_type* t = find_struct(btf_, type)) {
    m.struct_found = true;
    m.bits = find_member(btf_, t, name, &m.size);
  }
  if (plain_word(type) && plain_word(name) && facts_.size() < kMaxFacts) {
    facts_[{type, name}] = m;
    dirty_ = true;
  }
  return m;
}

Result<uint32_t> KernelBtf::field_offset(const std::string& type,
                                         const std::vector<std::string>& names) const {
  bool any_struct = names.empty();
  for (const auto& n : names) {
    Member m = member(type, n);
    if (m.bits >= 0) return static_cast<uint32_t>(m.bits / 8);
    any_struct |= m.struct_found;
  }
  if (!parse_error_.empty()) return Error{parse_error_};
  if (!any_struct) return Error{"kernel BTF has no struct " + type};
  std::string tried;
  for (const auto& n : names) tried += (tried.empty() ? "" : "/") + n;
  return Error{"kernel struct " + type + " has no field " + tried};
}

uint32_t KernelBtf::field_size(const std::string& type, const std::string& name) const {
  Member m = member(type, name);
  return m.bits >= 0 ? m.size : 0;
}

bool KernelBtf::has_field(const std::string& type, const std::string& name) const {
  return member(type, name).bits >= 0;
}

Status add_offsets(BpfPlan& plan, const KernelBtf& btf, const std::vector<OffsetSpec>& specs) {
  BpfPlan found;
  for (const auto& s : specs) {
    auto off = btf.field_offset(s.type, s.names);
    if (!off) return Error{off.error()};
    found.integer(s.macro, *off);
  }
  plan.merge(found);
  return std::nullopt;
}

namespace {
std::optional<Result<std::shared_ptr<KernelBtf>>> g_kernel_btf;
}

Result<std::shared_ptr<KernelBtf>> kernel_btf() {
  if (!g_kernel_btf) {
    timing_mark("(before BTF parse)");
    g_kernel_btf = KernelBtf::load();
  }
  return *g_kernel_btf;
}

void release_kernel_btf() { g_kernel_btf.reset(); }

bool add_arrival_offsets(BpfPlan& plan) {
  return !add_kernel_offsets(plan, {{"OFF_TASK_SCHED_INFO", "task_struct", {"sched_info"}},
                                 {"OFF_SI_LAST_ARRIVAL", "sched_info", {"last_arrival"}},
                                 {"OFF_SI_PCOUNT", "sched_info", {"pcount"}},
                                 {"OFF_SI_RUN_DELAY", "sched_info", {"run_delay"}},
                                 {"OFF_SI_LAST_QUEUED", "sched_info", {"last_queued"}},
                                 {"OFF_SE_SUM_EXEC", "sched_entity", {"sum_exec_runtime"}},
                                 {"OFF_TASK_SE", "task_struct", {"se"}},
                                 {"OFF_SE_CFS_RQ", "sched_entity", {"cfs_rq"}},
                                 {"OFF_CFS_RQ_RQ", "cfs_rq", {"rq"}},
                                 {"OFF_RQ_CLOCK", "rq", {"clock"}}});
}

Status add_kernel_offsets(BpfPlan& plan, const std::vector<OffsetSpec>& specs) {
  auto btf = kernel_btf();
  if (!btf) return Error{btf.error()};
  return add_offsets(plan, **btf, specs);
}

}  // namespace bpfdiag
