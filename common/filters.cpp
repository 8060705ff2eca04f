#include "common/filters.h"

#include <cctype>

#include "common/cgroup.h"
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

std::string cgroup_prelude() {
  return std::string("BPF_CGROUP_ARRAY(") + kCgroupArrayMap + ", 1);\n" + "BPF_ARRAY(" + kCgroupIdMap +
         ", u64, 1);\n"
         "static inline __attribute__((always_inline)) int bpfdiag_cgroup_current(void) {\n"
         "  return " + kCgroupArrayMap + ".check_current_task(0) == 1;\n"
         "}\n"
         "#ifdef OFF_CGROUP_KN\n"
         "static inline __attribute__((always_inline)) int bpfdiag_cgroup_task(void *task) {\n"
         "  int zero = 0;\n"
         "  u64 *want = " + kCgroupIdMap + ".lookup(&zero);\n"
         "  void *cset = 0, *cg = 0;\n"
         "  if (!want || !task)\n"
         "    return 0;\n"
         "  bpf_probe_read_kernel(&cset, sizeof(cset), task + OFF_TASK_CGROUPS);\n"
         "  if (cset)\n"
         "    bpf_probe_read_kernel(&cg, sizeof(cg), cset + OFF_CSS_SET_DFL_CGRP);\n"
         "  for (int i = 0; i < " + std::to_string(kCgroupWalkDepth) + " && cg; i++) {\n"
         "    void *kn = 0, *parent = 0;\n"
         "    u64 id = 0;\n"
         "    bpf_probe_read_kernel(&kn, sizeof(kn), cg + OFF_CGROUP_KN);\n"
         "    if (kn)\n"
         "      bpf_probe_read_kernel(&id, sizeof(id), kn + OFF_KERNFS_NODE_ID);\n"
         "    if (id == *want)\n"
         "      return 1;\n"
         "    bpf_probe_read_kernel(&parent, sizeof(parent), cg + OFF_CGROUP_SELF + OFF_CSS_PARENT);\n"
         "    cg = parent ? parent - OFF_CGROUP_SELF : 0;\n"
         "  }\n"
         "  return 0;\n"
         "}\n"
         "#endif\n"
         "#line 1\n";
}

}  // namespace bpfdiag
