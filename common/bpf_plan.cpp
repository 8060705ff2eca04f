#include "common/bpf_plan.h"

#include <sstream>

namespace bpfdiag {

BpfPlan& BpfPlan::flag(const std::string& name) {
  defines_[name] = "";
  return *this;
}

BpfPlan& BpfPlan::integer(const std::string& name, uint64_t v, const std::string& suffix) {
  defines_[name] = std::to_string(v) + suffix;
  return *this;
}

BpfPlan& BpfPlan::expression(const std::string& name, const std::string& expr) {
  defines_[name] = expr;
  return *this;
}

BpfPlan& BpfPlan::id_filter(const std::string& macro, const std::vector<uint32_t>& ids) {
  for (auto& f : id_filters_)
    if (f.macro == macro) {
      f.ids = ids;
      return *this;
    }
  id_filters_.push_back({macro, ids});
  return *this;
}

BpfPlan& BpfPlan::cgroup_filter(const std::string& path, uint64_t id) {
  cgroup_ = CgroupFilter{path, id};
  return *this;
}

BpfPlan& BpfPlan::merge(const BpfPlan& other) {
  for (const auto& [k, v] : other.defines_) defines_[k] = v;
  if (other.cgroup_) cgroup_ = other.cgroup_;
  for (const auto& f : other.id_filters_) id_filter(f.macro, f.ids);
  return *this;
}

std::optional<std::string> BpfPlan::value(const std::string& name) const {
  auto it = defines_.find(name);
  if (it == defines_.end()) return std::nullopt;
  return it->second;
}

namespace {
// The defines as the compiler gets them: the plan's, plus one per ID filter.
std::map<std::string, std::string> all_defines(const BpfPlan& plan, std::vector<IdMapFilter>* maps) {
  std::map<std::string, std::string> d = plan.defines();
  for (const auto& f : plan.id_filters()) {
    if (!f.ids.empty() && id_filter_uses_map(f.macro)) {
      maps->push_back(id_map_filter(f.macro, f.ids));
      d[id_map_define(f.macro)] = "1";  // the same whatever the IDs
    } else {
      d[f.macro + "(x)"] = id_filter_expression(f.ids);
    }
  }
  if (plan.cgroup()) d[kCgroupDefine] = "1";  // the same whatever the cgroup
  return d;
}
}  // namespace

Result<RenderedPlan> render_plan(const BpfPlan& plan) {
  RenderedPlan r;
  for (const auto& [name, v] : all_defines(plan, &r.id_maps)) {
    // libbcc splits cflags on white space: such a define would silently become a
    // different (broken) macro, so refuse it loudly
    std::string f = "-D" + name + (v.empty() ? "" : "=" + v);
    if (f.find_first_of(" \t\n") != std::string::npos)
      return Error{"internal error: BPF define contains white space: " + f};
    r.cflags.push_back(f);
  }
  r.cgroup = plan.cgroup();
  r.text = id_map_prelude(r.id_maps) + (r.cgroup ? cgroup_prelude() : "") + plan.text;
  return r;
}

std::string ebpf_listing(const BpfPlan& plan) {
  std::ostringstream os;
  std::vector<IdMapFilter> maps;
  auto defines = all_defines(plan, &maps);
  for (const auto& m : maps)
    os << "/* " << m.macro << ": " << m.ids.size() << " IDs, loaded into map " << m.map << " */\n";
  if (plan.cgroup())
    os << "/* cgroup filter: " << plan.cgroup()->path << " (id " << plan.cgroup()->id << "), loaded into maps "
       << kCgroupArrayMap << " and " << kCgroupIdMap << " */\n";
  for (const auto& [name, v] : defines) os << "#define " << name << (v.empty() ? "" : " " + v) << "\n";
  os << id_map_prelude(maps) << (plan.cgroup() ? cgroup_prelude() : "") << plan.text;
  return os.str();
}

}  // namespace bpfdiag
