// Per-process unwinding state and the BPF maps of bpf_sources/unwind.h (see unwind_maps.h).
#include "common/unwind_maps.h"

#include <bcc/BPF.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <bpf/bpf.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <tuple>

#include "common/bpf_session.h"
#include "common/bpf_text.h"
#include "common/btf.h"
#include "common/cli.h"
#include "common/elf_file.h"
#include "common/embedded.h"
#include "common/proc.h"
#include "common/symbolize.h"

namespace bpfdiag {

namespace {
Status add_unwind_counters(BpfSession& bpf, DataQuality& dq, CounterDeltas* deltas);
}  // namespace

static_assert(sizeof(uw_row) == 8, "uw_row layout shared with BPF");
static_assert(sizeof(uw_map) == 32, "uw_map layout shared with BPF");
static_assert(sizeof(uw_proc) == 8, "uw_proc layout shared with BPF");
static_assert(sizeof(uw_pcs) == 8 * UW_STACK_SLOTS + 8, "uw_pcs layout shared with BPF");

Result<bool> unwind_dwarf_option(const cxxopts::ParseResult& raw, bool have_targets) {
  const std::string* v = opt_str(raw, "unwind");
  // Default: dwarf when the targets are known (their tables are built at startup),
  // fp for system-wide runs (tables for every process are not built yet).
  if (!v) return have_targets;
  if (*v == "fp") return false;
  if (*v != "dwarf") return Error{"--unwind must be fp or dwarf, not '" + *v + "'"};
  if (!have_targets) return Error{"--unwind=dwarf needs -p or -t (tables are built per target process)"};
  return true;
}

std::string with_unwind_header(const std::string& text) { return with_pasted_header(text, "unwind.h"); }

const std::vector<std::string>& unwind_dq_keys() {
  static const std::vector<std::string> keys = {
      "ustack_truncated",     "ustack_no_cfi",    "ustack_no_mapping",   "ustack_unreadable",
      "binaries_without_cfi", "ustack_fp_frames", "ustack_maps_capped",  "ustack_tables_capped",
      "binaries_refused",     "cfi_capped"};
  return keys;
}

namespace {

// One executable file mapping of /proc/PID/maps.
struct MapLine {
  uint64_t start, end, off;
};
// The mappings of one file (same device and inode), in address order.
struct MappedFile {
  unsigned maj = 0, min = 0;
  uint64_t inode = 0;
  std::string path;
  std::vector<MapLine> maps;
  uint64_t code = 0;  // bytes mapped executable
  int rank = 2;       // 0: the executable, 1: the C runtime (root-owned), 2: the rest
};

// One warning per file whose table a hostile-CFI guard cut short (common/unwind_tables).
void warn_cfi_capped(const UnwindTable& t, const std::string& path) {
  const UnwindTableStats& s = t.st;
  if (!s.fdes_malformed && !s.fde_rows_capped && !s.file_rows_capped && !s.work_capped) return;
  std::string why;
  auto add = [&](uint64_t n, const std::string& what) {
    if (n) why += (why.empty() ? "" : ", ") + what;
  };
  add(s.fdes_malformed, std::to_string(s.fdes_malformed) + " malformed FDEs");
  add(s.fde_rows_capped, std::to_string(s.fde_rows_capped) + " FDEs over the per-function row cap");
  add(s.file_rows_capped, "over the per-file row cap");
  add(s.work_capped, "over the per-file work budget");
  warn_refused_keyed("uw-cfi:" + path, "part of the unwind table of " + path,
                     "cut short: " + why + " (data_quality.cfi_capped)");
}

// libc, the dynamic loader and libpthread, by file name: the frames every stack
// passes through (blocking calls, thread start).
bool is_c_runtime(const std::string& path) {
  std::string b = path.substr(path.rfind('/') + 1);
  auto starts = [&](const char* p) { return b.compare(0, std::strlen(p), p) == 0; };
  return starts("libc.so") || starts("libc-") || starts("ld-linux") || starts("ld-") || starts("libpthread");
}

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

bool UnwindMaps::add_process(uint32_t tgid) {
  std::ifstream f("/proc/" + std::to_string(tgid) + "/maps");
  if (!f) return false;
  std::vector<MappedFile> files;
  std::map<std::tuple<unsigned, unsigned, uint64_t>, size_t> by_inode;
  std::string line;
  bool any = false;
  while (std::getline(f, line)) {
    auto m = parse_maps_line(line);
    if (!m) continue;
    any = true;
    if (m->perms[2] != 'x' || m->inode == 0 || m->path.empty() || m->path[0] != '/') continue;
    uint64_t start = m->start, end = m->end, off = m->offset, inode = m->inode;
    unsigned maj = m->maj, min = m->min;
    const std::string& path = m->path;
    auto [it, fresh] = by_inode.emplace(std::make_tuple(maj, min, inode), files.size());
    if (fresh) {
      MappedFile mf;
      mf.maj = maj, mf.min = min, mf.inode = inode, mf.path = path;
      files.push_back(std::move(mf));
    }
    MappedFile& mf = files[it->second];
    mf.maps.push_back({start, end, off});
    mf.code += end - start;
  }
  if (!any) return false;

  // Which files come first when a cap bites (UW_MAX_MAPS mappings, rows per process or
  // in all): the executable, then the C runtime, then by how much code they map. A
  // process can map hundreds of files below its executable; the first 128 by address
  // would leave its own code and libc without tables.
  // Opened one at a time (a process may map thousands of files: no descriptor is kept).
  auto open_file = [tgid](const MappedFile& mf) {
    const MapLine& m0 = mf.maps.front();
    const std::string path = without_deleted_suffix(mf.path);
    UntrustedOpen r = open_mapping(tgid, map_range(m0.start, m0.end), "");
    if (!r.file && r.refused.empty()) {  // gone: the path (a refused entry is a device)
      r = open_mapping(tgid, "", path);
      warn_if_refused(path, r);
    }
    if (r.file) r.file->set_name(path);  // warnings name the file, not the magic link
    return r.file;
  };
  std::string proc = "/proc/" + std::to_string(tgid);
  struct stat exe {};
  bool have_exe = stat((proc + "/exe").c_str(), &exe) == 0;
  char exe_path[4096];
  ssize_t exe_len = readlink((proc + "/exe").c_str(), exe_path, sizeof exe_path);
  for (MappedFile& mf : files) {
    if ((have_exe && major(exe.st_dev) == mf.maj && minor(exe.st_dev) == mf.min && exe.st_ino == mf.inode) ||
        (exe_len > 0 && mf.path == std::string(exe_path, size_t(exe_len)))) {
      mf.rank = 0;
    } else if (is_c_runtime(mf.path)) {
      // root-owned only: a file the target's owner made cannot claim the C runtime's place
      auto f = open_file(mf);
      if (f && f->uid() == 0) mf.rank = 1;
    }
  }
  std::stable_sort(files.begin(), files.end(), [](const MappedFile& a, const MappedFile& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.code > b.code;
  });

  std::vector<uw_map> maps;
  ProcessCaps caps;
  uint64_t budget = kMaxProcessRows;  // rows of the tables this process uses
  uint64_t failed_fdes = UINT64_MAX;  // FDEs of the smallest table that did not fit
  std::string cap_reason;
  for (MappedFile& mf : files) {
    std::shared_ptr<const UnwindTable> t;
    bool capped = false;
    // the mappings that get one of the process's UW_MAX_MAPS slots
    size_t take = std::min<size_t>(mf.maps.size(), UW_MAX_MAPS - maps.size());
    caps.maps_left += mf.maps.size() - take;
    if (take == 0) continue;
    auto file = open_file(mf);
    if (file) {
      // Over the budget before the table is built (.eh_frame_hdr lists at least one row
      // per FDE): building it would cost the time and memory the caps are there to save.
      auto fdes = elf_eh_frame_hdr_fdes(*file);
      uint64_t global_left = kMaxTotalRows - std::min<uint64_t>(kMaxTotalRows, rows_.size());
      // (a file with as many FDEs as one that did not fit will not fit either: copies)
      if (fdes && (*fdes > budget || *fdes >= failed_fdes)) {
        capped = true, cap_reason = "per process";
      } else if (fdes && *fdes > global_left && !placed_files_.count(file->identity())) {
        capped = true, cap_reason = "across processes";
      } else {
        t = cache_.get(file);
      }
      if (t) warn_cfi_capped(*t, mf.path);
      if (t && t->has_cfi) {
        auto p = placed_.find(t.get());
        uint64_t n = t->rows.size();
        if (n > budget) {
          capped = true, cap_reason = "per process";
          if (fdes) failed_fdes = std::min(failed_fdes, *fdes);
        } else if (p == placed_.end() && (n > global_left || (capacity_ && rows_.size() + n > capacity_))) {
          capped = true, cap_reason = "across processes";
        } else if (p == placed_.end()) {
          Placed pl;
          stats_.binaries++;
          pl.lo = uint32_t(rows_.size());
          pl.n = uint32_t(n);
          rows_.insert(rows_.end(), t->rows.begin(), t->rows.end());
          keep_.push_back(t);
          placed_.emplace(t.get(), pl);
        }
        if (!capped) placed_files_.insert(file->identity());
        if (!capped) budget -= n;
      } else if (t && !placed_.count(t.get())) {
        placed_.emplace(t.get(), Placed{});
        keep_.push_back(t);
        stats_.binaries++;
        stats_.binaries_without_cfi++;
      }
    }
    for (size_t i = 0; i < take; ++i) {
      const MapLine& ml = mf.maps[i];
      uw_map m{ml.start, ml.end, 0, 0, 0};
      auto bias = t && !capped ? t->bias_for(ml.start, ml.off) : std::nullopt;
      if (bias && t->has_cfi) {
        const Placed& pl = placed_.at(t.get());
        m.bias = *bias;
        m.row_lo = pl.lo;
        m.row_n = pl.n;
      }
      if (capped) caps.tables_left++;
      maps.push_back(m);
    }
  }
  std::sort(maps.begin(), maps.end(), [](const uw_map& a, const uw_map& b) { return a.start < b.start; });
  if (!procs_.count(tgid)) {
    stats_.processes++;
    slots_.emplace(tgid, uint32_t(slots_.size()));
  }
  stats_.mappings += maps.size();
  procs_[tgid] = std::move(maps);
  caps_[tgid] = caps;
  dirty_[tgid] = true;
  stats_.rows = rows_.size();
  stats_.table_bytes = rows_.size() * sizeof(uw_row);
  stats_.build_ms = cache_.build_ms();
  std::string who = "process " + std::to_string(tgid);
  if (caps.maps_left)
    warn_refused_keyed("uw-maps:" + std::to_string(tgid),
                       plural(caps.maps_left, "executable mapping", "executable mappings") + " of " + who,
                       "more than " + std::to_string(UW_MAX_MAPS) +
                           " per process, the executable and the C runtime first "
                           "(data_quality.ustack_maps_capped)");
  if (caps.tables_left)
    warn_refused_keyed("uw-rows:" + std::to_string(tgid),
                       "the unwind tables of " + plural(caps.tables_left, "mapping", "mappings") + " of " + who,
                       "over the cap of " + std::to_string(cap_reason == "per process" ? kMaxProcessRows : kMaxTotalRows) +
                           " rows " + cap_reason + ", the executable and the C runtime first "
                           "(data_quality.ustack_tables_capped)");
  return true;
}

namespace {
// Map sizes are defines, so part of the compiled program: rounded up to 3 significant
// bits (at most 12.5% more), targets of about the same size share one compile in the
// compiled-object cache (common/bpf_object.h).
uint64_t round_size(uint64_t n) {
  uint64_t step = 1;
  while (step * 16 <= n) step *= 2;  // n / 16 < step <= n / 8
  return (n + step - 1) / step * step;
}
}  // namespace

Status UnwindMaps::add_defines(BpfPlan& plan) {
  if (auto st = add_kernel_offsets(plan, {{"OFF_TASK_STACK", "task_struct", {"stack"}}})) return st;
  // room for tables of files mapped later (dlopen, exec) without reloading
  capacity_ = round_size(rows_.size() + std::max<uint64_t>(rows_.size() / 2, 65536));
  plan.flag("UW_DWARF");
  plan.integer("THREAD_SIZE", 16384);  // x86-64; the regs are checked (cs == user) in BPF
  plan.integer("UW_MAX_ROWS", capacity_);
  plan.integer("UW_MAX_DEPTH", std::min<uint32_t>(max_depth_, UW_STACK_SLOTS));
  proc_capacity_ = round_size(std::max<size_t>(64, procs_.size() * 2));  // uw_maps: 4 KB per process
  plan.integer("UW_PROCS_SIZE", proc_capacity_);
  // a ceiling (allocated as used, ~530 bytes a stack): MariaDB under sysbench made
  // 16,384 distinct stacks in 20 s
  plan.integer("UW_STACKS_SIZE", 262144);
  return std::nullopt;
}

Status UnwindMaps::fill(BpfSession& bpf) {
  auto t0 = std::chrono::steady_clock::now();
  int rfd = bpf.get_table("uw_rows").get_fd(), pfd = bpf.get_table("uw_procs").get_fd();
  int mfd = bpf.get_table("uw_maps").get_fd();
  if (rfd < 0 || pfd < 0 || mfd < 0) return Error{"unwind maps missing from the BPF program"};
  if (rows_written_ < rows_.size()) {
    std::vector<uint32_t> keys(rows_.size() - rows_written_);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = uint32_t(rows_written_ + i);
    uint32_t n = keys.size();
    if (bpf_map_update_batch(rfd, keys.data(), rows_.data() + rows_written_, &n, nullptr) != 0)
      return Error{std::string("cannot write the unwind tables: ") + std::strerror(errno)};
    rows_written_ = rows_.size();
  }
  for (auto& [tgid, dirty] : dirty_) {
    if (!dirty) continue;
    auto& maps = procs_[tgid];
    uint32_t slot = slots_[tgid];
    if (slot >= proc_capacity_) continue;  // more processes than sized for: ustack_no_mapping
    std::vector<uint32_t> keys(maps.size());
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = slot * UW_MAX_MAPS + uint32_t(i);
    uint32_t n = keys.size();
    if (n && bpf_map_update_batch(mfd, keys.data(), maps.data(), &n, nullptr) != 0)
      return Error{std::string("cannot write the unwind mappings: ") + std::strerror(errno)};
    uw_proc p{uint32_t(maps.size()), slot};  // after its mappings: BPF never sees n unwritten ones
    uint32_t key = tgid;
    if (bpf_map_update_elem(pfd, &key, &p, BPF_ANY) != 0)
      return Error{std::string("cannot write the unwind mappings: ") + std::strerror(errno)};
    dirty = false;
  }
  stats_.fill_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return std::nullopt;
}

Status UnwindMaps::prepare(const std::vector<uint32_t>& pids, const std::vector<uint32_t>& tids, bool ebpf,
                           BpfPlan& plan) {
  std::set<uint32_t> tgids(pids.begin(), pids.end());
  for (auto t : tids) tgids.insert(proc_tgid(t));
  if (!ebpf)
    for (auto t : tgids)
      if (t) add_process(t);
  return add_defines(plan);
}

Status UnwindMaps::start(BpfSession& session, const std::string& fn, int prog_type, const std::string& after) {
  if (auto st = fill(session)) return st;
  if (!after.empty())
    if (auto st = install(session, after, prog_type, UW_PROG_AFTER)) return st;
  if (auto st = install(session, fn, prog_type, UW_PROG_TOOL)) return st;
  return install_walk(session, "uw_progs", "uw_walk_begin", "uw_walk_step", prog_type);
}

Status UnwindMaps::install_walk(BpfSession& session, const std::string& progs, const std::string& begin,
                                const std::string& step, int prog_type) {
  // the step program first: the begin program, once in the table, starts walks
  for (const auto& [fn, slot] : {std::pair<std::string, int>{step, UW_PROG_WALK}, {begin, UW_PROG_UNWIND}}) {
    auto t0 = std::chrono::steady_clock::now();
    auto fd = session.load_program(fn, prog_type);
    if (!fd) return Error{fd.error()};
    stats_.verify_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stats_.verified_insns += BpfSession::verified_insns(*fd);
    auto st = session.get_prog_table(progs).update_value(slot, *fd);
    if (!st.ok()) return Error{"cannot install the unwinder program " + fn + " in " + progs + ": " + st.msg()};
  }
  return std::nullopt;
}

Result<std::unique_ptr<BpfSession>> load_unwinding_tool(ToolPlan plan, UnwindMaps* uw, const UnwinderPlan& unwinder) {
  if (uw)
    if (auto st = uw->prepare(unwinder.pids, unwinder.tids, plan.ebpf, plan.bpf)) return *st;
  auto loaded = load_tool(plan);
  if (!loaded || !*loaded || !uw) return loaded;
  if (auto st = uw->start(**loaded, unwinder.fn, unwinder.prog_type, unwinder.after)) return *st;
  return loaded;
}

nlohmann::json UnwindMaps::start_fields() const {
  const UnwindStats& us = stats_;
  return {{"processes", us.processes}, {"mappings", us.mappings},
          {"binaries", us.binaries},   {"binaries_without_cfi", us.binaries_without_cfi},
          {"rows", us.rows},           {"bytes", us.table_bytes},
          {"build_ms", us.build_ms},   {"fill_ms", us.fill_ms},
          {"verified_insns", us.verified_insns}, {"verify_ms", us.verify_ms}};
}

Status UnwindMaps::add_dq(BpfSession& bpf, DataQuality& dq, CounterDeltas* deltas) const {
  dq.add("binaries_without_cfi", stats_.binaries_without_cfi);
  uint64_t maps_left = 0, tables_left = 0;
  for (auto& [tgid, c] : caps_) maps_left += c.maps_left, tables_left += c.tables_left;
  dq.add("ustack_maps_capped", maps_left);
  dq.add("ustack_tables_capped", tables_left);
  dq.add("binaries_refused", elf_files_refused());
  const UnwindTableStats& cut = cache_.totals();
  dq.add("cfi_capped", cut.fdes_malformed + cut.fde_rows_capped + cut.file_rows_capped + cut.work_capped);
  return add_unwind_counters(bpf, dq, deltas);
}

Status UnwindMaps::install(BpfSession& session, const std::string& fn, int prog_type, int slot) {
  auto fd = session.load_program(fn, prog_type);
  if (!fd) return Error{fd.error()};
  auto st = session.get_prog_table("uw_progs").update_value(slot, *fd);
  if (!st.ok()) return Error{"cannot install the unwinder program " + fn + ": " + st.msg()};
  return std::nullopt;
}

Status UnwindMaps::refresh(BpfSession& bpf, uint32_t tgid) {
  if (!add_process(tgid)) return std::nullopt;  // gone
  return fill(bpf);
}

UnwoundStacks read_unwound_stacks(BpfSession& bpf) {
  UnwoundStacks out;
  for (auto& [h, v] : bpf.get_hash_table<uint64_t, uw_pcs>("uw_stacks").get_table_offline()) {
    UnwoundStack s;
    s.status = v.status;
    for (uint32_t i = 0; i < v.depth && i < UW_STACK_SLOTS; ++i) s.pcs.push_back(v.pc[i]);
    out.emplace(h, std::move(s));
  }
  return out;
}

std::string unwind_marker(uint32_t status) {
  switch (status) {
    case UW_ST_END: return "";
    case UW_ST_TRUNCATED: return "[truncated]";
    case UW_ST_NO_CFI: return "[no CFI]";
    case UW_ST_NO_MAPPING: return "[unknown mapping]";
    case UW_ST_UNREADABLE: return "[unreadable stack]";
  }
  return "[truncated]";
}

std::vector<uint64_t> unwound_lookup_addrs(const UnwoundStacks& stacks, uint64_t hash) {
  std::vector<uint64_t> addrs;
  auto it = stacks.find(hash);
  if (it == stacks.end()) return addrs;
  const auto& pcs = it->second.pcs;
  for (size_t i = 0; i < pcs.size(); ++i) addrs.push_back(i ? pcs[i] - 1 : pcs[i]);
  return addrs;
}

std::vector<std::string> symbolize_unwound(const UnwoundStacks& stacks, uint64_t hash, Symbolizer& sym,
                                           uint32_t tgid, bool* found) {
  std::vector<std::string> frames;
  auto it = stacks.find(hash);
  if (found) *found = it != stacks.end();
  if (it == stacks.end()) return frames;
  for (uint64_t a : unwound_lookup_addrs(stacks, hash)) frames.push_back(sym.user(tgid, a));
  if (auto m = unwind_marker(it->second.status); !m.empty()) frames.push_back(m);
  return frames;
}

namespace {

// Adds the ustack_* counters (and uw_stacks being full, as lost_stacks) to dq.
Status add_unwind_counters(BpfSession& bpf, DataQuality& dq, CounterDeltas* deltas) {
  static const std::pair<uint32_t, const char*> kSlots[] = {{UW_CNT_TRUNCATED, "ustack_truncated"},
                                                            {UW_CNT_NO_CFI, "ustack_no_cfi"},
                                                            {UW_CNT_NO_MAPPING, "ustack_no_mapping"},
                                                            {UW_CNT_UNREADABLE, "ustack_unreadable"},
                                                            {UW_CNT_STACKS_FULL, "lost_stacks"},
                                                            {UW_CNT_FP_FRAMES, "ustack_fp_frames"}};
  auto arr = bpf.get_percpu_array_table<uint64_t>("uw_counters");
  for (auto& [slot, key] : kSlots) {
    std::vector<uint64_t> per_cpu;
    auto st = arr.get_value(int(slot), per_cpu);
    if (!st.ok()) return Error{"cannot read the unwind counters: " + st.msg()};
    uint64_t sum = 0;
    for (auto v : per_cpu) sum += v;
    dq.add(key, deltas ? deltas->delta(slot, sum) : sum);
  }
  return std::nullopt;
}

}  // namespace

}  // namespace bpfdiag
