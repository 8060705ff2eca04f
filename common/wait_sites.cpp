// Wait-site rules: parsing, the rule directory and matching (see wait_sites.h).
#include "common/wait_sites.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <iostream>

#include "common/embedded.h"
#include "common/untrusted_file.h"

namespace bpfdiag {

namespace {

constexpr const char* kRuleDir = "/etc/bpfdiag/wait-sites.d";
constexpr size_t kMaxRuleLine = 4096;

bool kind_from(std::string_view s, WaitKind& k) {
  static const std::pair<const char*, WaitKind> kNames[] = {
      {"lock", WaitKind::Lock},   {"condition", WaitKind::Condition}, {"idle", WaitKind::Idle},
      {"sleep", WaitKind::Sleep}, {"io", WaitKind::Io},               {"gil", WaitKind::Gil},
      {"tracer", WaitKind::Tracer}, {"cpu", WaitKind::Cpu},
      {"unclassified", WaitKind::Unclassified}};
  for (const auto& [n, v] : kNames)
    if (s == n) return k = v, true;
  return false;
}

std::string_view next_field(std::string_view& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return s = {}, std::string_view{};
  size_t e = s.find_first_of(" \t", b);
  std::string_view f = s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b);
  s = e == std::string_view::npos ? std::string_view{} : s.substr(e);
  return f;
}

// "CLASS[/own]" -> role, kind, own; false when malformed.
bool parse_class(std::string_view c, WaitRule& r, std::string& why) {
  if (size_t slash = c.find('/'); slash != std::string_view::npos) {
    if (c.substr(slash + 1) != "own") return why = "unknown modifier '" + std::string(c.substr(slash)) + "'", false;
    r.own_word = true;
    c = c.substr(0, slash);
  }
  if (c == "wrapper") return r.role = WaitRule::Role::Wrapper, true;
  if (c.rfind("via", 0) == 0) {
    r.role = WaitRule::Role::Via;
    if (c == "via") return true;
    if (c.size() > 4 && c[3] == ':' && kind_from(c.substr(4), r.kind)) return true;
    return why = "unknown class '" + std::string(c) + "'", false;
  }
  if (!kind_from(c, r.kind)) return why = "unknown class '" + std::string(c) + "'", false;
  r.role = WaitRule::Role::Decides;
  return true;
}

// The function name a rule sees: no "+0x..." offset; C++ names also without their
// parameter list (both forms are tried).
std::string_view strip_offset(std::string_view f) {
  size_t p = f.rfind("+0x");
  return p == std::string_view::npos || p == 0 ? f : f.substr(0, p);
}
std::string_view strip_params(std::string_view f) {
  size_t p = f.find('(');
  return p == std::string_view::npos || p == 0 ? f : f.substr(0, p);
}

// The owner (root) is open_untrusted's policy; the mode is checked here.
bool shared_writable(const UntrustedFile& f) {
  struct stat st {};
  return fstat(f.fd(), &st) != 0 || (st.st_mode & (S_IWGRP | S_IWOTH));
}

// "usdt:PROVIDER:START:DONE" and WHAT -> a declared wait; false (why) when malformed.
bool parse_declared(std::string_view pat, std::string_view what, const WaitRule& r, DeclaredWait& d,
                    std::string& why) {
  if (r.role != WaitRule::Role::Decides || r.own_word)
    return why = "a usdt rule needs a deciding class (not via, wrapper or /own)", false;
  std::string_view f[3];
  pat.remove_prefix(5);
  for (int i = 0; i < 3; ++i) {
    size_t c = i < 2 ? pat.find(':') : std::string_view::npos;
    if (i < 2 && c == std::string_view::npos) return why = "usdt rule is not usdt:PROVIDER:START:DONE", false;
    f[i] = pat.substr(0, c);
    pat = i < 2 ? pat.substr(c + 1) : std::string_view{};
    if (f[i].empty() || f[i].find_first_of(":{}") != std::string_view::npos)
      return why = "usdt rule is not usdt:PROVIDER:START:DONE", false;
  }
  d.kind = r.kind;
  d.provider = std::string(f[0]), d.start = std::string(f[1]), d.done = std::string(f[2]);
  size_t open = what.find('{');
  if (open == std::string_view::npos) return d.prefix = std::string(what), true;
  size_t close = what.find('}', open);
  std::string_view in = close == std::string_view::npos ? std::string_view{} : what.substr(open + 1, close - open - 1);
  if (in.rfind("arg", 0) != 0 || what.find('{', open + 1) != std::string_view::npos)
    return why = "WHAT takes one {argN} or {argN=name,...}", false;
  in.remove_prefix(3);
  size_t eq = in.find('=');
  std::string_view num = in.substr(0, eq);
  if (num.empty() || num.size() > 2 || num.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoi(std::string(num)) < 1 || std::stoi(std::string(num)) > 12)
    return why = "{argN}: N is 1 to 12", false;
  d.name_arg = std::stoi(std::string(num));
  d.name_is_string = eq == std::string_view::npos;
  for (std::string_view l = eq == std::string_view::npos ? std::string_view{} : in.substr(eq + 1); !l.empty();) {
    size_t c = l.find(',');
    d.names.emplace_back(l.substr(0, c));
    l = c == std::string_view::npos ? std::string_view{} : l.substr(c + 1);
  }
  if (!d.name_is_string && d.names.empty()) return why = "{argN=}: no names", false;
  d.prefix = std::string(what.substr(0, open));
  d.suffix = std::string(what.substr(close + 1));
  return true;
}

// The verdict of a deciding rule that matched at `frame` (a frame or class index).
WaitVerdict decided_by(const WaitRule& r, size_t frame) {
  WaitVerdict v;
  v.kind = r.kind;
  v.what = r.what;
  v.frame = frame;
  v.decided = true;
  v.rule = &r;
  return v;
}

}  // namespace

