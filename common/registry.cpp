#include "common/registry.h"

namespace bpfdiag {

const ToolEntry* find_tool(const std::vector<const ToolEntry*>& tools, const std::string& name) {
  for (const ToolEntry* t : tools)
    if (t->name == name) return t;
  return nullptr;
}

std::string tool_names(const std::vector<const ToolEntry*>& tools) {
  std::string s;
  for (const ToolEntry* t : tools) s += (s.empty() ? "" : " ") + t->name;
  return s;
}

nlohmann::json tool_json(const ToolEntry& t) {
  const ToolSpec& spec = t.spec();
  nlohmann::json options = nlohmann::json::array();
  for (const OptionSpec& o : all_options(spec)) {
    if (o.hidden) continue;  // an older name: accepted, not documented
    OptionNames n = option_names(o);
    options.push_back({{"short", n.short_name}, {"long", n.long_name}, {"arg", o.arg}, {"group", o.group}});
  }
  nlohmann::json modes = nlohmann::json::array();
  for (const ModeNeeds& m : t.modes)
    modes.push_back({{"mode", m.mode},
                     {"tracepoints", m.tracepoints},
                     {"raw_tracepoints", m.raw_tracepoints},
                     {"perf_cpu_clock", m.perf_cpu_clock},
                     {"uprobes", m.uprobes},
                     {"gives", m.gives}});
  return {{"tool", t.name},
          {"summary", spec.summary},
          {"usage", usage_line(spec)},
          {"options", std::move(options)},
          {"modes", std::move(modes)},
          {"bpf_variants", t.bpf_variants}};
}

}  // namespace bpfdiag
