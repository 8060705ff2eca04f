#include "common/flamegraph.h"

#include "common/parse.h"
#include "common/runloop.h"

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

namespace bpfdiag {

namespace {

struct Node {
  std::string name;
  bool kernel = false;
  uint64_t value = 0;
  std::map<std::string, std::unique_ptr<Node>> children;  // sorted by name, as flamegraph.pl
};

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (unsigned char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        // XML 1.0 refuses most control characters: replace them
        o += (c < 0x20 && c != '\t') ? '?' : static_cast<char>(c);
    }
  }
  return o;
}

// FNV-1a: a frame keeps its colour across graphs and runs.
uint32_t name_hash(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

std::string color(const Node& n, FlamePalette p) {
  if (n.name == "[unknown]" || n.name.rfind("[Missed", 0) == 0 || n.name == "-")
    return "rgb(190,190,190)";
  uint32_t h = name_hash(n.name);
  double v1 = (h & 0xff) / 255.0, v2 = ((h >> 8) & 0xff) / 255.0;
  int r, g, b;
  if (p == FlamePalette::OnCpu) {
    if (n.kernel) {  // orange-brown
      r = 200 + static_cast<int>(55 * v1), g = 110 + static_cast<int>(60 * v2), b = 40;
    } else {  // red-yellow, as flamegraph.pl's "hot"
      r = 205 + static_cast<int>(50 * v2), g = static_cast<int>(230 * v1), b = static_cast<int>(55 * v2);
    }
  } else {
    if (n.kernel) {  // purple
      r = 140 + static_cast<int>(50 * v1), g = 90 + static_cast<int>(40 * v2), b = 200 + static_cast<int>(55 * v1);
    } else {  // blue-aqua
      r = static_cast<int>(80 * v1), g = 130 + static_cast<int>(100 * v2), b = 190 + static_cast<int>(65 * v1);
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "rgb(%d,%d,%d)", r, g, b);
  return buf;
}

int depth_of(const Node& n) {
  int d = 0;
  for (auto& [k, c] : n.children) d = std::max(d, depth_of(*c));
  return d + 1;
}

std::string fmt_value(uint64_t v) {
  std::string s = std::to_string(v), o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) o += ',';
    o += s[i];
  }
  return o;
}

uint64_t nodes(const Node& n) {
  uint64_t k = 1;
  for (auto& [name, c] : n.children) k += nodes(*c);
  return k;
}

// Differential colour: red where a frame grew (delta > 0), blue where it shrank,
// white when unchanged; `k` in [0, 1] is |delta| relative to the largest change.
std::string diff_color(double delta, double k) {
  const double f = k > 0 ? std::min(1.0, k) : 0.0;  // NaN and negatives: no change
  const int fade = std::clamp(255 - static_cast<int>(200 * f), 55, 255);
  char buf[48];
  if (delta > 0) std::snprintf(buf, sizeof buf, "rgb(255,%d,%d)", fade, fade);
  else if (delta < 0) std::snprintf(buf, sizeof buf, "rgb(%d,%d,255)", fade, fade);
  else std::snprintf(buf, sizeof buf, "rgb(250,250,250)");
  return buf;
}

Node* child(const Node* n, const std::string& name) {
  if (!n) return nullptr;
  auto it = n->children.find(name);
  return it == n->children.end() ? nullptr : it->second.get();
}

double max_abs_delta(const Node& n, const Node* base, double scale_base) {
  double b = base ? static_cast<double>(base->value) * scale_base : 0.0;
  double m = std::abs(static_cast<double>(n.value) - b);
  for (auto& [k, c] : n.children) m = std::max(m, max_abs_delta(*c, child(base, k), scale_base));
  return m;
}

// What of `name` fits a frame `w` pixels wide: the whole name, or its start and "..",
// or nothing (flamegraph.pl's rule: 12px Verdana averages 7px a character, 3px padding
// each side). The full name stays in the frame's title. The script applies the same rule
// when a zoom resizes the frame.
std::string fit_label(const std::string& name, double w) {
  const long n = static_cast<long>((w - 6) / 7);
  if (n < 3) return "";
  if (static_cast<long>(name.size()) <= n) return name;
  size_t cut = static_cast<size_t>(n - 2);
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8 characters
  return name.substr(0, cut) + "..";
}

struct Layout {
  const FlameOptions& o;
  double scale;  // pixels per unit of value
  int top, height;
  uint64_t total;
  uint64_t hidden = 0;
  std::ostringstream out;
  bool diff = false;         // differential: colour from the change against `base`
  double base_scale = 1.0;   // base values scaled to this graph's total
  double max_delta = 0.0;