std::string DeclaredWait::what(const std::string& str, uint64_t value) const {
  if (!name_arg) return prefix;
  std::string name = name_is_string ? str : value < names.size() ? names[value] : "#" + std::to_string(value);
  return prefix + name + suffix;
}

WaitRules WaitRules::read_dir(const std::string& dir) {
  WaitRules into;
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) return into;  // no directory: only the built-in rules
  struct stat ds {};
  if (fstat(dfd, &ds) != 0 || ds.st_uid != 0 || (ds.st_mode & (S_IWGRP | S_IWOTH))) {
    ::close(dfd);
    (void)warn_refused(dir, "the rule directory must be owned by root and not writable by group or others");
    return into;
  }
  DIR* d = fdopendir(dfd);
  if (!d) {
    ::close(dfd);
    return into;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 6 && n.compare(n.size() - 6, 6, ".rules") == 0) names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  if (names.size() > kMaxRuleFiles) {
    (void)warn_refused(dir, "more than " + std::to_string(kMaxRuleFiles) + " rule files: only the first are read");
    names.resize(kMaxRuleFiles);
  }
  UntrustedPolicy pol;
  pol.max_size = kMaxRuleFileBytes;
  pol.owner = 0;
  for (const auto& n : names) {
    std::string path = dir + "/" + n;
    UntrustedOpen o = open_untrusted(path, pol);
    if (!o.file) {
      if (!o.refused.empty()) (void)warn_refused(path, o.refused);
      continue;
    }
    if (shared_writable(*o.file)) {
      (void)warn_refused(path, "writable by group or others");
      continue;
    }
    std::string text;
    read_capped_lines(*o.file, kMaxRuleFileBytes, kMaxRuleLine, [&](std::string_view l) {
      text.append(l);
      text.push_back('\n');
    });
    std::vector<std::string> errors;
    into.append(WaitRules::parse(text, path, &errors));
    for (const auto& e : errors)  // one line each, like every other warning
      std::cerr << program_invocation_short_name << ": warning: ignoring rule " << e << "\n";
  }
  return into;
}

