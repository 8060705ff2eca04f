#include "common/declared_waits.h"

#include <errno.h>

#include <cstdio>
#include <cstring>
#include <set>

#include "common/bpf_session.h"
#include "common/elf_file.h"
#include "common/timing.h"
#include "common/untrusted_file.h"

namespace bpfdiag {

namespace {

// Raw addrs carry rule + 1 in their top byte (so at most kMaxDeclaredRules rules);
// the ids of named waits carry 0xff there.
constexpr uint64_t kIdTag = 0xffULL << 56;
constexpr size_t kMaxDeclaredRules = 254;

bool same_cfg(const declared_cfg& a, const declared_cfg& b) {
  return a.rule == b.rule && a.arg_kind == b.arg_kind && a.reg == b.reg && a.size == b.size && a.value == b.value &&
         a.is_string == b.is_string;
}

// The begin probe's slot configuration: the rule and where its naming argument is.
std::optional<declared_cfg> cfg_for(const DeclaredWait& d, size_t rule, const UsdtProbe& p) {
  declared_cfg cfg{};
  cfg.rule = static_cast<uint32_t>(rule);
  cfg.arg_kind = DECL_ARG_NONE;
  if (!d.name_arg) return cfg;
  if (size_t(d.name_arg) > p.args.size() || !p.args[d.name_arg - 1]) return std::nullopt;
  const UsdtArg& a = *p.args[d.name_arg - 1];
  cfg.arg_kind = a.kind == UsdtArg::Kind::Reg   ? DECL_ARG_REG
                 : a.kind == UsdtArg::Kind::Mem ? DECL_ARG_MEM
                                                : DECL_ARG_IMM;
  cfg.reg = a.reg < 0 ? 0 : static_cast<uint32_t>(a.reg);
  cfg.size = static_cast<uint32_t>(a.size);
  cfg.value = a.value;
  cfg.is_string = d.name_is_string;
  return cfg;
}

// A name the traced process wrote: printable ASCII only, else escaped.
std::string clean(const char* s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && s[i]; ++i) {
    unsigned char ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x20 && ch < 0x7f) {
      out.push_back(static_cast<char>(ch));
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", ch);
      out += b;
    }
  }
  return out.empty() ? "?" : out;
}

}  // namespace

void DeclaredWaits::find(const std::vector<uint32_t>& pids0, const std::vector<uint32_t>& tids) {
  rules_ = WaitRules::suite().declared();
  if (rules_.empty()) return;
  if (rules_.size() > kMaxDeclaredRules) {
    std::fprintf(stderr, "%s: warning: only the first %zu usdt wait rules are used (of %zu)\n",
                 program_invocation_short_name, kMaxDeclaredRules, rules_.size());
    rules_.resize(kMaxDeclaredRules);
  }
  std::set<std::string> providers;
  for (const auto& d : rules_) providers.insert(d.provider);
  std::vector<uint32_t> pids = pids0;
  for (uint32_t t : tids) pids.push_back(t);  // /proc/TID/maps is its process's
  UsdtScan scan = find_usdt_files(pids, providers);
  if (timing_on())
    timing_mark("usdt scan: " + std::to_string(scan.pids_scanned) + " processes, " + std::to_string(scan.files_read) +
                " files");
  if (scan.capped)  // waits in the files left out are not declared ones: say so
    std::fprintf(stderr, "%s: warning: USDT wait probes looked for in the first %zu processes and %zu files only\n",
                 program_invocation_short_name, scan.pids_scanned, scan.files_read);
  files_ = std::move(scan.files);
  for (size_t f = 0; f < files_.size(); ++f)
    for (const auto& p : files_[f].probes)
      for (size_t r = 0; r < rules_.size(); ++r) {
        const DeclaredWait& d = rules_[r];
        if (p.provider != d.provider || (p.name != d.start && p.name != d.done)) continue;
        Point pt{f, p, r, p.name == d.start};
        if (pt.begin) {
          auto cfg = cfg_for(d, r, p);
          if (!cfg) {
            ++unreadable_;  // its naming argument is not readable from the registers
            continue;
          }
          for (size_t i = 0; i < slots_.size() && pt.slot < 0; ++i)
            if (same_cfg(slots_[i], *cfg)) pt.slot = static_cast<int>(i);
          if (pt.slot < 0 && slots_.size() < DECL_SLOTS) {
            pt.slot = static_cast<int>(slots_.size());
            slots_.push_back(*cfg);
          }
          if (pt.slot < 0) {
            ++no_slot_;
            continue;
          }
        }
        points_.push_back(std::move(pt));
      }
}

