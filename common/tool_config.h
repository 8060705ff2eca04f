// A tool's Config from the shared options: parse argv against the tool's ToolSpec and
// copy every shared option the Config has a member for (by name), so each tool's
// parse_args only reads its own options.
//
//   Config c;
//   auto raw = parse_into(spec(), argc, argv, c);   // Result<cxxopts::ParseResult>
//   if (!raw) return Error{raw.error()};
//   if (c.help) return c;
//   c.hist = raw->count("hist");
//
// Copied when present: help json csv ebpf verbose timestamp folded per_thread pids tids
// schedule svg pprof prometheus listen; sort and fields when given (the Config's default stays otherwise);
// entries and stacks when given. Whatever a tool names differently it reads from
// `common` (optional out-parameter).
#pragma once
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/options.h"

namespace bpfdiag {

namespace config_detail {
#define BPFDIAG_HAS_MEMBER(m)                                                      \
  template <typename T, typename = void>                                           \
  struct has_##m : std::false_type {};                                             \
  template <typename T>                                                            \
  struct has_##m<T, std::void_t<decltype(std::declval<T&>().m)>> : std::true_type {};
BPFDIAG_HAS_MEMBER(json)
BPFDIAG_HAS_MEMBER(csv)
BPFDIAG_HAS_MEMBER(ebpf)
BPFDIAG_HAS_MEMBER(verbose)
BPFDIAG_HAS_MEMBER(timestamp)
BPFDIAG_HAS_MEMBER(folded)
BPFDIAG_HAS_MEMBER(per_thread)
BPFDIAG_HAS_MEMBER(pids)
BPFDIAG_HAS_MEMBER(tids)
BPFDIAG_HAS_MEMBER(schedule)
BPFDIAG_HAS_MEMBER(sort)
BPFDIAG_HAS_MEMBER(fields)
BPFDIAG_HAS_MEMBER(entries)
BPFDIAG_HAS_MEMBER(stacks)
BPFDIAG_HAS_MEMBER(svg)
BPFDIAG_HAS_MEMBER(pprof)
BPFDIAG_HAS_MEMBER(prometheus)
BPFDIAG_HAS_MEMBER(listen)
#undef BPFDIAG_HAS_MEMBER
}  // namespace config_detail

template <typename Config>
void copy_common(const CommonOptions& o, Config& c) {
  using C = Config;
  c.help = o.help;
  if constexpr (config_detail::has_json<C>::value) c.json = o.json;
  if constexpr (config_detail::has_csv<C>::value) c.csv = o.csv;
  if constexpr (config_detail::has_ebpf<C>::value) c.ebpf = o.ebpf;
  if constexpr (config_detail::has_verbose<C>::value) c.verbose = o.verbose;
  if constexpr (config_detail::has_timestamp<C>::value) c.timestamp = o.timestamp;
  if constexpr (config_detail::has_folded<C>::value) c.folded = o.folded;
  if constexpr (config_detail::has_per_thread<C>::value) c.per_thread = o.per_thread;
  if constexpr (config_detail::has_pids<C>::value) c.pids = o.pids;
  if constexpr (config_detail::has_tids<C>::value) c.tids = o.tids;
  if constexpr (config_detail::has_schedule<C>::value) c.schedule = o.schedule;
  if constexpr (config_detail::has_sort<C>::value)
    if (!o.sort.empty()) c.sort = o.sort;
  if constexpr (config_detail::has_fields<C>::value)
    if (!o.fields.empty()) c.fields = o.fields;
  if constexpr (config_detail::has_entries<C>::value)
    if (o.entries) c.entries = static_cast<decltype(c.entries)>(*o.entries);
  if constexpr (config_detail::has_stacks<C>::value)
    if (o.stacks) c.stacks = static_cast<decltype(c.stacks)>(*o.stacks);
  if constexpr (config_detail::has_svg<C>::value) c.svg = o.svg;
  if constexpr (config_detail::has_pprof<C>::value) c.pprof = o.pprof;
  if constexpr (config_detail::has_prometheus<C>::value) c.prometheus = o.prometheus;
  if constexpr (config_detail::has_listen<C>::value) c.listen = o.listen;
}

// parse_tool_cli, then copy_common into `c`; returns the raw result for the tool's
// own options.
template <typename Config>
Result<cxxopts::ParseResult> parse_into(const ToolSpec& spec, int argc, char** argv, Config& c,
                                        CommonOptions* common = nullptr) {
  auto parsed = parse_tool_cli(spec, argc, argv);
  if (!parsed) return Error{parsed.error()};
  copy_common(parsed->common, c);
  if (common) *common = parsed->common;
  return parsed->raw;
}

// A tool's spec, made once by `Make` and kept for the process.
template <ToolSpec (*Make)()>
const ToolSpec& cached_spec() {
  static const ToolSpec s = Make();
  return s;
}

// The options every tool's table ends with: -v (with the tool's help text), --ebpf, -h
// and the schedule -i/-c/-d, appended to the tool's own.
inline std::vector<OptionSpec> with_standard_options(std::vector<OptionSpec> own, std::string verbose_help) {
  for (auto o : {opt::verbose(std::move(verbose_help)), opt::ebpf(), opt::help(), opt::interval(), opt::count(),
                 opt::duration()})
    own.push_back(std::move(o));
  return own;
}

// The generated --help of a spec, built once and kept for the process (tool_main
// takes a const char*).
inline const char* help_cstr(const ToolSpec& spec) {
  static std::map<std::string, std::string> cache;
  auto it = cache.find(spec.name);
  if (it == cache.end()) it = cache.emplace(spec.name, render_help(spec)).first;
  return it->second.c_str();
}

}  // namespace bpfdiag
