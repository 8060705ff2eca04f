// profile.proto written by hand: the wire format's varints and length-delimited
// fields (packed repeated scalars), the profile's tables, gzip by zlib, and the file.
#include "common/pprof.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>

#include "common/output.h"
#include "common/runloop.h"

namespace bpfdiag {

namespace {

// Protocol buffers' wire format, only what profile.proto needs.
class ProtoWriter {
 public:
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void tag(int field, int wire_type) { varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type)); }
  // int64/uint64/bool fields: wire type 0, left out when zero (proto3 default).
  void uint_field(int field, uint64_t v) {
    if (!v) return;
    tag(field, 0);
    varint(v);
  }
  void int_field(int field, int64_t v) { uint_field(field, static_cast<uint64_t>(v)); }
  void bytes_field(int field, const std::string& b) {  // strings and embedded messages: wire type 2
    tag(field, 2);
    varint(b.size());
    out_ += b;
  }
  template <class T>
  void packed_field(int field, const std::vector<T>& vs) {  // packed repeated varints
    if (vs.empty()) return;
    ProtoWriter p;
    for (T v : vs) p.varint(static_cast<uint64_t>(v));
    bytes_field(field, p.out_);
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

std::string value_type(int64_t type, int64_t unit) {
  ProtoWriter w;
  w.int_field(1, type);
  w.int_field(2, unit);
  return w.bytes();
}

// The key of a sample: its locations and labels, as bytes (distinct samples differ).
std::string sample_key(const std::vector<uint64_t>& locs, const std::vector<PprofLabel>& labels) {
  std::string k;
  for (auto l : locs) k += std::to_string(l) + ",";
  for (auto& l : labels)
    k += "|" + l.key +
         (l.numeric ? "#" + std::to_string(l.num) + l.unit : "=" + std::to_string(l.str.size()) + ":" + l.str);
  return k;
}

const char* kKernelMapping = "[kernel.kallsyms]";

// "[unknown] (libfoo.so+0x1a2b)" -> "libfoo.so": the module a frame the symbolizer
// could not name is in, when its origin was not kept.
std::string unknown_frame_module(const std::string& name) {
  const std::string prefix = "[unknown] (";
  if (name.compare(0, prefix.size(), prefix) != 0 || name.back() != ')') return "";
  auto plus = name.rfind("+0x");
  if (plus == std::string::npos || plus < prefix.size()) return "";
  return name.substr(prefix.size(), plus - prefix.size());
}

}  // namespace

PprofProfile::PprofProfile(std::vector<PprofValueType> types, size_t default_type, PprofValueType period_type,
                           int64_t period)
    : types_(std::move(types)), default_type_(default_type), period_type_(std::move(period_type)), period_(period) {
  for (auto& t : types_) str(t.type), str(t.unit);
  if (!period_type_.type.empty()) str(period_type_.type), str(period_type_.unit);
}

int64_t PprofProfile::str(const std::string& s) {
  auto [it, added] = string_ids_.emplace(s, static_cast<int64_t>(strings_.size()));
  if (added) strings_.push_back(s);
  return it->second;
}

uint64_t PprofProfile::location_of(const PprofFrame& f) {
  uint64_t mapping = 0;
  std::string file = f.origin.module.empty() ? unknown_frame_module(f.name) : f.origin.module;
  if (f.kernel) {
    // one kernel mapping; the function's file says vmlinux ([kernel.kallsyms]) or the module
    file = file.empty() || file == "[kernel]" ? kKernelMapping : file;
    auto key = std::make_tuple(std::string(kKernelMapping), uint64_t{0}, true);
    auto [it, added] = mapping_ids_.emplace(key, mappings_.size() + 1);
    if (added) mappings_.push_back({0, 0, str(kKernelMapping), 0});
    mapping = it->second;
  } else if (!file.empty()) {
    auto key = std::make_tuple(file, f.origin.start, false);
    auto [it, added] = mapping_ids_.emplace(key, mappings_.size() + 1);
    if (added) mappings_.push_back({f.origin.start, f.origin.limit, str(file), str(f.origin.build_id)});
    mapping = it->second;
  }
  auto [fit, fadded] = function_ids_.emplace(std::make_pair(f.name, file), functions_.size() + 1);
  if (fadded) functions_.push_back({str(f.name), str(file)});
  auto [lit, ladded] = location_ids_.emplace(std::make_pair(mapping, fit->second), locations_.size() + 1);
  if (ladded) locations_.push_back({mapping, f.origin.addr, fit->second});
  return lit->second;
}

void PprofProfile::add(const PprofSample& s) {
  std::vector<uint64_t> locs;
  locs.reserve(s.frames.size());
  for (auto& f : s.frames) locs.push_back(location_of(f));
  for (auto& l : s.labels) {
    str(l.key);
    l.numeric ? str(l.unit) : str(l.str);
  }
  std::string key = sample_key(locs, s.labels);
  auto [it, added] = sample_ids_.emplace(key, samples_.size());
  if (added) samples_.push_back({std::move(locs), std::vector<int64_t>(types_.size(), 0), s.labels});
  auto& values = samples_[it->second].values;
  for (size_t i = 0; i < values.size() && i < s.values.size(); ++i) values[i] += s.values[i];
}

std::vector<int64_t> PprofProfile::totals() const {
  std::vector<int64_t> t(types_.size(), 0);
  for (auto& s : samples_)
    for (size_t i = 0; i < t.size(); ++i) t[i] += s.values[i];
  return t;
}

std::string PprofProfile::serialize() const {
  auto id = [&](const std::string& s) { return string_ids_.at(s); };
  ProtoWriter w;
  for (auto& t : types_) w.bytes_field(1, value_type(id(t.type), id(t.unit)));  // sample_type
  for (auto& s : samples_) {                                                    // sample
    ProtoWriter sw;
    sw.packed_field(1, s.locations);
    sw.packed_field(2, s.values);
    for (auto& l : s.labels) {
      ProtoWriter lw;
      lw.int_field(1, id(l.key));
      if (l.numeric) {
        lw.int_field(3, l.num);
        lw.int_field(4, id(l.unit));
      } else {
        lw.int_field(2, id(l.str));
      }
      sw.bytes_field(3, lw.bytes());
    }
    w.bytes_field(2, sw.bytes());
  }
  for (size_t i = 0; i < mappings_.size(); ++i) {  // mapping
    ProtoWriter mw;
    mw.uint_field(1, i + 1);
    mw.uint_field(2, mappings_[i].start);
    mw.uint_field(3, mappings_[i].limit);
    mw.int_field(5, mappings_[i].filename);
    mw.int_field(6, mappings_[i].build_id);
    mw.uint_field(7, 1);  // has_functions: the names are ours, pprof need not symbolize
    w.bytes_field(3, mw.bytes());
  }
  for (size_t i = 0; i < locations_.size(); ++i) {  // location
    ProtoWriter lw;
    lw.uint_field(1, i + 1);
    lw.uint_field(2, locations_[i].mapping);
    lw.uint_field(3, locations_[i].address);
    ProtoWriter line;
    line.uint_field(1, locations_[i].function);
    lw.bytes_field(4, line.bytes());
    w.bytes_field(4, lw.bytes());
  }
  for (size_t i = 0; i < functions_.size(); ++i) {  // function
    ProtoWriter fw;
    fw.uint_field(1, i + 1);
    fw.int_field(2, functions_[i].name);
    fw.int_field(3, functions_[i].name);  // system_name: the symbolizer's (demangled) name
    fw.int_field(4, functions_[i].filename);
    w.bytes_field(5, fw.bytes());
  }
  for (auto& s : strings_) w.bytes_field(6, s);  // string_table ("" first)
  w.int_field(9, time_nanos_);
  w.int_field(10, duration_nanos_);
  if (!period_type_.type.empty()) w.bytes_field(11, value_type(id(period_type_.type), id(period_type_.unit)));
  w.int_field(12, period_);
  for (auto c : comments_) {
    w.tag(13, 0);
    w.varint(static_cast<uint64_t>(c));
  }
  if (default_type_ < types_.size()) w.int_field(14, id(types_[default_type_].type));
  return w.bytes();
}

void append_pprof_frames(std::vector<PprofFrame>& out, const std::vector<std::string>& names, bool kernel, uint32_t pid,
                         const Symbolizer& sym) {
  for (auto& n : names) {
    PprofFrame f{n, kernel, {}};
    if (const FrameOrigin* o = sym.origin(kernel ? 0 : pid, n)) f.origin = *o;
    out.push_back(std::move(f));
  }
}

std::vector<PprofFrame> pprof_frames(const Stack& st, uint32_t pid, const Symbolizer& sym) {
  std::vector<PprofFrame> out;
  if (st.want_kernel) {
    if (st.kernel_missing) out.push_back({"[Missed Kernel Stack]", true, {}});
    else append_pprof_frames(out, st.kernel, true, pid, sym);
  }
  if (st.want_user) {
    if (st.user_missing) out.push_back({"[Missed User Stack]", false, {}});
    else append_pprof_frames(out, st.user, false, pid, sym);
  }
  return out;
}

std::vector<PprofLabel> thread_labels(uint32_t pid, uint32_t tid, const std::string& comm) {
  std::vector<PprofLabel> l{PprofLabel::number("pid", pid)};
  if (tid) l.push_back(PprofLabel::number("tid", tid));
  l.push_back(PprofLabel::text("comm", comm));
  return l;
}

// --- gzip ------------------------------------------------------------------------------

Result<std::string> gzip_compress(const std::string& data) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16 /* gzip header */, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return Error{"cannot compress: zlib: deflateInit2 failed"};
  std::string out(deflateBound(&z, data.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return Error{"cannot compress: zlib: deflate returned " + std::to_string(rc)};
  return out;
}

Result<std::string> gzip_decompress(const std::string& data) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return Error{"zlib: inflateInit2 failed"};
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[65536];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
    if (rc == Z_BUF_ERROR && z.avail_in == 0) break;
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) return Error{"not a complete gzip stream"};
  return out;
}