bool DeclaredWaits::has_begins() const {
  for (const auto& pt : points_)
    if (pt.begin) return true;
  return false;
}

Status DeclaredWaits::attach(BpfSession& s, bool verbose, uint64_t& probes) {
  if (points_.empty()) return std::nullopt;
  auto cfg = s.get_array_table<declared_cfg>("decl_cfg");
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!cfg.update_value(static_cast<int>(i), slots_[i]).ok()) return Error{"cannot fill the BPF map decl_cfg"};
  for (bool begins : {false, true})
    for (const auto& pt : points_) {
      if (pt.begin != begins) continue;
      const UsdtFile& f = files_[pt.file];
      auto off = file_offset_of(*f.elf, pt.probe.pc);
      auto sem = pt.probe.semaphore ? file_offset_of(*f.elf, pt.probe.semaphore) : std::optional<uint64_t>(0);
      std::string what = "USDT " + pt.probe.provider + ":" + pt.probe.name + " in " + f.display;
      if (!off || !sem || *sem > UINT32_MAX) {
        ++unreadable_;
        if (verbose)
          std::fprintf(stderr, "%s: %s: not in the file's loaded bytes\n", program_invocation_short_name, what.c_str());
        continue;
      }
      std::string fn = pt.begin ? "declared_begin_" + std::to_string(pt.slot) : "declared_done";
      if (auto st = s.attach_usdt(f.file->fd_path(), *off, static_cast<uint32_t>(*sem), fn, what)) return st;
      ++probes;
      if (verbose)
        std::fprintf(stderr, "%s: uprobe on %s (%s)\n", program_invocation_short_name, what.c_str(),
                     rules_[pt.rule].origin.c_str());
    }
  if (verbose && (unreadable_ || no_slot_))
    std::fprintf(stderr, "%s: %zu USDT wait probes left out (argument not readable: %zu, no slot: %zu)\n",
                 program_invocation_short_name, unreadable_ + no_slot_, unreadable_, no_slot_);
  return std::nullopt;
}

std::string DeclaredWaits::words(uint32_t pid, uint64_t raw, BpfSession& session) {
  size_t rule = (raw >> 56) - 1;
  const DeclaredWait& d = rules_[rule];
  uint64_t v = raw & DECL_ARG_MASK;
  if (!d.name_arg || !d.name_is_string) return d.what("", v);
  declared_name_key k{};
  k.pid = pid;
  k.ptr = v;
  declared_name nm{};
  if (!v || !session.get_hash_table<declared_name_key, declared_name>("decl_names").get_value(k, nm).ok())
    return d.what("?", 0);
  return d.what(clean(nm.s, sizeof nm.s), 0);
}

uint64_t DeclaredWaits::id_of(uint32_t pid, uint64_t raw, BpfSession& session) {
  auto it = raw_ids_.find({pid, raw});
  if (it != raw_ids_.end()) return it->second;
  size_t rule = (raw >> 56) - 1;
  if (raw >> 56 == 0 || rule >= rules_.size()) return raw;  // cannot happen: left as is
  std::string w = words(pid, raw, session);
  auto [at, fresh] = ids_.try_emplace({rule, w}, kIdTag | names_.size());
  if (fresh) names_.push_back({rules_[rule].kind, w, rules_[rule].origin});
  if (raw_ids_.size() < (1u << 16)) raw_ids_[{pid, raw}] = at->second;
  return at->second;
}

const DeclaredName* DeclaredWaits::name(uint64_t id) const {
  if ((id & kIdTag) != kIdTag) return nullptr;
  size_t i = id & ~kIdTag;
  return i < names_.size() ? &names_[i] : nullptr;
}

nlohmann::json DeclaredWaits::start_fields() const {
  nlohmann::json out = nlohmann::json::array();
  std::set<std::tuple<std::string, std::string, std::string>> seen;
  for (const auto& pt : points_) {
    const DeclaredWait& d = rules_[pt.rule];
    auto key = std::make_tuple(d.provider + ":" + d.start + ":" + d.done, files_[pt.file].display, d.origin);
    if (!seen.insert(key).second) continue;
    out.push_back({{"probes", std::get<0>(key)}, {"file", std::get<1>(key)}, {"rule", std::get<2>(key)}});
  }
  return out;
}

}  // namespace bpfdiag