  void emit(const Node& n, double x, int depth, const Node* base) {
    double w = static_cast<double>(n.value) * scale;
    if (w < o.min_width_px) {
      hidden += nodes(n);
      return;
    }
    int y = top + height - (depth + 1) * o.frame_height;
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.2f", total ? 100.0 * n.value / total : 0.0);
    std::string title = n.name + " (" + fmt_value(n.value) + " " + o.unit + ", " + pct + "%";
    std::string fill = color(n, o.palette);
    if (diff) {
      double before = base ? static_cast<double>(base->value) * base_scale : 0.0;
      double delta = static_cast<double>(n.value) - before;
      char d[64];
      std::snprintf(d, sizeof d, "; %+.0f %s vs before", delta, o.unit.c_str());
      title += d;
      fill = diff_color(delta, max_delta > 0 ? std::abs(delta) / max_delta : 0.0);
    }
    title += ")";
    char geo[160];
    std::snprintf(geo, sizeof geo, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" rx=\"2\"/>",
                  x + 10, y, w, o.frame_height - 1, fill.c_str());
    out << "<g class=\"f\" data-v=\"" << n.value << "\"" << (n.kernel ? " data-k=\"1\"" : "") << "><title>"
        << xml_escape(title) << "</title>" << geo << "<text x=\"" << x + 13 << "\" y=\"" << y + o.frame_height - 5
        << "\">" << xml_escape(fit_label(n.name, w)) << "</text></g>\n";
    double cx = x;
    for (auto& [k, c] : n.children) {
      emit(*c, cx, depth + 1, child(base, k));
      cx += static_cast<double>(c->value) * scale;
    }
  }
};

// The script: kept small and dependency-free. Frames carry their geometry in the
// rect; zoom rescales x/width against the clicked frame, search uses RegExp.
const char kScript[] = R"JS(
var svg=document.documentElement,W=+svg.getAttribute('data-w'),frames=[].slice.call(document.querySelectorAll('g.f'));
var details=document.getElementById('details'),matched=document.getElementById('matched'),unzoom=document.getElementById('unzoom');
frames.forEach(function(g){var r=g.querySelector('rect'),t=g.querySelector('text');
 g._x=+r.getAttribute('x');g._w=+r.getAttribute('width');g._y=+r.getAttribute('y');g._fill=r.getAttribute('fill');
 g._title=g.querySelector('title').textContent;g._name=g._title.substr(0,g._title.lastIndexOf(' ('));
 g.onmouseover=function(){details.textContent=g._title;};g.onmouseout=function(){details.textContent=' ';};
 g.onclick=function(){zoom(g);};});
function label(g,x,w){var t=g.querySelector('text'),n=Math.floor((w-6)/7);t.setAttribute('x',x+3);
 t.textContent=n<3?'':(g._name.length<=n?g._name:g._name.substr(0,n-2)+'..');}
function place(g,x,w){var r=g.querySelector('rect');r.setAttribute('x',x);r.setAttribute('width',w);label(g,x,w);g.style.display='';}
function zoom(z){var x0=z._x,w0=z._w,k=(W-20)/w0;
 frames.forEach(function(g){if(g._y>=z._y){ // the frame, its ancestors: full width if they contain it
   if(g._x<=x0+1e-6&&g._x+g._w>=x0+w0-1e-6){place(g,10,W-20);g.style.opacity=g===z?1:0.6;}else g.style.display='none';}
  else if(g._x>=x0-1e-6&&g._x+g._w<=x0+w0+1e-6){place(g,10+(g._x-x0)*k,g._w*k);g.style.opacity=1;}
  else g.style.display='none';});
 unzoom.style.opacity=1;svg.setAttribute('data-zoomed',z._name);}
function reset(){frames.forEach(function(g){place(g,g._x,g._w);g.style.opacity=1;});unzoom.style.opacity=0.2;svg.removeAttribute('data-zoomed');}
function search(re){var total=+svg.getAttribute('data-total'),covered=[],n=0;
 frames.forEach(function(g){var r=g.querySelector('rect');if(re&&re.test(g._name)){r.setAttribute('fill','rgb(230,0,230)');n++;
   covered.push([g._x,g._x+g._w]);}else r.setAttribute('fill',g._fill);});
 covered.sort(function(a,b){return a[0]-b[0];});var sum=0,end=-1;
 covered.forEach(function(c){if(c[0]>=end){sum+=c[1]-c[0];end=c[1];}else if(c[1]>end){sum+=c[1]-end;end=c[1];}});
 var pct=re?(100*sum/(W-20)):0;svg.setAttribute('data-matches',n);svg.setAttribute('data-match-pct',pct.toFixed(1));
 matched.textContent=re?('Matched: '+pct.toFixed(1)+'% ('+n+' frames)'):' ';}
