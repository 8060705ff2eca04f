// BPF-side ID filters passed as cflags: the one way every tool turns -p/-t lists
// into a filter (bpf_sources/filters.h). A TGID_OK/TID_OK list becomes a hash map that
// BpfSession::load fills right after compiling, before any attach (one lookup per
// event), so the compiled program is the same for every list: a 4096-ID list costs
// no more to compile than one ID, and the compiled-object cache (common/bpf_object.h)
// serves every -p run, whatever the PIDs. Other macros are constant expressions.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace bpfdiag {

// With no IDs, "-DNAME(x)=(1)" (everything passes). For NAME TGID_OK or TID_OK:
// "-DBPFDIAG_ID_MAP_NAME=id,id,..." (see take_id_maps); for other names the constant
// expression "-DNAME(x)=((x)==1||(x)==2)". BPF code uses it as `if (!NAME(tgid)) return 0;`.
std::string id_filter_cflag(const std::string& macro, const std::vector<uint32_t>& ids);

// One map-backed filter: the BPF hash map to fill and its keys.
struct IdMapFilter {
  std::string macro;  // "TGID_OK"
  std::string map;    // "tgid_ok_ids"
  std::vector<uint32_t> ids;
};

// Takes the map-backed filters out of `cflags`, leaving "-DBPFDIAG_ID_MAP_NAME=1" for
// the compiler (the same whatever the IDs). BpfSession::load does this.
std::vector<IdMapFilter> take_id_maps(std::vector<std::string>& cflags);

// Declarations the program text needs for `maps`, put before it by BpfSession::load
// (and ebpf_listing): the hash map and a `bpfdiag_<map>(x)` lookup per filter, then
// "#line 1" so diagnostics keep the program's own line numbers. "" if `maps` is empty.
std::string id_map_prelude(const std::vector<IdMapFilter>& maps);

}  // namespace bpfdiag
