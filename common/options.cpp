#include "common/options.h"

#include "common/metrics.h"

#include <algorithm>
#include <sstream>

namespace bpfdiag {

namespace {
constexpr uint64_t kUs = 1000ULL, kMs = 1000000ULL, kSec = 1000000000ULL, kDay = 86400ULL * kSec;

OptionSpec make(std::string flags, std::string arg, std::string help, std::string group) {
  return OptionSpec{std::move(flags), std::move(arg), std::move(help), std::move(group), false};
}
}  // namespace

namespace opt {
OptionSpec pid(std::string help) { return make("p,pid", "PID[,PID]", std::move(help), "Filters"); }
OptionSpec tid(std::string help) { return make("t,tid", "TID[,TID]", std::move(help), "Filters"); }
OptionSpec cgroup() {
  return make("cgroup", "PATH",
              "only tasks in this cgroup v2 directory or below it\n"
              "(absolute, or under the cgroup2 mount:\n"
              "system.slice/x.service)",
              "Filters");
}
OptionSpec container() {
  return make("container", "ID",
              "only tasks in this container's cgroup (docker,\n"
              "podman, containerd, cri-o; its ID or a unique\n"
              "prefix of 12+ hex digits)",
              "Filters");
}
OptionSpec user_stacks_only(std::string help) { return make("U,user-stacks-only", "", std::move(help), "Output"); }
OptionSpec kernel_stacks_only(std::string help) {
  return make("K,kernel-stacks-only", "", std::move(help), "Output");
}
OptionSpec folded(std::string help) { return make("f,folded", "", std::move(help), "Output"); }
OptionSpec per_thread(std::string help) { return make("P,per-thread", "", std::move(help), "Output"); }
OptionSpec timestamp(std::string help) { return make("T,timestamp", "", std::move(help), "Output"); }
OptionSpec json(std::string help) { return make("j,json", "", std::move(help), "Output"); }
OptionSpec csv(std::string help) { return make("csv", "", std::move(help), "Output"); }
OptionSpec sort(std::string help) { return make("S,sort", "KEY", std::move(help), "Output"); }
OptionSpec fields(std::string help) { return make("fields", "LIST", std::move(help), "Output"); }
OptionSpec entries(std::string help) { return make("n,entries", "N", std::move(help), "Output"); }
OptionSpec stacks(std::string help) { return make("s,stacks", "N", std::move(help), "Output"); }
OptionSpec min(std::string help) { return make("m,min", "TIME", std::move(help), "Filters"); }
OptionSpec max(std::string help) { return make("M,max", "TIME", std::move(help), "Filters"); }
OptionSpec interval() {
  return make("i,interval", "TIME", "print a report every TIME (default unit s, or 500ms, 2m)", "Schedule");
}
OptionSpec count() { return make("c,count", "N", "stop after N interval reports", "Schedule"); }
OptionSpec duration() {
  return make("d,duration", "TIME", "trace for TIME (default unit s), then report", "Schedule");
}
OptionSpec svg(std::string help) { return make("svg", "FILE", std::move(help), "Output"); }
OptionSpec pprof(std::string help) { return make("pprof", "FILE", std::move(help), "Output"); }
OptionSpec prometheus() {
  return make("prometheus", "FILE",
              "write metrics in Prometheus text format to FILE\n"
              "at every report, replaced atomically (for\n"
              "node_exporter's textfile collector: *.prom)",
              "Metrics");
}
OptionSpec listen() {
  return make("listen", "ADDR:PORT",
              "serve the metrics over HTTP (GET /metrics); PORT\n"
              "alone is 127.0.0.1:PORT",
              "Metrics");
}
OptionSpec ebpf() { return make("ebpf", "", "print the BPF program and exit", "Output"); }
OptionSpec verbose(std::string help) { return make("v,verbose", "", std::move(help), "Output"); }
OptionSpec help() { return make("h,help", "", "show this help", "Output"); }
OptionSpec version() { return make("version", "", "print the version and exit", "Output"); }
OptionSpec unwind(std::string help) { return make("unwind", "MODE", std::move(help), "Stacks"); }
OptionSpec jvm_perfmap() {
  return make("jvm-perfmap", "",
              "before tracing, ask each -p target that is a HotSpot\n"
              "JVM (JDK 17+) for its perf map (/tmp/perf-PID.map),\n"
              "as jcmd PID Compiler.perfmap does: Java methods get\n"
              "names without a restart or JVM flags",
              "Stacks");
}
OptionSpec older_name(std::string flags, const OptionSpec& current) {
  OptionSpec o = make(std::move(flags), current.arg, "older name of " + option_names(current).display(), current.group);
  o.hidden = true;
  o.alias_of = option_names(current).key();
  return o;
}
}  // namespace opt

OptionNames option_names(const OptionSpec& o) {
  auto comma = o.flags.find(',');
  if (comma == std::string::npos)
    return o.flags.size() == 1 ? OptionNames{o.flags, ""} : OptionNames{"", o.flags};
  return {o.flags.substr(0, comma), o.flags.substr(comma + 1)};
}

std::string OptionNames::display() const {
  if (short_name.empty()) return "--" + long_name;
  return "-" + short_name + (long_name.empty() ? "" : "/--" + long_name);
}

namespace {

std::pair<std::string, std::string> split_flags(const std::string& flags) {
  auto n = option_names(OptionSpec{flags, "", ""});
  return {n.short_name, n.long_name};
}

std::string key_of(const OptionSpec& o) { return option_names(o).key(); }

const OptionSpec* find(const std::vector<OptionSpec>& options, const std::string& key) {
  for (auto& o : options)
    if (key_of(o) == key) return &o;
  return nullptr;
}

std::string positional_usage(Positional p) {
  switch (p) {
    case Positional::IntervalCount:
      return "[interval [count]]";
    case Positional::Duration:
      return "[duration]";
    case Positional::File:
      return "[FILE]";
    case Positional::Name:
      return "NAME";
    case Positional::None:
      break;
  }
  return "";
}

}  // namespace

std::vector<OptionSpec> all_options(const ToolSpec& spec) {
  std::vector<OptionSpec> out;
  for (auto& o : spec.options) {
    out.push_back(o);
    if (key_of(o) == "help" && !find(spec.options, "version")) out.push_back(opt::version());
  }
  return out;
}

std::string usage_line(const ToolSpec& spec) {
  std::string u = spec.name;
  for (auto& o : all_options(spec)) {
    if (o.hidden) continue;
    auto [s, l] = split_flags(o.flags);
    std::string f = s.empty() ? "--" + l : "-" + s;
    u += " [" + f + (o.arg.empty() ? "" : " " + o.arg) + "]";
  }
  auto p = positional_usage(spec.positional);
  if (!p.empty()) u += " " + p;
  return u;
}

std::string render_help(const ToolSpec& spec) {
  std::ostringstream os;
  os << spec.name << " - " << spec.summary << "\n\nUSAGE: " << usage_line(spec) << "\n\n";
  if (!spec.description.empty()) {
    os << spec.description;
    if (spec.description.back() != '\n') os << '\n';
    os << '\n';
  }
  os << "OPTIONS:\n";
  const std::vector<OptionSpec> options = all_options(spec);
  std::vector<std::string> groups;
  for (auto& o : options)
    if (!o.hidden && std::find(groups.begin(), groups.end(), o.group) == groups.end())
      groups.push_back(o.group);
  constexpr size_t kCol = 24;
  for (auto& g : groups) {
    os << " " << g << ":\n";
    for (auto& o : options) {
      if (o.hidden || o.group != g) continue;
      auto [s, l] = split_flags(o.flags);
      std::string left = "  " + (s.empty() ? std::string("    ") : "-" + s + (l.empty() ? "  " : ", "));
      if (!l.empty()) left += "--" + l;
      if (!o.arg.empty()) left += " " + o.arg;
      std::istringstream lines(o.help);
      std::string line;
      bool first = true;
      while (std::getline(lines, line)) {
        if (first) {
          if (left.size() + 2 > kCol) {
            os << left << "\n" << std::string(kCol, ' ') << line << "\n";
          } else {
            os << left << std::string(kCol - left.size(), ' ') << line << "\n";
          }
          first = false;
        } else {
          os << std::string(kCol, ' ') << line << "\n";
        }
      }
      if (first) os << left << "\n";
    }
  }
  switch (spec.positional) {
    case Positional::IntervalCount:
      os << " interval               print a report every interval (seconds, or with a unit)\n"
            " count                  stop after this many reports\n";
      break;
    case Positional::Duration:
      os << " duration               stop after this long (seconds, or with a unit)\n";
      break;
    case Positional::File:
      os << " FILE                   input file (default: standard input)\n";
      break;
    case Positional::Name:
      os << " NAME                   what to run (--list names them)\n";
      break;
    case Positional::None:
      break;
  }
  if (!spec.examples.empty()) {
    os << "\nEXAMPLES:\n" << spec.examples;
    if (spec.examples.back() != '\n') os << '\n';
  }
  return os.str();
}

const std::string* ParsedCli::value(const std::string& key) const {
  if (const std::string* v = opt_str(raw, key)) return v;
  auto it = given_as.find(key);
  return it == given_as.end() ? nullptr : opt_str(raw, it->second);
}

namespace {
// Older names given: remembered for ParsedCli::value; both names of one option refused.
Status resolve_older_names(const ToolSpec& spec, ParsedCli& p) {
  for (const auto& o : spec.options) {
    if (o.alias_of.empty() || !p.raw.count(key_of(o))) continue;
    const OptionSpec* current = find(spec.options, o.alias_of);
    if (!current) return Error{"internal error: " + o.flags + " is an older name of unknown " + o.alias_of};
    if (p.raw.count(o.alias_of))
      return Error{"give " + option_names(*current).display() + " once (" + option_names(o).display() +
                   " is its older name)"};
    p.given_as[o.alias_of] = key_of(o);
  }
  return std::nullopt;
}
}  // namespace

Result<ParsedCli> parse_tool_cli(const ToolSpec& spec, int argc, char** argv) {
  cxxopts::Options opts(spec.name);
  const std::vector<OptionSpec> options = all_options(spec);
  for (auto& o : options) {
    if (o.arg.empty())
      opts.add_options()(o.flags, "");
    else
      opts.add_options()(o.flags, "", cxxopts::value<std::string>());
  }
  add_positionals(opts);
  auto r = parse_cli(opts, argc, argv);
  if (!r) return Error{r.error()};
  ParsedCli out{*r, {}, {}};
  if (auto st = resolve_older_names(spec, out)) return *st;
  CommonOptions& c = out.common;
  auto has = [&](const char* key) { return find(options, key) && r->count(key); };
  auto str = [&](const char* key) -> const std::string* { return find(options, key) ? out.value(key) : nullptr; };
  c.help = has("help");
  c.json = has("json");
  c.csv = has("csv");
  c.ebpf = has("ebpf");
  c.verbose = has("verbose");
  c.timestamp = has("timestamp");
  c.folded = has("folded");
  c.per_thread = has("per-thread");
  c.user_stacks_only = has("user-stacks-only");
  c.kernel_stacks_only = has("kernel-stacks-only");
  // --help (and --version, which tool_main answers first) win over everything else
  if (c.help || has("version")) return out;
  if (c.user_stacks_only && c.kernel_stacks_only)
    return Error{"-U/--user-stacks-only and -K/--kernel-stacks-only exclude each other"};
  if (c.json && c.csv) return Error{"-j/--json and --csv exclude each other"};
  if (c.json && c.folded) return Error{"-j/--json and -f/--folded exclude each other"};
  if (auto p = str("pid")) {
    auto v = parse_id_list(*p, "PID");
    if (!v) return Error{v.error()};
    c.pids = *v;
  }
  if (auto t = str("tid")) {
    auto v = parse_id_list(*t, "TID");
    if (!v) return Error{v.error()};
    c.tids = *v;
  }
  if (auto s = str("cgroup")) c.cgroup = *s;
  if (auto s = str("container")) c.container = *s;
  if (!c.cgroup.empty() && !c.container.empty()) return Error{"--cgroup and --container exclude each other"};
  if (auto s = str("svg")) c.svg = *s;
  if (auto s = str("pprof")) c.pprof = *s;
  if (auto s = str("prometheus")) c.prometheus = *s;
  if (auto s = str("listen")) {
    c.listen = *s;
    if (auto a = parse_listen_address(*s); !a) return Error{a.error()};
  }
  if (auto s = str("sort")) c.sort = *s;
  if (auto f = str("fields")) c.fields = *f;
  if (auto n = str("entries")) {
    auto v = parse_uint(*n, "-n/--entries", 0, 1000000);
    if (!v) return Error{v.error()};
    c.entries = *v;
  }
  if (auto n = str("stacks")) {
    auto v = parse_uint(*n, "-s/--stacks", 0, 1000);
    if (!v) return Error{v.error()};
    c.stacks = *v;
  }
  if (auto m = str("min")) {
    auto v = parse_duration_ns(*m, "-m/--min", kUs, 0, kDay);
    if (!v) return Error{v.error()};
    c.min_ns = *v;
  }
  if (auto m = str("max")) {
    auto v = parse_duration_ns(*m, "-M/--max", kUs, 1, kDay);
    if (!v) return Error{v.error()};
    c.max_ns = *v;
  }
  if (c.min_ns && c.max_ns && *c.min_ns > *c.max_ns)
    return Error{"-m/--min is larger than -M/--max"};

  // Schedule: the options, or the positional form, not both.
  Schedule& s = c.schedule;
  if (auto v = str("interval")) {
    auto iv = parse_duration_ns(*v, "-i/--interval", kSec, kMs, kDay);
    if (!iv) return Error{iv.error()};
    s.interval_ns = *iv;
  }
  if (auto v = str("count")) {
    auto n = parse_uint(*v, "-c/--count", 1, 1000000000ULL);
    if (!n) return Error{n.error()};
    s.count = *n;
  }
  if (auto v = str("duration")) {
    auto d = parse_duration_ns(*v, "-d/--duration", kSec, kMs, kDay);
    if (!d) return Error{d.error()};
    s.duration_ns = *d;
  }
  auto pos = positionals(*r);
  if (!pos.empty()) {
    if (spec.positional == Positional::None) return Error{"unexpected argument '" + pos[0] + "'"};
    if (spec.positional == Positional::File || spec.positional == Positional::Name) {
      if (pos.size() > 1) return Error{"unexpected argument '" + pos[1] + "'" +
                                  (spec.positional == Positional::File ? " (one input file)" : " (one name)")};
      c.file = pos[0];
      return out;
    }
    if (s.interval_ns || s.count || s.duration_ns)
      return Error{"give the schedule as -i/-c/-d or as positional arguments, not both"};
    Status st = spec.positional == Positional::IntervalCount ? parse_interval_count(pos, s)
                                                             : parse_duration_positional(pos, s);
    if (st) return *st;
  }
  if (s.count && !s.interval_ns) return Error{"-c/--count needs an interval (-i)"};
  return out;
}

}  // namespace bpfdiag
