// uwproto MODE PID SECONDS [COPY_BYTES]   (issue-11 design study prototype)
//   MODE fp    : bpf_get_stackid(BPF_F_USER_STACK) per sched_switch of PID (today)
//   MODE table : design (a), unwinding in BPF from ehtab tables of PID's mappings
//   MODE copy  : design (b), regs + COPY_BYTES of stack to a perf buffer, unwound here
//                with libdw (dwfl_getthread_frames, custom registers + memory reader)
// Prints one JSON summary line, then the stacks seen ("count depth status frames").
#include <bcc/BPF.h>
#include <bpf/bpf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/bpf_session.h"
#include "common/btf.h"
#include "common/symbolize.h"
#include "ehtab.h"

using namespace bpfdiag;
using Clock = std::chrono::steady_clock;

static std::string slurp(const char* p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct UMap { uint64_t start, end, bias; uint32_t lo, n; };
static_assert(sizeof(UMap) == 32, "");

// load bias of a file mapping: runtime start - ELF vaddr of the mapped file offset
static bool map_bias(const std::string& path, uint64_t start, uint64_t off, uint64_t& bias) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  Elf* e = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  size_t n = 0;
  bool ok = false;
  if (e && elf_getphdrnum(e, &n) == 0)
    for (size_t i = 0; i < n; ++i) {
      GElf_Phdr ph;
      gelf_getphdr(e, i, &ph);
      if (ph.p_type == PT_LOAD && off >= ph.p_offset && off < ph.p_offset + ph.p_filesz) {
        bias = start - (ph.p_vaddr + (off - ph.p_offset));
        ok = true;
        break;
      }
    }
  if (e) elf_end(e);
  close(fd);
  return ok;
}

// ---- design (b): user-space unwinding of a copied stack with libdw ------------------
struct CopyEv { uint32_t pid, tid; uint64_t ip, sp, bp; uint32_t len, pad; uint8_t data[]; };
static const CopyEv* g_ev;
static pid_t g_tid;
static bool mem_read(Dwfl*, Dwarf_Addr addr, Dwarf_Word* result, void*) {
  if (addr < g_ev->sp || addr + 8 > g_ev->sp + g_ev->len) return false;
  memcpy(result, g_ev->data + (addr - g_ev->sp), 8);
  return true;
}
static bool set_regs(Dwfl_Thread* t, void*) {
  Dwarf_Word r[2] = {g_ev->bp, g_ev->sp};  // DWARF x86-64: 6 = rbp, 7 = rsp
  if (!dwfl_thread_state_registers(t, 6, 2, r)) return false;
  dwfl_thread_state_register_pc(t, g_ev->ip);
  return true;
}
static pid_t next_thread(Dwfl*, void*, void**) { return 0; }
static bool get_thread(Dwfl*, pid_t tid, void*, void** arg) { *arg = nullptr; return tid == g_tid; }
static const Dwfl_Thread_Callbacks kThreadCb = {next_thread, get_thread, mem_read, set_regs, nullptr, nullptr};
static char* g_debuginfo_path = nullptr;
static const Dwfl_Callbacks kProcCb = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr,
                                       &g_debuginfo_path};

struct Agg { uint64_t count = 0; int depth = 0; int status = 0; std::vector<uint64_t> pcs; };

struct CopyState {
  Dwfl* dwfl = nullptr;
  uint64_t events = 0, lost = 0, bytes = 0, unwind_ns = 0, frames = 0, fail_unwind = 0;
  std::map<std::string, Agg> stacks;
};
static CopyState g_copy;

static int frame_cb(Dwfl_Frame* f, void* arg) {
  auto* pcs = static_cast<std::vector<uint64_t>*>(arg);
  Dwarf_Addr pc;
  bool act;
  if (!dwfl_frame_pc(f, &pc, &act)) return DWARF_CB_ABORT;
  pcs->push_back(act ? pc : pc - 1);
  return pcs->size() >= 64 ? DWARF_CB_ABORT : DWARF_CB_OK;
}

