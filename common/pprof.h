// --pprof FILE: profiles in pprof's format (github.com/google/pprof/proto/profile.proto,
// gzip-compressed), which `go tool pprof`, Pyroscope and Parca read. The one encoder of
// the suite: a tool turns its own model (stacks, values, labels) into PprofSamples and
// this file does the rest (string table, deduplicated functions, locations and
// mappings, protobuf encoding by hand, gzip with zlib, the output file).
//
//   RunPprof pp(c.pprof, {{"samples", "count"}, {"cpu", "nanoseconds"}}, 0,
//               {"cpu", "nanoseconds"}, 1'000'000'000 / hz);
//   sym.keep_origins();                        // frames get their module and address
//   if (pp.enabled()) pp.profile().add({pprof_frames(e.stack, e.pid, sym), {n, n * period},
//                                       {PprofLabel::number("pid", e.pid), PprofLabel::text("comm", e.comm)}});
//   Status st = pp.write();                    // the final report: gzip, O_NOFOLLOW, 0644
//
// Frames: leaf first (location_id[0] is the leaf): kernel frames innermost first, then
// user frames innermost first. A frame named by the suite's Symbolizer keeps where it
// came from (Symbolizer::origin): Function{name, filename = the module}, Location{address,
// mapping}, Mapping{path, build id, start, limit}; kernel frames are in one
// "[kernel.kallsyms]" mapping. The models merge stacks by frame name, so a location is
// per function and module (its address: the first one that got that name).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/result.h"
#include "common/stacks.h"
#include "common/symbolize.h"

namespace bpfdiag {

struct PprofValueType {
  std::string type, unit;  // "cpu", "nanoseconds"
};

struct PprofFrame {
  std::string name;  // as the tool shows it ("worker_loop", "[unknown] (libfoo.so+0x1a2b)")
  bool kernel = false;
  FrameOrigin origin;  // module "" when unknown (a marker frame: no mapping)
};

struct PprofLabel {
  std::string key;
  std::string str;   // string label (names)
  int64_t num = 0;   // numeric label (ids)
  std::string unit;  // numeric label's unit, "" for none
  bool numeric = false;
  static PprofLabel text(std::string key, std::string value) {
    return {std::move(key), std::move(value), 0, "", false};
  }
  static PprofLabel number(std::string key, int64_t value, std::string unit = "") {
    return {std::move(key), "", value, std::move(unit), true};
  }
};

struct PprofSample {
  std::vector<PprofFrame> frames;  // leaf first
  std::vector<int64_t> values;     // one per sample type
  std::vector<PprofLabel> labels;
};

// One profile being built. Samples with the same frames and labels are merged
// (values summed); strings, functions, locations and mappings are deduplicated.
class PprofProfile {
 public:
  PprofProfile(std::vector<PprofValueType> types, size_t default_type = 0, PprofValueType period_type = {},
               int64_t period = 0);
  void add(const PprofSample& s);  // s.values.size() must equal the sample types'
  void set_window(int64_t time_nanos, int64_t duration_nanos) {
    time_nanos_ = time_nanos;
    duration_nanos_ = duration_nanos;
  }
  void add_comment(const std::string& c) { comments_.push_back(str(c)); }
  // profile.proto bytes (not compressed).
  std::string serialize() const;
  size_t sample_count() const { return samples_.size(); }
  // Each sample type's sum over all samples.
  std::vector<int64_t> totals() const;

 private:
  struct Sample {
    std::vector<uint64_t> locations;
    std::vector<int64_t> values;
    std::vector<PprofLabel> labels;
  };
  struct Mapping {
    uint64_t start, limit;
    int64_t filename, build_id;
  };
  struct Function {
    int64_t name, filename;
  };
  struct Location {
    uint64_t mapping, address, function;
  };
  int64_t str(const std::string& s);
  uint64_t location_of(const PprofFrame& f);

  std::vector<PprofValueType> types_;
  size_t default_type_;
  PprofValueType period_type_;
  int64_t period_;
  int64_t time_nanos_ = 0, duration_nanos_ = 0;
  std::vector<int64_t> comments_;
  std::vector<std::string> strings_{""};  // index 0 is ""
  std::map<std::string, int64_t> string_ids_{{"", 0}};
  std::vector<Mapping> mappings_;
  std::map<std::tuple<std::string, uint64_t, bool>, uint64_t> mapping_ids_;  // (file, start, kernel) -> id
  std::vector<Function> functions_;
  std::map<std::pair<std::string, std::string>, uint64_t> function_ids_;  // (name, file) -> id
  std::vector<Location> locations_;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> location_ids_;  // (mapping, function) -> id
  std::vector<Sample> samples_;
  std::map<std::string, size_t> sample_ids_;  // locations + labels, encoded -> index
};

// The frames of a symbolized stack, leaf first, each with its origin from `sym` (user
// frames in process `pid`): "[Missed ... Stack]" where a wanted part was lost.
std::vector<PprofFrame> pprof_frames(const Stack& st, uint32_t pid, const Symbolizer& sym);
// Frame names of one part (innermost first), user frames of `pid` or kernel frames.
void append_pprof_frames(std::vector<PprofFrame>& out, const std::vector<std::string>& names, bool kernel, uint32_t pid,
                         const Symbolizer& sym);

// The labels of a sample keyed by thread: pid and tid (numbers), comm (the thread's
// name, as the tools' JSON "comm"); tid left out when 0 (not keyed by thread).
std::vector<PprofLabel> thread_labels(uint32_t pid, uint32_t tid, const std::string& comm);

// gzip (RFC 1952) of `data`, with zlib.
Result<std::string> gzip_compress(const std::string& data);
// The bytes of a gzip stream, inflated (for tests and checks).
Result<std::string> gzip_decompress(const std::string& data);

// An output file the user named (--pprof FILE), checked before tracing starts: its
// directory exists, is a directory and is writable, and FILE is not a symbolic link,
// a directory or anything but a regular file when it exists. "/proc/self/fd/N" (a
// descriptor the caller inherited, as runbook passes) must be an open regular file.
// The error names the option and the file.
Status check_output_file(const std::string& option, const std::string& path);
// Writes `bytes` to `path`: open(O_WRONLY|O_CREAT|O_TRUNC|O_NOFOLLOW), mode 0644 (a new
// file), regular files only; "/proc/self/fd/N" is written through that descriptor
// from its start. The error names the file and the reason.
Status write_output_file(const std::string& path, const std::string& bytes);

// --pprof FILE over a whole run, as RunFlameGraph for --svg: each report adds its
// samples to profile() (restarted at a report boundary, SIGUSR1, so the profile covers
// what the final report covers); write() at the end sets the window and writes FILE.
class RunPprof {
 public:
  RunPprof(std::string path, std::vector<PprofValueType> types, size_t default_type = 0,
           PprofValueType period_type = {}, int64_t period = 0);
  bool enabled() const { return !path_.empty(); }
  PprofProfile& profile();
  Status write();

 private:
  std::string path_;
  std::vector<PprofValueType> types_;
  size_t default_type_;
  PprofValueType period_type_;
  int64_t period_;
  PprofProfile profile_;
  uint64_t boundaries_ = 0;
  uint64_t start_ns_;  // monotonic
};

}  // namespace bpfdiag
