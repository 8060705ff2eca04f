#include "common/filters.h"

#include <cctype>

#include "common/parse.h"

namespace bpfdiag {
namespace {

const char kMapPrefix[] = "-DBPFDIAG_ID_MAP_";

bool has_map_variant(const std::string& macro) { return macro == "TGID_OK" || macro == "TID_OK"; }

std::string map_name(const std::string& macro) {
  std::string m;
  for (char ch : macro) m += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return m + "_ids";
}

}  // namespace

// No spaces: libbcc splits cflags on white space, so "(x) == 1" would silently
// become a broken macro (BpfSession::load rejects such flags).
std::string id_filter_cflag(const std::string& macro, const std::vector<uint32_t>& ids) {
  if (!ids.empty() && has_map_variant(macro)) {
    std::string list;
    for (auto id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
    return kMapPrefix + macro + "=" + list;
  }
  std::string e;
  for (auto id : ids) e += (e.empty() ? "" : "||") + std::string("(x)==") + std::to_string(id);
  return "-D" + macro + "(x)=(" + (e.empty() ? "1" : e) + ")";
}

std::vector<IdMapFilter> take_id_maps(std::vector<std::string>& cflags) {
  std::vector<IdMapFilter> out;
  for (auto& f : cflags) {
    if (f.rfind(kMapPrefix, 0) != 0) continue;
    auto eq = f.find('=');
    if (eq == std::string::npos) continue;
    IdMapFilter m;
    m.macro = f.substr(sizeof kMapPrefix - 1, eq - (sizeof kMapPrefix - 1));
    m.map = map_name(m.macro);
    auto ids = parse_id_list(f.substr(eq + 1), "ID");
    if (!ids) continue;  // not ours to judge; the compiler will see it unchanged
    m.ids = *ids;
    f = f.substr(0, eq + 1) + "1";
    out.push_back(std::move(m));
  }
  return out;
}

std::string id_map_prelude(const std::vector<IdMapFilter>& maps) {
  if (maps.empty()) return "";
  std::string p;
  for (const auto& m : maps)
    p += "BPF_HASH(" + m.map + ", unsigned int, unsigned char, " + std::to_string(kMaxIdList) +
         ");\nstatic inline __attribute__((always_inline)) int bpfdiag_" + m.map +
         "(unsigned int x) { return " + m.map + ".lookup(&x) != 0; }\n";
  return p + "#line 1\n";
}

}  // namespace bpfdiag