const char* wait_kind_name(WaitKind k) {
  switch (k) {
    case WaitKind::Lock: return "lock";
    case WaitKind::Condition: return "condition";
    case WaitKind::Idle: return "idle";
    case WaitKind::Sleep: return "sleep";
    case WaitKind::Io: return "io";
    case WaitKind::Gil: return "gil";
    case WaitKind::Tracer: return "tracer";
    case WaitKind::Cpu: return "cpu";
    case WaitKind::Unclassified: return "unclassified";
  }
  return "unclassified";
}

bool glob_match(std::string_view p, std::string_view t) {
  // the classic two-pointer match: on a mismatch, retry from the last '*' one
  // character further (O(|p| * |t|) at worst)
  size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (pi < p.size() && p[pi] == t[ti]) {
      ++pi, ++ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

WaitRules WaitRules::parse(std::string_view text, const std::string& origin, std::vector<std::string>* errors) {
  WaitRules out;
  size_t lineno = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++lineno;
    if (size_t h = line.find('#'); h != std::string_view::npos) line = line.substr(0, h);
    std::string_view rest = line;
    std::string_view cls = next_field(rest), pat = next_field(rest);
    if (cls.empty()) continue;
    auto fail = [&](const std::string& why) {
      if (errors) errors->push_back(origin + ":" + std::to_string(lineno) + ": " + why);
    };
    WaitRule r;
    std::string why;
    if (!parse_class(cls, r, why)) { fail(why); continue; }
    if (pat.empty()) { fail("no pattern"); continue; }
    if (pat.size() > kMaxRulePattern) { fail("pattern longer than " + std::to_string(kMaxRulePattern)); continue; }
    size_t b = rest.find_first_not_of(" \t"), e = rest.find_last_not_of(" \t\r");
    r.what = b == std::string_view::npos ? std::string(pat) : std::string(rest.substr(b, e - b + 1));
    r.pattern = std::string(pat);
    r.origin = origin + ":" + std::to_string(lineno);
    if (out.rules_.size() + out.declared_.size() >= kMaxRules) { fail("more than " + std::to_string(kMaxRules) + " rules"); break; }
    if (pat.rfind("usdt:", 0) == 0) {
      DeclaredWait d;
      if (!parse_declared(pat, r.what, r, d, why)) { fail(why); continue; }
      d.origin = r.origin;
      out.declared_.push_back(std::move(d));
      continue;
    }
    if (out.rules_.size() >= kMaxRules) { fail("more than " + std::to_string(kMaxRules) + " rules"); break; }
    if (pat.rfind("java:", 0) == 0) {
      if (r.role != WaitRule::Role::Decides || r.own_word) { fail("a java: rule must decide (no via, wrapper or /own)"); continue; }
      r.pattern = std::string(pat.substr(5));
      out.objects_.push_back(std::move(r));
      continue;
    }
    if (pat.rfind("go:", 0) == 0) {
      if (r.role != WaitRule::Role::Decides || r.own_word) { fail("a go: rule must decide (no via, wrapper or /own)"); continue; }
      if (pat.size() == 3 || pat[3] == '@') { fail("a go: rule needs a wait reason (go:REASON[@FRAME])"); continue; }
      r.pattern = std::string(pat.substr(3));
      out.go_.push_back(std::move(r));
      continue;
    }
    out.rules_.push_back(std::move(r));
  }
  return out;
}

void WaitRules::append(const WaitRules& more) {
  for (const auto& r : more.rules_) {
    if (rules_.size() >= kMaxRules) break;
    rules_.push_back(r);
  }
  for (const auto& d : more.declared_)
    if (rules_.size() + declared_.size() < kMaxRules) declared_.push_back(d);
  for (const auto& o : more.objects_)
    if (objects_.size() < kMaxRules) objects_.push_back(o);
  for (const auto& o : more.go_)
    if (go_.size() < kMaxRules) go_.push_back(o);
  std::lock_guard<std::mutex> g(memo_->mu);
  memo_->hits.clear();  // indexes into rules_ are kept: appended rules change matches
}

const WaitRules& WaitRules::suite() {
  static const WaitRules rules = [] {
    WaitRules r;
    for (const EmbeddedFile* f = kEmbeddedWaitRules; f->name; ++f) r.append(parse(f->text, f->name));
    const char* env = std::getenv("BPFDIAG_WAIT_RULES");
    r.append(read_dir(env && *env ? env : kRuleDir));
    return r;
  }();
  return rules;
}

const WaitRule* WaitRules::match(const std::string& frame, WaitRule::Role role, bool any_role) const {
  std::string_view name = strip_offset(frame), bare = strip_params(name);
  for (const auto& r : rules_) {
    bool role_ok = any_role ? r.role != WaitRule::Role::Wrapper : r.role == role;
    if (role_ok && (glob_match(r.pattern, name) || (bare.size() != name.size() && glob_match(r.pattern, bare))))
      return &r;
  }
  return nullptr;
}

std::pair<uint32_t, uint32_t> WaitRules::lookup(const std::string& frame) const {
  constexpr size_t kMaxMemo = 1 << 16;  // distinct frames kept; then started afresh
  {
    std::lock_guard<std::mutex> g(memo_->mu);
    auto it = memo_->hits.find(frame);
    if (it != memo_->hits.end()) return it->second;
  }
  const WaitRule* d = match(frame, WaitRule::Role::Decides, true);
  const WaitRule* w = match(frame, WaitRule::Role::Wrapper, false);
  std::pair<uint32_t, uint32_t> hit{d ? uint32_t(d - rules_.data()) + 1 : 0, w ? uint32_t(w - rules_.data()) + 1 : 0};
  std::lock_guard<std::mutex> g(memo_->mu);
  if (memo_->hits.size() >= kMaxMemo) memo_->hits.clear();
  memo_->hits.emplace(frame, hit);
  return hit;
}

WaitVerdict WaitRules::classify(const std::vector<std::string>& frames) const {
  // one pass: a tracer frame anywhere wins; else the innermost deciding frame; else
  // the outermost via inside the stack
  const WaitRule *decider = nullptr, *via = nullptr, *inner_via = nullptr;
  size_t decider_at = 0, via_at = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    uint32_t at = lookup(frames[i]).first;
    if (!at) continue;
    const WaitRule* r = &rules_[at - 1];
    if (r->role == WaitRule::Role::Decides && r->kind == WaitKind::Tracer) {
      decider = r, decider_at = i;
      break;
    }
    if (r->role == WaitRule::Role::Via) {
      if (!decider) via = r, via_at = i;  // the outermost via so far
    } else if (!decider) {
      decider = r, decider_at = i, inner_via = via;
    }
  }
  WaitVerdict v;
  const WaitRule* r = decider ? decider : via;
  if (!r) return v;
  v.kind = r->kind;
  v.what = r->what;
  v.frame = decider ? decider_at : via_at;
  v.decided = decider != nullptr;
  // the word is the thread's own when the deciding frame or a via inside it says so
  v.own_word = r->own_word || (decider && inner_via && inner_via->own_word);
  v.rule = r;
  return v;
}

