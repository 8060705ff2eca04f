// BPF-side ID filters (bpf_sources/filters.h): the one way every tool turns -p/-t lists
// into a filter. A TGID_OK/TID_OK list becomes a hash map that BpfSession::load fills
// right after compiling, before any attach (one lookup per event), so the compiled
// program is the same for every list: a 4096-ID list costs no more to compile than one
// ID, and the compiled-object cache (common/bpf_object.h) serves every -p run,
// whatever the PIDs. Other macros are constant expressions. Tools declare filters in
// their BpfPlan (common/bpf_plan.h), which renders them with what is here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

// True for the macros that are map-backed when given IDs (TGID_OK, TID_OK).
bool id_filter_uses_map(const std::string& macro);
// The constant expression of a filter over `ids`: "(1)" with none, else
// "((x)==1||(x)==2)" (no spaces: libbcc splits cflags on white space).
std::string id_filter_expression(const std::vector<uint32_t>& ids);
// The define that switches bpf_sources/filters.h to the map: BPFDIAG_ID_MAP_<MACRO>.
std::string id_map_define(const std::string& macro);

// One map-backed filter: the BPF hash map to fill and its keys.
struct IdMapFilter {
  std::string macro;  // "TGID_OK"
  std::string map;    // "tgid_ok_ids"
  std::vector<uint32_t> ids;
};
IdMapFilter id_map_filter(const std::string& macro, const std::vector<uint32_t>& ids);

// Declarations the program text needs for `maps`, put before it by render_plan: the
// hash map and a `bpfdiag_<map>(x)` lookup per filter, then "#line 1" so diagnostics
// keep the program's own line numbers. "" if `maps` is empty.
std::string id_map_prelude(const std::vector<IdMapFilter>& maps);

// The --cgroup/--container filter (common/cgroup.h): the cgroup v2 directory and its id.
struct CgroupFilter {
  std::string path;
  uint64_t id = 0;
};
// The maps the filter reads (kCgroupArrayMap: BPF_CGROUP_ARRAY holding the directory's
// fd at index 0; kCgroupIdMap: BPF_ARRAY of its id) and bpfdiag_cgroup_current() /
// bpfdiag_cgroup_task(task) (the latter only with the OFF_* defines of
// add_cgroup_filter's task walk), then "#line 1". Always the same text.
constexpr const char* kCgroupArrayMap = "bpfdiag_cgroup";
constexpr const char* kCgroupIdMap = "bpfdiag_cgroup_id";
std::string cgroup_prelude();
// The define that switches bpf_sources/filters.h to the cgroup maps.
constexpr const char* kCgroupDefine = "BPFDIAG_CGROUP";

}  // namespace bpfdiag
