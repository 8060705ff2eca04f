#include "common/filters.h"

#include <cctype>

#include "common/parse.h"

namespace bpfdiag {

bool id_filter_uses_map(const std::string& macro) { return macro == "TGID_OK" || macro == "TID_OK"; }

std::string id_filter_expression(const std::vector<uint32_t>& ids) {
  std::string e;
  for (auto id : ids) e += (e.empty() ? "" : "||") + std::string("(x)==") + std::to_string(id);
  return "(" + (e.empty() ? std::string("1") : e) + ")";
}

std::string id_map_define(const std::string& macro) { return "BPFDIAG_ID_MAP_" + macro; }

IdMapFilter id_map_filter(const std::string& macro, const std::vector<uint32_t>& ids) {
  std::string m;
  for (char ch : macro) m += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return IdMapFilter{macro, m + "_ids", ids};
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