// --- the output file -------------------------------------------------------------------

namespace {

// N of "/proc/self/fd/N", else -1.
int inherited_fd(const std::string& path) {
  const std::string prefix = "/proc/self/fd/";
  if (path.compare(0, prefix.size(), prefix) != 0 || path.size() == prefix.size() || path.size() > prefix.size() + 6)
    return -1;
  int fd = 0;
  for (size_t i = prefix.size(); i < path.size(); ++i) {
    if (path[i] < '0' || path[i] > '9') return -1;
    fd = fd * 10 + (path[i] - '0');
  }
  return fd;
}

std::string reason() { return std::strerror(errno); }

}  // namespace

Status check_output_file(const std::string& option, const std::string& path) {
  const std::string what = option + " " + path + ": ";
  struct stat st;
  if (int fd = inherited_fd(path); fd >= 0) {
    if (fstat(fd, &st) != 0) return Error{what + "descriptor " + std::to_string(fd) + " is not open"};
    if (!S_ISREG(st.st_mode)) return Error{what + "not a regular file"};
    return std::nullopt;
  }
  if (path.empty() || path.back() == '/') return Error{what + "names a directory, not a file"};
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (stat(dir.c_str(), &st) != 0) return Error{what + "cannot use directory " + dir + ": " + reason()};
  if (!S_ISDIR(st.st_mode)) return Error{what + dir + " is not a directory"};
  if (access(dir.c_str(), W_OK | X_OK) != 0) return Error{what + "directory " + dir + " is not writable: " + reason()};
  if (lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) return Error{what + "is a symbolic link (refused: give the file itself)"};
    if (!S_ISREG(st.st_mode)) return Error{what + "exists and is not a regular file"};
  }
  return std::nullopt;
}