function ask(){var s=prompt('Search (regular expression):','');if(s===null)return;if(s===''){search(null);return;}
 try{search(new RegExp(s));}catch(e){matched.textContent='bad expression';}}
document.getElementById('search').onclick=ask;unzoom.onclick=reset;
window.addEventListener('keydown',function(e){if((e.ctrlKey||e.metaKey)&&e.key==='f'){e.preventDefault();ask();}
 else if(e.key==='Escape'){reset();search(null);}});
window.flame={zoom:function(name){var f=frames.filter(function(g){return g._name===name;})[0];if(f)zoom(f);return !!f;},
 reset:reset,search:function(s){search(s?new RegExp(s):null);return +svg.getAttribute('data-match-pct');}};
)JS";

}  // namespace

Result<std::vector<FoldedLine>> read_folded(const std::string& text) {
  std::istringstream is(text);
  FoldedLimits whole{UINT64_MAX, SIZE_MAX, SIZE_MAX};  // text already in memory: no bounds
  FoldedReadStats st;
  return read_folded_stream(is, whole, st);
}

Result<std::vector<FoldedLine>> read_folded_stream(std::istream& in, const FoldedLimits& lim, FoldedReadStats& st) {
  std::vector<FoldedLine> out;
  std::string line;
  bool skipping = false;  // inside a line over max_line: drop bytes up to its newline
  uint64_t total = 0, n = 0;
  std::vector<char> buf(1 << 16);
  auto finish_line = [&]() -> Status {
    ++n;
    if (skipping) {
      skipping = false;
      ++st.long_lines;
      return std::nullopt;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) return std::nullopt;
    auto f = parse_folded(line);
    if (!f) return Error{"line " + std::to_string(n) + ": " + f.error()};
    if (f->frames.size() > lim.max_frames) {
      ++st.deep_stacks;
      return std::nullopt;
    }
    ++st.lines;
    out.push_back(std::move(*f));
    return std::nullopt;
  };
  for (;;) {
    size_t want = buf.size();
    if (total + want > lim.max_bytes) want = static_cast<size_t>(lim.max_bytes - total);
    if (want == 0) {
      st.cut = in.peek() != std::char_traits<char>::eof();
      break;
    }
    in.read(buf.data(), static_cast<std::streamsize>(want));
    size_t got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    total += got;
    size_t pos = 0;
    while (pos < got) {
      const char* nl = static_cast<const char*>(std::memchr(buf.data() + pos, '\n', got - pos));
      size_t end = nl ? static_cast<size_t>(nl - buf.data()) : got;
      if (!skipping) {
        if (line.size() + (end - pos) > lim.max_line) {
          skipping = true;
          line.clear();
          line.shrink_to_fit();
        } else {
          line.append(buf.data() + pos, end - pos);
        }
      }
      if (!nl) break;
      if (auto e = finish_line()) return Error{e->message};
      line.clear();
      pos = end + 1;
    }
  }
  if (skipping || !line.empty())
    if (auto e = finish_line()) return Error{e->message};
  return out;
}

std::string FoldedReadStats::warning(const FoldedLimits& lim) const {
  std::string w;
  auto add = [&](const std::string& s) { w += (w.empty() ? "" : "; ") + s; };
  if (long_lines) add("skipped " + std::to_string(long_lines) + " lines longer than " + std::to_string(lim.max_line) + " bytes");
  if (deep_stacks)
    add("skipped " + std::to_string(deep_stacks) + " stacks deeper than " + std::to_string(lim.max_frames) + " frames");
  if (cut) add("read only the first " + std::to_string(lim.max_bytes) + " bytes of the input");
  return w;
}

