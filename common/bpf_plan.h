// A tool's build plan: what its BPF program is compiled with, as typed values (the
// program text, its #defines, the -p/-t ID filters, the tracepoints it needs). Tools
// fill it from their Config and query it (plan.has("WAKERS")); nothing is encoded into
// a flag string and parsed back. It becomes compiler flags only at the compile
// boundary (render_plan, used by BpfSession::load, ebpf_listing and the cache key).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/filters.h"

namespace bpfdiag {

// One -p/-t style filter: BPF code uses `if (!MACRO(tgid)) return 0;`. How it is
// compiled (a constant expression or a hash map filled at load) is render_plan's call.
struct IdFilter {
  std::string macro;  // "TGID_OK"
  std::vector<uint32_t> ids;  // empty: everything passes
};

class BpfPlan {
 public:
  std::string text;                      // the program (common.h etc. already pasted in)
  std::vector<std::string> tracepoints;  // checked by preflight before loading

  // `#define NAME` (present or not).
  BpfPlan& flag(const std::string& name);
  // `#define NAME <v>`; `suffix` e.g. "ULL" for 64-bit comparisons in BPF.
  BpfPlan& integer(const std::string& name, uint64_t v, const std::string& suffix = "");
  // `#define NAME <expr>` for what is neither (e.g. an all-ones constant); no white
  // space (libbcc splits its flags on it: render_plan refuses such an expression).
  BpfPlan& expression(const std::string& name, const std::string& expr);
  // The -p/-t filter MACRO over `ids` (replaces an earlier one of the same macro).
  BpfPlan& id_filter(const std::string& macro, const std::vector<uint32_t>& ids);
  // --cgroup/--container (common/cgroup.h): CGROUP_OK() / CGROUP_TASK_OK(task) in
  // bpf_sources/filters.h pass the tasks of the cgroup at `path` (id `id`) and its
  // descendants. A cgroup array and an id array, filled at load: the compiled program is
  // the same for every cgroup.
  BpfPlan& cgroup_filter(const std::string& path, uint64_t id);
  // Every define and filter of `other` (text and tracepoints stay).
  BpfPlan& merge(const BpfPlan& other);
  void erase(const std::string& name) { defines_.erase(name); }

  bool has(const std::string& name) const { return defines_.count(name) != 0; }
  // The define's value as written ("" for a flag); none when absent.
  std::optional<std::string> value(const std::string& name) const;
  const std::map<std::string, std::string>& defines() const { return defines_; }
  const std::vector<IdFilter>& id_filters() const { return id_filters_; }
  const std::optional<CgroupFilter>& cgroup() const { return cgroup_; }

 private:
  std::map<std::string, std::string> defines_;  // name -> value ("" for a flag)
  std::vector<IdFilter> id_filters_;
  std::optional<CgroupFilter> cgroup_;
};

// The plan as the compiler sees it.
struct RenderedPlan {
  std::string text;                  // the ID maps' prelude (id_map_prelude), then the program
  std::vector<std::string> cflags;   // -DNAME[=VALUE], sorted by name
  std::vector<IdMapFilter> id_maps;  // maps BpfSession::load fills before any attach
  std::optional<CgroupFilter> cgroup;  // the cgroup maps BpfSession::load fills
};
// Filters over TGID_OK/TID_OK with IDs become hash maps (the compiled program is the
// same for every list, so the compiled-object cache serves every -p run); others are
// constant expressions "((x)==1||(x)==2)"; an empty list is "(1)". Error: a define
// with white space in it.
Result<RenderedPlan> render_plan(const BpfPlan& plan);

// Final BPF text as compiled (for --ebpf): the ID maps as comments, the defines as
// #define lines, then the program.
std::string ebpf_listing(const BpfPlan& plan);

}  // namespace bpfdiag
