// lockstat's declared waits: the USDT probe pairs of the wait rules (common/wait_sites.h
// `usdt:` rules, e.g. PostgreSQL's lock__wait__start/done) found in the files the
// targets map, attached, and the waits named in the software's words.
#pragma once
#include <bcc/BPF.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/usdt.h"
#include "common/wait_sites.h"
#include "tools/lockstat/lockstat.h"

namespace bpfdiag {
class BpfSession;
}

namespace lockstat {

class Declared {
 public:
  // Finds the rules' probes in the files `c`'s targets map (every process without -p);
  // nothing in futex-less modes (-K, --uprobes).
  void find(const Config& c);
  bool empty() const { return points_.empty(); }
  // Fills decl_cfg, installs the unwinder copy (dwarf), attaches the done probes and
  // then the begin probes (a begin traced always has its done traced). Adds the
  // probes attached to `probes`.
  bpfdiag::Status attach(bpfdiag::BpfSession& s, bool dwarf, bool verbose, uint64_t& probes);
  // The raw keys' addrs (rule << 56 | argument) replaced by ids of (rule, words), the
  // same for every process and report: declared rows merge across processes.
  void name_waits(Snapshot& s, bpfdiag::BpfSession& session);
  // The identity of an id from name_waits (nullptr for anything else).
  const DeclaredName* name(uint64_t id) const;
  // For the start record: each probe pair found, where, and by which rule.
  nlohmann::json start_fields() const;

 private:
  struct Point {
    size_t file;
    bpfdiag::UsdtProbe probe;
    size_t rule;
    bool begin;
    int slot = -1;  // begins: the decl_cfg slot
  };
  std::string words(uint32_t pid, uint64_t raw, bpfdiag::BpfSession& session);
  std::vector<bpfdiag::DeclaredWait> rules_;
  std::vector<bpfdiag::UsdtFile> files_;
  std::vector<Point> points_;
  std::vector<ls_decl_cfg> slots_;
  size_t unreadable_ = 0, no_slot_ = 0;
  std::map<std::pair<size_t, std::string>, uint64_t> ids_;  // (rule, words) -> id
  std::vector<DeclaredName> names_;                         // by id's index
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> raw_ids_;  // (pid, raw addr) -> id
};

}  // namespace lockstat