static void on_copy(void*, void* data, int size) {
  auto* ev = static_cast<const CopyEv*>(data);
  if (size < int(sizeof(CopyEv)) || sizeof(CopyEv) + ev->len > size_t(size)) return;
  g_copy.events++;
  g_copy.bytes += ev->len;
  g_ev = ev;
  g_tid = ev->tid;
  std::vector<uint64_t> pcs;
  auto t0 = Clock::now();
  int rc = dwfl_getthread_frames(g_copy.dwfl, ev->tid, frame_cb, &pcs);
  g_copy.unwind_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  if (rc != 0 && pcs.size() < 64) g_copy.fail_unwind++;
  g_copy.frames += pcs.size();
  std::string key = std::to_string(ev->tid);
  for (auto p : pcs) key += ":" + std::to_string(p);
  auto& a = g_copy.stacks[key];
  a.count++, a.depth = int(pcs.size()), a.status = rc == 0 ? 1 : 4, a.pcs = pcs;
}
static void on_lost(void*, uint64_t n) { g_copy.lost += n; }

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: uwproto fp|table|copy PID SECONDS [COPY_BYTES]\n");
    return 2;
  }
  std::string mode = argv[1];
  uint32_t pid = std::stoul(argv[2]);
  double secs = std::stod(argv[3]);
  unsigned copy_bytes = argc > 4 ? std::stoul(argv[4]) : 8192;
  if (auto st = ensure_tracefs(); st) {
    std::fprintf(stderr, "%s\n", st->message.c_str());
    return 1;
  }
  elf_version(EV_CURRENT);
  auto btf = kernel_btf();
  auto off = btf.value()->field_offset("task_struct", {"stack"});
  std::vector<std::string> cflags = {"-DTARGET_TGID=" + std::to_string(pid),
                                     "-DOFF_TASK_STACK=" + std::to_string(off.value()), "-DTHREAD_SIZE=16384"};
  // design (a): tables for every executable file mapping of pid
  std::vector<ehtab::Row> rows;
  std::vector<UMap> umaps;
  double table_ms = 0;
  std::map<std::string, std::pair<uint32_t, uint32_t>> built;  // path -> (lo, n)
  if (mode == "table") {
    std::istringstream maps(slurp(("/proc/" + std::to_string(pid) + "/maps").c_str()));
    for (std::string line; std::getline(maps, line);) {
      unsigned long s, e, o;
      char perm[8], path[512] = "";
      if (sscanf(line.c_str(), "%lx-%lx %7s %lx %*s %*s %511[^\n]", &s, &e, perm, &o, path) < 4) continue;
      if (perm[2] != 'x' || path[0] != '/') continue;
      auto it = built.find(path);
      if (it == built.end()) {
        ehtab::Table t;
        std::string err;
        uint32_t lo = rows.size();
        if (ehtab::build(path, t, err)) rows.insert(rows.end(), t.rows.begin(), t.rows.end());
        table_ms += t.st.build_ms;
        it = built.emplace(path, std::make_pair(lo, uint32_t(rows.size() - lo))).first;
      }
      uint64_t bias = 0;
      map_bias(path, s, o, bias);
      umaps.push_back({s, e, bias, it->second.first, it->second.second});
    }
    cflags.push_back("-DMODE_TABLE");
    cflags.push_back("-DMAX_ROWS=" + std::to_string(rows.size() + 1));
  } else if (mode == "copy") {
    cflags.push_back("-DMODE_COPY");
    cflags.push_back("-DCOPY_BYTES=" + std::to_string(copy_bytes));
    g_copy.dwfl = dwfl_begin(&kProcCb);
    dwfl_linux_proc_report(g_copy.dwfl, pid);
    dwfl_report_end(g_copy.dwfl, nullptr, nullptr);
    if (!dwfl_attach_state(g_copy.dwfl, nullptr, pid, &kThreadCb, nullptr)) {
      std::fprintf(stderr, "dwfl_attach_state: %s\n", dwfl_errmsg(-1));
      return 1;
    }
  } else if (mode == "fp") {
    cflags.push_back("-DMODE_FP");
  }
  Symbolizer sym;
  sym.remember(pid);
  auto t_load = Clock::now();
  auto sess = BpfSession::load(slurp(SRC_DIR "/uw.bpf.c"), cflags);
  if (!sess) {
    std::fprintf(stderr, "%s\n", sess.error().c_str());
    return 1;
  }
  double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_load).count();
  auto& bpf = sess.value()->bpf();
  double fill_ms = 0;
  if (mode == "table") {
    auto t0 = Clock::now();
    int rfd = bpf.get_table("rows").get_fd(), mfd = bpf.get_table("umaps").get_fd();
    std::vector<uint32_t> keys(rows.size());
    for (uint32_t i = 0; i < keys.size(); ++i) keys[i] = i;
    uint32_t n = rows.size();
    if (bpf_map_update_batch(rfd, keys.data(), rows.data(), &n, nullptr) != 0) {
      std::perror("update_batch rows");
      return 1;
    }
    for (uint32_t i = 0; i < umaps.size() && i < 32; ++i) bpf_map_update_elem(mfd, &i, &umaps[i], 0);
    fill_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  auto t_att = Clock::now();
  if (auto st = sess.value()->attach_tracepoint("sched:sched_switch", "tracepoint__sched__sched_switch"); st) {
    std::fprintf(stderr, "%s\n", st->message.c_str());
    return 1;
  }
  double attach_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_att).count();
  int prog_fd = -1;
  bpf.load_func("tracepoint__sched__sched_switch", BPF_PROG_TYPE_TRACEPOINT, prog_fd);
  int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (mode == "copy")
    if (auto st = sess.value()->open_perf_buffer("copies", on_copy, on_lost, nullptr, 256); st) {
      std::fprintf(stderr, "%s\n", st->message.c_str());
      return 1;
    }
  auto end = Clock::now() + std::chrono::milliseconds(long(secs * 1000));
  while (Clock::now() < end) {
    if (mode == "copy")
      sess.value()->poll_perf_buffer("copies", 100);
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  bpf_prog_info info{};
  uint32_t ilen = sizeof(info);
  bpf_obj_get_info_by_fd(prog_fd, &info, &ilen);
  if (stats_fd >= 0) close(stats_fd);
  auto cnt = bpf.get_percpu_array_table<uint64_t>("cnt");
  const char* cnames[] = {"events", "frames", "end_ok", "truncated", "no_map", "no_cfi", "read_fail", "bad_regs", "copy_short", "copy_bytes"};
  std::string counters;
  for (int i = 0; i < 10; ++i) {
    std::vector<uint64_t> v;
    cnt.get_value(i, v);
    uint64_t s = 0;
    for (auto x : v) s += x;
    counters += std::string(i ? "," : "") + "\"" + cnames[i] + "\":" + std::to_string(s);
  }
  std::printf("{\"mode\":\"%s\",\"pid\":%u,\"load_ms\":%.0f,\"attach_ms\":%.0f,\"xlated_insns\":%u,\"verified_insns\":%u,"
              "\"run_cnt\":%llu,\"run_time_ns\":%llu,\"ns_per_event\":%.0f,%s",
              mode.c_str(), pid, load_ms, attach_ms, info.xlated_prog_len / 8, info.verified_insns,
              (unsigned long long)info.run_cnt, (unsigned long long)info.run_time_ns,
              info.run_cnt ? double(info.run_time_ns) / info.run_cnt : 0.0, counters.c_str());
  if (mode == "table")
    std::printf(",\"binaries\":%zu,\"mappings\":%zu,\"rows\":%zu,\"table_bytes\":%zu,\"table_build_ms\":%.0f,\"fill_ms\":%.1f",
                built.size(), umaps.size(), rows.size(), rows.size() * sizeof(ehtab::Row), table_ms, fill_ms);
  if (mode == "copy")
    std::printf(",\"perf_events\":%lu,\"lost\":%lu,\"bytes_per_event\":%.0f,\"unwind_ns_per_stack\":%.0f,"
                "\"frames_per_stack\":%.1f,\"unwind_errors\":%lu",
                g_copy.events, g_copy.lost, g_copy.events ? double(g_copy.bytes) / g_copy.events : 0.0,
                g_copy.events ? double(g_copy.unwind_ns) / g_copy.events : 0.0,
                g_copy.events ? double(g_copy.frames) / g_copy.events : 0.0, g_copy.fail_unwind);
  std::printf("}\n");
  // stacks
  std::vector<Agg> out;
  if (mode == "table") {
    auto us = bpf.get_hash_table<uint64_t, std::array<uint64_t, 64>>("ustacks");
    auto tc = bpf.get_hash_table<uint64_t, uint64_t>("tcounts");
    auto td = bpf.get_hash_table<uint64_t, uint32_t>("tdepth");
    for (auto& [h, c] : tc.get_table_offline()) {
      Agg a;
      a.count = c;
      std::array<uint64_t, 64> pcs{};
      uint32_t dd = 0;
      us.get_value(h, pcs);
      td.get_value(h, dd);
      a.depth = dd & 0xffff, a.status = dd >> 16;
      for (int i = 0; i < a.depth; ++i) a.pcs.push_back(i ? pcs[i] - 1 : pcs[i]);
      out.push_back(a);
    }
  } else if (mode == "copy") {
    for (auto& [k, a] : g_copy.stacks) out.push_back(a);
  } else if (mode == "fp") {
    auto st = bpf.get_stack_table("fp_stacks");
    auto fc = bpf.get_hash_table<uint64_t, uint64_t>("fp_counts");
    for (auto& [k, c] : fc.get_table_offline()) {
      Agg a;
      a.count = c;
      int sid = int(k >> 32);
      if (sid >= 0)
        for (auto ip : st.get_stack_addr(sid)) a.pcs.push_back(a.pcs.empty() ? ip : ip - 1);
      a.depth = a.pcs.size();
      a.status = sid >= 0 ? 0 : 9;
      out.push_back(a);
    }
  }
  std::sort(out.begin(), out.end(), [](const Agg& x, const Agg& y) { return x.count > y.count; });
  for (auto& a : out) {
    std::printf("%lu depth=%d status=%d ", a.count, a.depth, a.status);
    for (size_t i = a.pcs.size(); i-- > 0;) std::printf("%s%s", sym.user(pid, a.pcs[i]).c_str(), i ? ";" : "");
    std::printf("\n");
  }
  if (g_copy.dwfl) dwfl_end(g_copy.dwfl);
  return 0;
}
