// doctor's probes of a target (-p): its executable and libc, their symbols
// (.symtab, or a build-id debug file) and whether their code sets up frame pointers.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/debuginfo_hint.h"
#include "common/elf_file.h"
#include "common/proc.h"
#include "common/pthread_probes.h"
#include "common/untrusted_file.h"
#include "tools/doctor/doctor.h"

namespace doctor {
using namespace bpfdiag;

Result<FramePointerSample> sample_frame_pointers(const std::string& path, size_t max_functions) {
  UntrustedPolicy pol;
  pol.follow_links = true;  // /proc/PID/exe, /proc/self/fd/N: kernel magic links
  auto r = open_untrusted(path, pol);
  if (!r.file) return Error{"cannot open " + path + ": " + (r.refused.empty() ? std::strerror(r.err) : r.refused)};
  auto elf = ElfFile::open(r.file);
  if (!elf) return Error{path + " is not an ELF file"};
  static const char* const kSkip[] = {"_start", "_init", "_fini", "deregister_tm_clones", "register_tm_clones",
                                      "__do_global_dtors_aux", "frame_dummy", "_dl_relocate_static_pie"};
  std::vector<std::pair<uint64_t, uint64_t>> funcs;  // vaddr, size
  elf->for_each_symbol([&](const ElfSymbolEntry& s) {
    if (s.type != 2 /* STT_FUNC */ || s.size < 8) return;
    for (const char* n : kSkip)
      if (s.name == n) return;
    funcs.emplace_back(s.value, s.size);
  });
  std::sort(funcs.begin(), funcs.end());
  funcs.erase(std::unique(funcs.begin(), funcs.end(),
                          [](const auto& a, const auto& b) { return a.first == b.first; }),
              funcs.end());
  FramePointerSample out;
  const size_t step = std::max<size_t>(1, funcs.size() / std::max<size_t>(1, max_functions));
  for (size_t i = 0; i < funcs.size() && out.functions + out.frameless < max_functions; i += step) {
    auto [vaddr, size] = funcs[i];
    for (const auto& seg : elf->load_segments()) {
      if (!(seg.flags & 1 /* PF_X */) || vaddr < seg.vaddr || vaddr >= seg.vaddr + seg.filesz) continue;
      std::vector<uint8_t> code;
      if (!elf->read(vaddr - seg.vaddr + seg.offset, std::min<uint64_t>(size, 64), code)) break;
      switch (frame_setup(code.data(), code.size())) {
        case FrameSetup::FramePointer: out.functions++, out.with_fp++; break;
        case FrameSetup::NoFramePointer: out.functions++; break;
        case FrameSetup::Frameless: out.frameless++; break;
      }
      break;
    }
  }
  return out;
}

namespace {

// Symbols and frame pointers of one file of the target (its executable or its libc).
void check_file(std::vector<Check>& out, const std::string& what, const std::string& open_path,
                const std::string& shown_path, bool is_libc) {
  Check sym{"target", what + "_symbols", Verdict::Ok, false, "", ""};
  auto names = read_elf_names(open_path);
  if (!names) {
    sym.status = Verdict::Skip;
    sym.detail = shown_path + ": not a readable ELF file";
    out.push_back(sym);
    return;
  }
  const std::string hint = debuginfo_hint(open_path, shown_path);
  if (names->has_symtab) {
    sym.detail = shown_path + ": has .symtab (function names)";
  } else if (hint.empty()) {
    sym.detail = shown_path + ": stripped, build-id debug file installed under /usr/lib/debug/.build-id";
  } else {
    sym.status = Verdict::Warn;
    sym.detail = shown_path + ": stripped (.dynsym only), no build-id debug file" +
                 (names->build_id.empty() ? std::string(" (and no build id)") : " for build id " + names->build_id);
    sym.fix = hint;
  }
  out.push_back(sym);

  Check fp{"target", what + "_frame_pointers", Verdict::Ok, false, "", ""};
  auto s = sample_frame_pointers(open_path, 200);
  if (!s) {
    fp.status = Verdict::Skip;
    fp.detail = s.error();
    out.push_back(fp);
    return;
  }
  const std::string v = frame_pointer_verdict(*s);
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "%s: frame pointers %s (%llu of %llu sampled functions with a stack frame set up %%rbp; "
                "%llu leaf functions without a frame not counted)",
                shown_path.c_str(), v.c_str(), static_cast<unsigned long long>(s->with_fp),
                static_cast<unsigned long long>(s->functions), static_cast<unsigned long long>(s->frameless));
  fp.detail = buf;
  if (v == "unknown") {
    fp.status = Verdict::Skip;
  } else if (v != "yes") {
    fp.status = Verdict::Warn;
    fp.fix = is_libc ? "user stacks stop at the first libc frame; perf record --call-graph dwarf recovers "
                       "the callers"
                     : "user stacks will be cut short: rebuild with -fno-omit-frame-pointer";
  }
  out.push_back(fp);
}

}  // namespace

std::vector<Check> probe_target(uint32_t pid) {
  std::vector<Check> out;
  const std::string comm = proc_comm(pid);
  Check t{"target", "process", Verdict::Ok, false, "", ""};
  char exe[4096];
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  ssize_t n = readlink(link.c_str(), exe, sizeof exe - 1);
  if (n <= 0) {
    t.status = Verdict::Skip;
    t.detail = "PID " + std::to_string(pid) + " (" + comm + "): no executable (kernel thread, or gone): " +
               std::strerror(errno);
    out.push_back(t);
    return out;
  }
  exe[n] = 0;
  const std::string exe_path = exe;
  t.detail = "PID " + std::to_string(pid) + " (" + comm + "), " + std::to_string(proc_threads(pid).size()) +
             " threads, " + exe_path;
  out.push_back(t);
  check_file(out, "exe", link, exe_path, false);
  auto lib = find_pthread_lib(pid);
  if (!lib) {
    out.push_back(Check{"target", "libc", Verdict::Skip, false, lib.error(), ""});
  } else if (lib->static_exe) {
    out.push_back(Check{"target", "libc", Verdict::Ok, false, "glibc is linked into the executable", ""});
  } else {
    check_file(out, "libc", lib->probe_path(), lib->display, true);
  }
  for (auto& k : out) k.pid = pid;
  return out;
}

}  // namespace doctor
