// Go binaries: version, gopark's probe points, waitReason strings (see go_runtime.h).
#include "common/go_runtime.h"

#include <bcc/libbpf.h>
#include <elf.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "common/bpf_session.h"
#include "common/elf_file.h"
#include "common/go_pclntab.h"
#include "common/untrusted_file.h"

namespace bpfdiag {

namespace {

bool is_legacy_prefix(uint8_t b) {
  return b == 0x66 || b == 0x67 || b == 0xf0 || b == 0xf2 || b == 0xf3 || b == 0x2e || b == 0x36 || b == 0x3e ||
         b == 0x26 || b == 0x64 || b == 0x65;
}

// One-byte opcodes without ModRM that are invalid in 64-bit mode (or EVEX/escape
// bytes handled apart).
bool invalid_64(uint8_t op) {
  switch (op) {
    case 0x06: case 0x07: case 0x0e: case 0x16: case 0x17: case 0x1e: case 0x1f: case 0x27: case 0x2f:
    case 0x37: case 0x3f: case 0x60: case 0x61: case 0x62: case 0x82: case 0x9a: case 0xce: case 0xd4:
    case 0xd5: case 0xd6: case 0xea:
      return true;
    default: return false;
  }
}

}  // namespace

X86Length decode_x86_length(const uint8_t* p, size_t n) {
  X86Length d;
  size_t i = 0;
  bool opsize = false, plain = true;  // plain: no prefix at all (a 0x90 is then a nop)
  while (i < n && i < 14 && is_legacy_prefix(p[i])) {
    if (p[i] == 0x66) opsize = true;
    plain = false;
    ++i;
  }
  uint8_t rex = 0;
  if (i < n && (p[i] & 0xf0) == 0x40) rex = p[i++], plain = false;
  if (i >= n) return d;
  const bool rex_w = rex & 8;
  uint8_t op = p[i++];
  auto modrm = [&]() -> bool {
    if (i >= n) return false;
    uint8_t m = p[i++];
    unsigned mod = m >> 6, rm = m & 7;
    if (mod == 3) return true;
    if (rm == 4) {
      if (i >= n) return false;
      uint8_t sib = p[i++];
      if (mod == 0 && (sib & 7) == 5) i += 4;
    }
    if (mod == 0 && rm == 5) i += 4;
    else if (mod == 1) i += 1;
    else if (mod == 2) i += 4;
    return i <= n;
  };
  auto reg_of_modrm = [&]() -> int { return i < n ? (p[i] >> 3) & 7 : -1; };
  auto done = [&](size_t imm) -> X86Length {
    i += imm;
    if (i > n || i > 15) return X86Length{};
    d.ok = true;
    d.len = static_cast<unsigned>(i);
    return d;
  };
  auto rel = [&](size_t width) -> X86Length {
    if (i + width > n) return X86Length{};
    int64_t v = width == 1 ? int64_t(int8_t(p[i])) : int64_t(int32_t(uint32_t(p[i]) | uint32_t(p[i + 1]) << 8 |
                                                                      uint32_t(p[i + 2]) << 16 | uint32_t(p[i + 3]) << 24));
    d.rel = v;
    return done(width);
  };
  const size_t imm_z = opsize ? 2 : 4;

  // VEX (two and three bytes): the opcode map and then an ordinary ModRM instruction
  if (op == 0xc4 || op == 0xc5) {
    if (rex || opsize) return d;  // VEX after REX/66 is #UD
    unsigned map = 1;
    if (op == 0xc4) {
      if (i + 2 > n) return d;
      map = p[i] & 0x1f;
      i += 2;
    } else {
      if (i + 1 > n) return d;
      i += 1;
    }
    if (i >= n || map < 1 || map > 3) return d;
    uint8_t vop = p[i++];
    if (map == 1 && vop == 0x77) return done(0);  // vzeroupper/vzeroall
    if (!modrm()) return d;
    bool imm8 = map == 3 || (map == 1 && ((vop >= 0x70 && vop <= 0x73) || vop == 0xc2 || (vop >= 0xc4 && vop <= 0xc6)));
    return done(imm8 ? 1 : 0);
  }
  if (op == 0x0f) {
    if (i >= n) return d;
    uint8_t op2 = p[i++];
    if (op2 == 0x38) {  // three-byte map 0F38: ModRM, no immediate
      if (i >= n) return d;
      ++i;
      return modrm() ? done(0) : d;
    }
    if (op2 == 0x3a) {  // 0F3A: ModRM + imm8
      if (i >= n) return d;
      ++i;
      return modrm() ? done(1) : d;
    }
    if (op2 >= 0x80 && op2 <= 0x8f) {
      d.jcc = d.emulated = true;
      return rel(4);
    }
    switch (op2) {
      case 0x05: case 0x06: case 0x07: case 0x08: case 0x09: case 0x0b: case 0x30: case 0x31: case 0x32:
      case 0x33: case 0x34: case 0x35: case 0x77: case 0xa0: case 0xa1: case 0xa2: case 0xa8: case 0xa9:
      case 0xaa:
        return done(0);
      case 0x04: case 0x0a: case 0x0c: case 0x0e: case 0x0f: case 0x24: case 0x25: case 0x26: case 0x27:
      case 0x36: case 0x39: case 0x3b: case 0x3c: case 0x3d: case 0x3e: case 0x3f: case 0x7a: case 0x7b:
      case 0xa6: case 0xa7: case 0xff:
        return d;  // invalid or not decoded (3DNow!)
      default: break;
    }
    if (op2 >= 0xc8 && op2 <= 0xcf) return done(0);  // bswap
    if (!modrm()) return d;
    if (op2 == 0x1f) d.emulated = plain || opsize;  // nopl/nopw
    bool imm8 = (op2 >= 0x70 && op2 <= 0x73) || op2 == 0xa4 || op2 == 0xac || op2 == 0xba || op2 == 0xc2 ||
                (op2 >= 0xc4 && op2 <= 0xc6);
    return done(imm8 ? 1 : 0);
  }
  if (invalid_64(op)) return d;
  if (op < 0x40) {  // the eight ALU groups (prefix bytes were taken above)
    switch (op & 7) {
      case 0: case 1: case 2: case 3: return modrm() ? done(0) : d;
      case 4: return done(1);
      case 5: return done(imm_z);
    }
    return d;
  }
  if (op >= 0x50 && op <= 0x57) {
    d.emulated = !opsize;  // push reg
    return done(0);
  }
  if (op >= 0x58 && op <= 0x5f) return done(0);
  if (op >= 0x70 && op <= 0x7f) {
    d.jcc = d.emulated = true;
    return rel(1);
  }
  if (op >= 0x91 && op <= 0x9f) return done(0);
  if (op == 0x90) {
    d.emulated = plain;  // with REX.B it is xchg r8,rax
    return done(0);
  }
  if (op >= 0xb0 && op <= 0xb7) return done(1);
  if (op >= 0xb8 && op <= 0xbf) return done(rex_w ? 8 : imm_z);
  if (op >= 0xd8 && op <= 0xdf) return modrm() ? done(0) : d;  // x87
  switch (op) {
    case 0x63: case 0x84: case 0x85: case 0x86: case 0x87: case 0x88: case 0x89: case 0x8a: case 0x8b:
    case 0x8c: case 0x8d: case 0x8e: case 0x8f: case 0xd0: case 0xd1: case 0xd2: case 0xd3: case 0xfe:
      return modrm() ? done(0) : d;
    case 0xff: {
      int r = reg_of_modrm();
      if (r == 7) return d;
      if (r == 4 || r == 5) d.jmp = true;
      return modrm() ? done(0) : d;
    }
    case 0x68: return done(imm_z);
    case 0x6a: return done(1);
    case 0x69: return modrm() ? done(imm_z) : d;
    case 0x6b: case 0x80: case 0x83: case 0xc0: case 0xc1: case 0xc6: return modrm() ? done(1) : d;
    case 0x81: case 0xc7: return modrm() ? done(imm_z) : d;
    case 0x6c: case 0x6d: case 0x6e: case 0x6f: case 0xa4: case 0xa5: case 0xa6: case 0xa7: case 0xaa:
    case 0xab: case 0xac: case 0xad: case 0xae: case 0xaf: case 0xc9: case 0xcb: case 0xcc: case 0xcf:
    case 0xd7: case 0xec: case 0xed: case 0xee: case 0xef: case 0xf1: case 0xf4: case 0xf5: case 0xf8:
    case 0xf9: case 0xfa: case 0xfb: case 0xfc: case 0xfd:
      return done(0);
    case 0xa0: case 0xa1: case 0xa2: case 0xa3: return done(8);  // moffs64 (67 prefix not decoded: rare)
    case 0xa8: return done(1);
    case 0xa9: return done(imm_z);
    case 0xc2: case 0xca: d.ret = op == 0xc2; return done(2);
    case 0xc3: d.ret = true; return done(0);
    case 0xc8: return done(3);
    case 0xcd: case 0xe4: case 0xe5: case 0xe6: case 0xe7: return done(1);
    case 0xe0: case 0xe1: case 0xe2: case 0xe3: return rel(1);
    case 0xe8:
      if (opsize) return d;
      d.call_rel = d.emulated = true;
      return rel(4);
    case 0xe9:
      if (opsize) return d;
      d.jmp = d.emulated = true;
      return rel(4);
    case 0xeb:
      d.jmp = d.emulated = true;
      return rel(1);
    case 0xf6: case 0xf7: {
      int r = reg_of_modrm();
      if (!modrm()) return d;
      return done(r == 0 || r == 1 ? (op == 0xf6 ? 1 : imm_z) : 0);
    }
    default: break;
  }
  return d;
}

Result<GoparkPoints> find_gopark_points(const uint8_t* code, size_t n, uint64_t addr, uint64_t mcall) {
  // decode the whole function once from its first byte: every point is an instruction start
  struct Insn {
    uint64_t off;
    X86Length l;
  };
  std::vector<Insn> insns;
  for (size_t off = 0; off < n;) {
    X86Length l = decode_x86_length(code + off, n - off);
    if (!l.ok) break;  // padding (int3) decodes; data or an unknown opcode ends the walk
    insns.push_back({off, l});
    off += l.len;
  }
  if (insns.empty()) return Error{"cannot decode runtime.gopark's first instruction"};
  GoparkPoints pts;
  // park: `cmp 0x10(%r14),%rsp` (49 3b 66 10) among the first instructions, then a jcc
  // to the function's own morestack call
  for (size_t k = 0; k + 1 < insns.size() && k < 4; ++k) {
    const uint8_t* c = code + insns[k].off;
    if (insns[k].l.len == 4 && c[0] == 0x49 && c[1] == 0x3b && c[2] == 0x66 && c[3] == 0x10 && insns[k + 1].l.jcc) {
      int64_t target = int64_t(insns[k + 1].off + insns[k + 1].l.len) + insns[k + 1].l.rel;
      if (target <= int64_t(insns[k + 1].off) || target >= int64_t(n))
        return Error{"runtime.gopark's stack check does not branch inside the function"};
      pts.park = insns[k + 1].off;
      break;
    }
  }
  if (!pts.park) return Error{"runtime.gopark does not begin with the register-ABI stack check (cmp 0x10(%r14),%rsp)"};
  // resume: after the call to runtime.mcall, before the ret
  size_t k = 0;
  for (; k < insns.size(); ++k)
    if (insns[k].l.call_rel && addr + insns[k].off + insns[k].l.len + insns[k].l.rel == mcall) break;
  if (k + 1 >= insns.size()) return Error{"no call to runtime.mcall found in runtime.gopark"};
  pts.resume = insns[k + 1].off;
  for (size_t j = k + 1; j < insns.size() && j < k + 8; ++j) {
    if (insns[j].l.ret || insns[j].l.jmp || insns[j].l.jcc || insns[j].l.call_rel) {
      if (insns[j].l.emulated && !insns[j].l.ret) pts.resume = insns[j].off, pts.resume_emulated = true;
      break;
    }
    if (insns[j].l.emulated) {
      pts.resume = insns[j].off;
      pts.resume_emulated = true;
      break;
    }
  }
  return pts;
}

bool is_go_runtime_frame(const std::string& f) {
  for (const char* p : {"runtime.", "sync.", "internal/", "sync/atomic."})
    if (f.rfind(p, 0) == 0) return true;
  return f.rfind("time.Sleep", 0) == 0 || f.rfind("[unknown]", 0) == 0;
}

std::string GoBinary::reason(uint32_t v) const {
  if (v < reasons.size() && !reasons[v].empty()) return reasons[v];
  return "reason " + std::to_string(v);
}

namespace {

struct Opened {
  std::shared_ptr<UntrustedFile> file;
  std::unique_ptr<ElfFile> elf;
};

Opened open_elf(const std::string& path, bool follow_links) {
  UntrustedPolicy pol;
  pol.follow_links = follow_links;
  auto r = open_untrusted(path, pol);
  Opened o;
  o.file = r.file;
  if (r.file) o.elf = ElfFile::open(r.file);
  return o;
}

bool read_va(const ElfFile& e, uint64_t va, size_t len, std::vector<uint8_t>& out) {
  auto off = file_offset_of(e, va, len);
  return off && e.read(*off, len, out);
}

// "go1.19.8" from .go.buildinfo: inline (Go >= 1.18: flags & 2, uvarint length + bytes
// at +32) or two pointers to string headers (Go 1.17 and older).
std::string go_version(const ElfFile& e) {
  auto va = e.section_addr(".go.buildinfo");
  std::vector<uint8_t> h;
  if (!va || !read_va(e, *va, 32 + 10 + 32, h)) {
    if (!va || !read_va(e, *va, 32, h)) return "";
  }
  if (std::memcmp(h.data(), "\xff Go buildinf:", 14) != 0) return "";
  uint8_t ptr = h[14], flags = h[15];
  if (flags & 2) {
    if (h.size() < 33) return "";
    uint64_t len = 0;
    size_t i = 32;
    for (int shift = 0; i < h.size() && shift < 64; shift += 7, ++i) {
      len |= uint64_t(h[i] & 0x7f) << shift;
      if (!(h[i] & 0x80)) {
        ++i;
        break;
      }
    }
    if (len == 0 || len > 32) return "";
    std::vector<uint8_t> s;
    if (!read_va(e, *va + i, len, s)) return "";
    return std::string(s.begin(), s.end());
  }
  if (ptr != 8 || (flags & 1)) return "";  // 64-bit little endian only
  std::vector<uint8_t> hdr, s;
  if (!read_va(e, read_le(h.data() + 16, 8), 16, hdr)) return "";
  uint64_t sp = read_le(hdr.data(), 8), sl = read_le(hdr.data() + 8, 8);
  if (sl == 0 || sl > 32 || !read_va(e, sp, sl, s)) return "";
  return std::string(s.begin(), s.end());
}

unsigned go_minor(const std::string& v) {
  if (v.rfind("go1.", 0) != 0) return 0;
  unsigned m = 0;
  for (size_t i = 4; i < v.size() && i < 8 && v[i] >= '0' && v[i] <= '9'; ++i) m = m * 10 + unsigned(v[i] - '0');
  return m;
}

// runtime.waitReasonStrings: an array of Go string headers {ptr, len}, entry 0 "".
std::vector<std::string> wait_reasons(const ElfFile& e, uint64_t va, uint64_t size) {
  std::vector<std::string> out;
  size_t count = size ? std::min<uint64_t>(size / 16, kMaxGoWaitReasons) : kMaxGoWaitReasons;
  std::vector<uint8_t> tab;
  if (!read_va(e, va, count * 16, tab)) return out;
  for (size_t i = 0; i < count; ++i) {
    uint64_t p = read_le(tab.data() + 16 * i, 8), l = read_le(tab.data() + 16 * i + 8, 8);
    if (l == 0) {
      if (i > 0) break;
      out.emplace_back();
      continue;
    }
    std::vector<uint8_t> s;
    if (l > kMaxGoReasonLen || !read_va(e, p, l, s)) break;
    bool printable = true;
    for (uint8_t c : s) printable = printable && c >= 0x20 && c < 0x7f;
    if (!printable) break;
    out.emplace_back(s.begin(), s.end());
  }
  if (out.empty() || !out[0].empty()) return {};  // not the table we know
  return out;
}

// A stripped binary has no symbol for runtime.waitReasonStrings: the table is found by
// its shape in the data sections: an entry {0, 0} ("") followed by string headers that
// point at printable text, among them "chan receive" and "select" (names every Go
// release since 1.0 has used). Bounded: kMaxGoDataScan bytes per section, one read each.
constexpr uint64_t kMaxGoDataScan = 16ull << 20;
std::vector<std::string> find_wait_reasons(const ElfFile& e) {
  auto ro = e.section(".rodata");
  if (!ro || !ro->size) return {};
  auto in_ro = [&](uint64_t p, uint64_t l) { return p >= ro->addr && l <= ro->size && p - ro->addr <= ro->size - l; };
  for (const char* name : {".data", ".noptrdata", ".data.rel.ro"}) {
    auto s = e.section(name);
    std::vector<uint8_t> d;
    if (!s || s->type == SHT_NOBITS || s->size < 64 || s->size > kMaxGoDataScan || !e.read(s->offset, s->size, d))
      continue;
    for (uint64_t at = 0; at + 64 <= d.size(); at += 8) {
      if (read_le(&d[at], 8) || read_le(&d[at + 8], 8)) continue;
      bool shape = true;  // the next three entries: short strings in .rodata
      for (int k = 1; k <= 3 && shape; ++k) {
        uint64_t p = read_le(&d[at + 16 * k], 8), l = read_le(&d[at + 16 * k + 8], 8);
        shape = l > 0 && l <= kMaxGoReasonLen && in_ro(p, l);
      }
      if (!shape) continue;
      auto r = wait_reasons(e, s->addr + at, 0);
      if (std::find(r.begin(), r.end(), "chan receive") != r.end() && std::find(r.begin(), r.end(), "select") != r.end())
        return r;
    }
  }
  return {};
}

}  // namespace

bool is_go_binary(const std::string& path) {
  Opened o = open_elf(path, true);
  return o.elf && (o.elf->section_addr(".go.buildinfo") || o.elf->section_addr(".gopclntab"));
}

Result<GoBinary> inspect_go_binary(const std::string& path, bool follow_links) {
  Opened o = open_elf(path, follow_links);
  if (!o.elf) return Error{"not a readable ELF file"};
  const ElfFile& e = *o.elf;
  if (!e.section_addr(".go.buildinfo") && !e.section_addr(".gopclntab")) return Error{"not a Go program"};
  std::vector<uint8_t> eh;
  if (!e.read(18, 2, eh) || (eh[0] | eh[1] << 8) != 62 /* EM_X86_64 */)
    return Error{"a Go program for another architecture than amd64 (not supported)"};
  GoBinary g;
  g.version = go_version(e);
  g.minor = go_minor(g.version);
  if (g.version.empty()) return Error{"a Go program whose version cannot be read (.go.buildinfo)"};
  if (g.minor < kMinGoMinor)
    return Error{"built with " + g.version + ": goroutine waits need Go 1.17 or later (register ABI)"};
  std::map<std::string, std::pair<uint64_t, uint64_t>> want = {
      {"runtime.gopark", {0, 0}}, {"runtime.mcall", {0, 0}}, {"runtime.waitReasonStrings", {0, 0}}};
  const bool stripped = !e.has_symtab();
  if (!stripped) {
    e.for_each_symbol([&](const ElfSymbolEntry& s) {
      if (s.dynamic) return;
      auto it = want.find(std::string(s.name));
      if (it != want.end() && !it->second.first) it->second = {s.value, s.size};
    });
  } else {  // -ldflags=-s or stripped: the functions from .gopclntab (go_pclntab.h)
    auto fns = read_go_functions(e);
    if (!fns)
      return Error{"built without a symbol table (go build -ldflags=-s, or stripped), and its function table "
                   "cannot be read: " + fns.error()};
    for (const auto& f : *fns) {
      auto it = want.find(f.name);
      if (it != want.end() && !it->second.first) it->second = {f.entry, f.end - f.entry};
    }
  }
  auto [park_va, park_size] = want["runtime.gopark"];
  uint64_t mcall = want["runtime.mcall"].first;
  if (!park_va || !mcall)
    return Error{"runtime.gopark or runtime.mcall is not in its symbol table (linked against a shared Go "
                 "runtime, -linkshared: not supported)"};
  if (park_size == 0 || park_size > kMaxGoFunctionBytes) park_size = std::min<uint64_t>(park_size ? park_size : 512, kMaxGoFunctionBytes);
  const auto code_off = file_offset_of(e, park_va, park_size);
  std::vector<uint8_t> code;
  if (!code_off || !e.read(*code_off, park_size, code)) return Error{"runtime.gopark's code is not in the file"};
  const uint64_t off = *code_off;
  auto pts = find_gopark_points(code.data(), code.size(), park_va, mcall);
  if (!pts) return Error{pts.error() + " (" + g.version + "): not supported"};
  g.gopark = park_va;
  g.park_offset = off + pts->park;
  g.resume_offset = off + pts->resume;
  g.resume_emulated = pts->resume_emulated;
  if (auto [va, size] = want["runtime.waitReasonStrings"]; va) {
    g.reasons = wait_reasons(e, va, size);
    if (!g.reasons.empty()) g.reasons_source = "runtime.waitReasonStrings";
  } else if (stripped) {
    g.reasons = find_wait_reasons(e);
    if (!g.reasons.empty()) g.reasons_source = "runtime.waitReasonStrings, found by its shape (stripped binary)";
  }
  return g;
}

namespace {
struct GoKey {  // struct go_key of the BPF side (lockstat_shared.h)
  uint64_t g;
  uint32_t pid, pad;
};
uint64_t sum_parks(BpfSession& s) {
  uint64_t n = 0;
  auto t = s.get_percpu_array_table<uint64_t>("go_parks");
  std::vector<uint64_t> v;
  if (t.get_value(0, v).ok())
    for (uint64_t x : v) n += x;
  return n;
}
}  // namespace

void GoWaits::find(const std::vector<uint32_t>& pids, const char* tool) {
  tool_ = tool;
  for (uint32_t pid : pids) {
    std::string exe = "/proc/" + std::to_string(pid) + "/exe";
    if (!is_go_binary(exe)) continue;
    auto g = inspect_go_binary(exe, true);
    if (!g) {
      refused_[pid] = g.error();
      std::fprintf(stderr, "%s: PID %u, a Go program: %s; its goroutine waits are not traced\n", tool, pid,
                   g.error().c_str());
      continue;
    }
    procs_[pid] = Proc{exe, *g};
  }
}

Status GoWaits::attach(BpfSession& s, uint64_t& probes, bool verbose) {
  for (auto& [pid, p] : procs_) {
    std::string what = "runtime.gopark of PID " + std::to_string(pid);
    if (auto st = s.attach_uprobe_file(p.module, p.bin.resume_offset, "go_resume", int(pid), "the resume probe in " + what))
      return Error{st->message + "; is PID " + std::to_string(pid) + " still running?"};
    if (auto st = s.attach_uprobe_file(p.module, p.bin.park_offset, "go_park", int(pid), "the park probe in " + what))
      return Error{st->message + "; is PID " + std::to_string(pid) + " still running?"};
    probes += 2;
    attached_ = true;
    if (verbose)
      std::fprintf(stderr, "%s: PID %u: %s, gopark at 0x%llx: park probe at file offset 0x%llx, resume at 0x%llx%s; "
                   "%zu wait reasons (%s)\n", tool_, pid, p.bin.version.c_str(), (unsigned long long)p.bin.gopark,
                   (unsigned long long)p.bin.park_offset, (unsigned long long)p.bin.resume_offset,
                   p.bin.resume_emulated ? " (emulated)" : " (single-stepped)", p.bin.reasons.size(),
                   p.bin.reasons_source.empty() ? "not found: numbers only" : p.bin.reasons_source.c_str());
  }
  return std::nullopt;
}

void GoWaits::detach_all(BpfSession& s) {
  for (auto& [pid, p] : procs_) {  // parks first: a resume may still end a wait meanwhile
    s.detach_uprobe_file(p.module, p.bin.park_offset, int(pid));
    s.detach_uprobe_file(p.module, p.bin.resume_offset, int(pid));
  }
  // the waits in flight will never end now: dropped, and counted
  int fd = s.get_table("go_start").get_fd();
  GoKey k{}, next{};
  std::vector<GoKey> keys;
  bool first = true;
  while (bpf_get_next_key(fd, first ? nullptr : &k, &next) == 0 && keys.size() < (1u << 22)) {
    keys.push_back(next);
    k = next;
    first = false;
  }
  for (auto& key : keys) bpf_delete_elem(fd, &key);
  dropped_ += keys.size();
}

void GoWaits::check_rate(BpfSession& s, uint64_t now_ns) {
  if (!attached_ || stopped_) return;
  if (!last_ns_) {
    last_ns_ = now_ns, last_parks_ = sum_parks(s);
    return;
  }
  if (now_ns - last_ns_ < kGoRateWindowNs) return;
  uint64_t parks = sum_parks(s);
  uint64_t rate = (parks - last_parks_) * 1000000000ULL / (now_ns - last_ns_);
  peak_rate_ = std::max(peak_rate_, rate);
  last_ns_ = now_ns, last_parks_ = parks;
  if (rate <= kGoParkBudget) return;
  stopped_ = true;
  detach_all(s);
  std::fprintf(stderr,
               "%s: WARNING: goroutines park %llu times/s (budget %llu/s): goroutine wait tracing stopped to "
               "spare the program (each park and resume traps into the kernel); the other waits are still traced\n",
               tool_, (unsigned long long)rate, (unsigned long long)kGoParkBudget);
}

std::string GoWaits::reason(uint32_t pid, uint32_t v) const {
  auto it = procs_.find(pid);
  return it == procs_.end() ? "reason " + std::to_string(v) : it->second.bin.reason(v);
}

nlohmann::json GoWaits::start_fields() const {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [pid, p] : procs_)
    j.push_back({{"pid", pid},
                 {"go_version", p.bin.version},
                 {"park_offset", p.bin.park_offset},
                 {"resume_offset", p.bin.resume_offset},
                 {"resume_emulated", p.bin.resume_emulated},
                 {"wait_reasons", p.bin.reasons.size()}});
  for (const auto& [pid, why] : refused_) j.push_back({{"pid", pid}, {"refused", why}});
  return j;
}

}  // namespace bpfdiag
