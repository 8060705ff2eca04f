// Waits software declares with USDT probe pairs (common/wait_sites.h `usdt:` rules,
// e.g. PostgreSQL's lock__wait__start/done): found in the files the targets map,
// attached to a tool's handlers (bpf_sources/declared.h), and named in the software's
// words ("PostgreSQL Lock:transactionid").
//
// PUBLIC API:
//   DeclaredWaits d;
//   d.find(pids, tids);                          // before the BPF program is loaded
//   plan.integer("DECL_BEGINS", d.begin_slots()); // only the begins it attaches compiled
//   d.attach(session, verbose, probes);          // declared_done, then declared_begin_N
//   uint64_t id = d.id_of(pid, raw, session);    // raw identity from BPF -> a stable id
//   const DeclaredName* n = d.name(id);          // n->kind, n->what, n->origin
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/usdt.h"
#include "common/wait_sites.h"

extern "C" {
#include <linux/types.h>

#include "declared_shared.h"
}

namespace bpfdiag {

class BpfSession;

// A declared wait as the front-end named it: the rule's class and origin, the words.
struct DeclaredName {
  WaitKind kind = WaitKind::Unclassified;
  std::string what, origin;
};

class DeclaredWaits {
 public:
  // Finds the rules' probes in the files `pids`/`tids` map (every process when both
  // are empty). A warning when the scan's caps leave processes or files out.
  void find(const std::vector<uint32_t>& pids, const std::vector<uint32_t>& tids);
  bool empty() const { return points_.empty(); }
  bool has_begins() const;
  // The decl_cfg slots the scan filled: the BPF program needs declared_begin_0 ..
  // declared_begin_<n - 1> only (its DECL_BEGINS).
  size_t begin_slots() const { return slots_.size(); }
  // Fills decl_cfg, attaches declared_done at every done probe and then
  // declared_begin_N at every begin (a begin traced always has its done traced).
  // Adds the probes attached to `probes`.
  Status attach(BpfSession& s, bool verbose, uint64_t& probes);
  // The id of a raw identity ((rule + 1) << 56 | argument) of process `pid`: one per
  // (rule, words), the same in every process and report.
  uint64_t id_of(uint32_t pid, uint64_t raw, BpfSession& session);
  // The name behind an id (nullptr for anything else).
  const DeclaredName* name(uint64_t id) const;
  // For start records: each probe pair found, in which file, by which rule.
  nlohmann::json start_fields() const;

 private:
  struct Point {
    size_t file;
    UsdtProbe probe;
    size_t rule;
    bool begin;
    int slot = -1;  // begins: the decl_cfg slot
  };
  std::string words(uint32_t pid, uint64_t raw, BpfSession& session);
  std::vector<DeclaredWait> rules_;
  std::vector<UsdtFile> files_;
  std::vector<Point> points_;
  std::vector<declared_cfg> slots_;
  size_t unreadable_ = 0, no_slot_ = 0;
  std::map<std::pair<size_t, std::string>, uint64_t> ids_;     // (rule, words) -> id
  std::vector<DeclaredName> names_;                            // by id's index
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> raw_ids_;  // (pid, raw) -> id
};

}  // namespace bpfdiag