namespace {
void build_tree(const std::vector<FoldedLine>& stacks, Node& root) {
  root.name = "all";
  for (auto& s : stacks) {
    if (!s.value) continue;
    root.value += s.value;
    Node* cur = &root;
    bool kernel = false;
    for (auto& f : s.frames) {
      if (f == "-") {  // user/kernel separator: not a frame of its own
        kernel = true;
        continue;
      }
      auto& c = cur->children[f];
      if (!c) {
        c = std::make_unique<Node>();
        c->name = f;
        c->kernel = kernel;
      }
      c->value += s.value;
      cur = c.get();
    }
  }
}

std::string render_tree(const Node& root, const FlameOptions& o, const Node* base) {
  const int depth = depth_of(root);
  const int top = 60, height = depth * o.frame_height;
  const int total_h = top + height + 30;
  Layout l{o, root.value ? (o.width - 20.0) / static_cast<double>(root.value) : 0.0, top, height, root.value, 0, {}};
  if (base) {
    l.diff = true;
    l.base_scale = base->value ? static_cast<double>(root.value) / static_cast<double>(base->value) : 0.0;
    l.max_delta = max_abs_delta(root, base, l.base_scale);
  }
  if (root.value) l.emit(root, 0, 0, base);
  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" standalone=\"no\"?>\n"
      << "<svg version=\"1.1\" width=\"" << o.width << "\" height=\"" << total_h << "\" viewBox=\"0 0 " << o.width
      << " " << total_h << "\" xmlns=\"http://www.w3.org/2000/svg\" data-w=\"" << o.width << "\" data-total=\""
      << root.value << "\" data-hidden=\"" << l.hidden << "\">\n"
      << "<style>text{font-family:Verdana,sans-serif;font-size:12px;fill:#000}g.f text{pointer-events:none}"
         "g.f:hover rect{stroke:#000;stroke-width:0.5}#title{font-size:17px}.btn{cursor:pointer}</style>\n"
      << "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"" << (o.palette == FlamePalette::OnCpu ? "#f8f4ec" : "#eef2f8")
      << "\"/>\n"
      << "<text id=\"title\" x=\"" << o.width / 2 << "\" y=\"24\" text-anchor=\"middle\">" << xml_escape(o.title)
      << "</text>\n"
      << "<text x=\"" << o.width / 2 << "\" y=\"42\" text-anchor=\"middle\">" << xml_escape(o.subtitle) << "</text>\n"
      << "<text id=\"unzoom\" class=\"btn\" x=\"10\" y=\"24\" style=\"opacity:0.2\">Reset zoom</text>\n"
      << "<text id=\"search\" class=\"btn\" x=\"" << o.width - 110 << "\" y=\"24\">Search</text>\n"
      << "<text id=\"matched\" x=\"" << o.width - 110 << "\" y=\"" << total_h - 10 << "\"> </text>\n"
      << "<text id=\"details\" x=\"10\" y=\"" << total_h - 10 << "\"> </text>\n"
      << l.out.str() << "<script type=\"text/ecmascript\"><![CDATA[" << kScript << "]]></script>\n</svg>\n";
  return svg.str();
}
}  // namespace

std::string render_flamegraph(const std::vector<FoldedLine>& stacks, const FlameOptions& o) {
  Node root;
  build_tree(stacks, root);
  return render_tree(root, o, nullptr);
}

std::string render_flamegraph_diff(const std::vector<FoldedLine>& before, const std::vector<FoldedLine>& after,
                                   const FlameOptions& o) {
  Node a, b;
  build_tree(before, a);
  build_tree(after, b);
  return render_tree(b, o, &a);
}

Status write_flamegraph_svg(const std::string& path, const std::vector<FoldedLine>& stacks,
                            const FlameOptions& opts) {
  std::string svg = render_flamegraph(stacks, opts);
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out << svg;
  if (out) out.flush();
  if (!out) return Error{"cannot write flame graph " + path + ": " + (errno ? std::strerror(errno) : "write failed")};
  return std::nullopt;
}

RunFlameGraph::RunFlameGraph(std::string path, FlameOptions opts, uint64_t divisor)
    : path_(std::move(path)), opts_(std::move(opts)), divisor_(divisor), start_ns_(monotonic_ns()) {}

FoldedSet& RunFlameGraph::stacks() {
  if (report_boundaries() != boundaries_) {  // the reports before it are not the window's
    stacks_ = FoldedSet{};
    boundaries_ = report_boundaries();
    start_ns_ = last_boundary_ns();
  }
  return stacks_;
}

Status RunFlameGraph::write() const {
  if (!enabled()) return std::nullopt;
  FlameOptions o = opts_;
  o.subtitle += (o.subtitle.empty() ? "" : ", ") + std::string("over ") + format_duration(monotonic_ns() - start_ns_);
  return write_flamegraph_svg(path_, stacks_.stacks(divisor_), o);
}

}  // namespace bpfdiag