WaitVerdict WaitRules::classify_object(const std::vector<std::string>& classes) const {
  for (size_t i = 0; i < classes.size(); ++i)
    for (const auto& r : objects_)
      if (glob_match(r.pattern, classes[i])) return decided_by(r, i);
  return {};
}

WaitVerdict WaitRules::classify_go(const std::string& reason, const std::vector<std::string>& frames) const {
  std::string r = reason;
  for (char& c : r)
    if (c == ' ') c = '_';
  for (const auto& rule : go_) {
    std::string_view pat = rule.pattern, frame_glob;
    if (size_t at = pat.find('@'); at != std::string_view::npos) frame_glob = pat.substr(at + 1), pat = pat.substr(0, at);
    if (!glob_match(pat, r)) continue;
    size_t hit = std::string::npos;
    if (!frame_glob.empty()) {
      for (size_t i = 0; i < frames.size() && hit == std::string::npos; ++i) {
        std::string_view name = strip_offset(frames[i]);
        if (glob_match(frame_glob, name)) hit = i;
      }
      if (hit == std::string::npos) continue;
    }
    return decided_by(rule, hit);
  }
  return {};
}

bool WaitRules::is_wrapper(const std::string& frame) const { return lookup(frame).second != 0; }

}  // namespace bpfdiag