Status write_output_file(const std::string& path, const std::string& bytes) {
  auto fail = [&](const std::string& why) -> Status { return Error{"cannot write " + path + ": " + why}; };
  if (int fd = inherited_fd(path); fd >= 0) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return fail("not an open regular file");
    if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0 || !write_all(fd, bytes)) return fail(reason());
    return std::nullopt;
  }
  // a new file gets 0644 whatever the umask; an existing one is truncated (regular
  // files only: O_NONBLOCK so a FIFO cannot hold the tool), never through a symlink
  bool created = true;
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) {
    created = false;
    fd = open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  }
  if (fd < 0) return fail(errno == ELOOP ? "it is a symbolic link (refused)" : reason());
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (!ok) {
    close(fd);
    return fail("not a regular file");
  }
  ok = (!created || fchmod(fd, 0644) == 0) && ftruncate(fd, 0) == 0 && write_all(fd, bytes);
  std::string why = ok ? "" : reason();
  if (close(fd) != 0 && ok) ok = false, why = reason();
  if (!ok) return fail(why);
  return std::nullopt;
}

// --- over a run ------------------------------------------------------------------------

RunPprof::RunPprof(std::string path, std::vector<PprofValueType> types, size_t default_type, PprofValueType period_type,
                   int64_t period)
    : path_(std::move(path)),
      types_(types),
      default_type_(default_type),
      period_type_(period_type),
      period_(period),
      profile_(std::move(types), default_type, std::move(period_type), period),
      start_ns_(monotonic_ns()) {}

PprofProfile& RunPprof::profile() {
  if (report_boundaries() != boundaries_) {  // the reports before it are not the window's
    profile_ = PprofProfile(types_, default_type_, period_type_, period_);
    boundaries_ = report_boundaries();
    start_ns_ = last_boundary_ns();
  }
  return profile_;
}

Status RunPprof::write() {
  if (!enabled()) return std::nullopt;
  (void)profile();  // a boundary after the last report: an empty window
  uint64_t now = monotonic_ns(), real = realtime_ns();
  profile_.set_window(static_cast<int64_t>(real - (now - start_ns_)), static_cast<int64_t>(now - start_ns_));
  auto gz = gzip_compress(profile_.serialize());
  if (!gz) return Error{"cannot write " + path_ + ": " + gz.error()};
  return write_output_file(path_, *gz);
}

}  // namespace bpfdiag
