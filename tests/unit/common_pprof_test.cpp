// common/pprof: what the encoder writes, read back with a small protobuf reader written
// from profile.proto's field numbers (not from the encoder), gzip both ways, the output
// file rules, and the Symbolizer's frame origins the tools feed it.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/pprof.h"

using namespace bpfdiag;

namespace {

// --- a protobuf reader: messages as field number -> values (varints or bytes) ------------
struct Field {
  uint64_t varint = 0;
  std::string bytes;
  int wire = 0;
};
using Message = std::multimap<int, Field>;

uint64_t read_varint(const std::string& b, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0; i < b.size() && shift < 64; shift += 7) {
    uint8_t c = static_cast<uint8_t>(b[i++]);
    v |= uint64_t(c & 0x7f) << shift;
    if (!(c & 0x80)) return v;
  }
  FAIL("truncated varint");
  return v;
}

Message parse(const std::string& b) {
  Message m;
  size_t i = 0;
  while (i < b.size()) {
    uint64_t key = read_varint(b, i);
    Field f;
    f.wire = int(key & 7);
    if (f.wire == 0) {
      f.varint = read_varint(b, i);
    } else if (f.wire == 2) {
      uint64_t n = read_varint(b, i);
      REQUIRE(i + n <= b.size());
      f.bytes = b.substr(i, n);
      i += n;
    } else {
      FAIL("unexpected wire type " << f.wire);
    }
    m.emplace(int(key >> 3), f);
  }
  return m;
}

std::vector<Field> all(const Message& m, int field) {
  std::vector<Field> out;
  auto [a, b] = m.equal_range(field);
  for (auto it = a; it != b; ++it) out.push_back(it->second);
  return out;
}
uint64_t num(const Message& m, int field) {
  auto it = m.find(field);
  return it == m.end() ? 0 : it->second.varint;
}
std::vector<uint64_t> packed(const Message& m, int field) {
  std::vector<uint64_t> out;
  for (auto& f : all(m, field)) {
    REQUIRE(f.wire == 2);
    size_t i = 0;
    while (i < f.bytes.size()) out.push_back(read_varint(f.bytes, i));
  }
  return out;
}

// The decoded profile, as pprof would see it.
struct Decoded {
  std::vector<std::string> strings;
  std::vector<std::pair<std::string, std::string>> types;
  struct Sample {
    std::vector<std::string> frames;  // function names, leaf first
    std::vector<std::string> files;   // function filenames
    std::vector<std::string> mappings;
    std::vector<uint64_t> addrs;
    std::vector<int64_t> values;
    std::map<std::string, std::string> str_labels;
    std::map<std::string, int64_t> num_labels;
  };
  std::vector<Sample> samples;
  size_t functions = 0, locations = 0, mappings = 0;
  std::map<uint64_t, Message> mapping_msgs;
  int64_t time_nanos = 0, duration_nanos = 0, period = 0;
  std::string period_type, default_type;
};

Decoded decode(const std::string& bytes) {
  Message p = parse(bytes);
  Decoded d;
  for (auto& f : all(p, 6)) d.strings.push_back(f.bytes);
  REQUIRE(!d.strings.empty());
  CHECK(d.strings[0] == "");
  auto s = [&](uint64_t i) {
    REQUIRE(i < d.strings.size());
    return d.strings[i];
  };
  for (auto& f : all(p, 1)) {
    Message vt = parse(f.bytes);
    d.types.emplace_back(s(num(vt, 1)), s(num(vt, 2)));
  }
  std::map<uint64_t, std::pair<std::string, std::string>> functions;  // id -> name, file
  for (auto& f : all(p, 5)) {
    Message fn = parse(f.bytes);
    functions[num(fn, 1)] = {s(num(fn, 2)), s(num(fn, 4))};
  }
  for (auto& f : all(p, 3)) {
    Message mp = parse(f.bytes);
    d.mapping_msgs[num(mp, 1)] = mp;
  }
  struct Loc {
    uint64_t mapping, addr, function;
  };
  std::map<uint64_t, Loc> locs;
  for (auto& f : all(p, 4)) {
    Message l = parse(f.bytes);
    auto lines = all(l, 4);
    REQUIRE(lines.size() == 1);
    locs[num(l, 1)] = {num(l, 2), num(l, 3), num(parse(lines[0].bytes), 1)};
  }
  d.functions = functions.size();
  d.locations = locs.size();
  d.mappings = d.mapping_msgs.size();
  for (auto& f : all(p, 2)) {
    Message sm = parse(f.bytes);
    Decoded::Sample out;
    for (uint64_t id : packed(sm, 1)) {
      REQUIRE(locs.count(id));
      const Loc& l = locs[id];
      REQUIRE(functions.count(l.function));
      out.frames.push_back(functions[l.function].first);
      out.files.push_back(functions[l.function].second);
      out.addrs.push_back(l.addr);
      out.mappings.push_back(l.mapping ? s(num(d.mapping_msgs.at(l.mapping), 5)) : "");
    }
    for (uint64_t v : packed(sm, 2)) out.values.push_back(static_cast<int64_t>(v));
    for (auto& lf : all(sm, 3)) {
      Message lab = parse(lf.bytes);
      if (lab.count(2)) out.str_labels[s(num(lab, 1))] = s(num(lab, 2));
      else out.num_labels[s(num(lab, 1))] = static_cast<int64_t>(num(lab, 3));
    }
    d.samples.push_back(out);
  }
  d.time_nanos = static_cast<int64_t>(num(p, 9));
  d.duration_nanos = static_cast<int64_t>(num(p, 10));
  if (p.count(11)) {
    Message pt = parse(p.find(11)->second.bytes);
    d.period_type = s(num(pt, 1)) + "/" + s(num(pt, 2));
  }
  d.period = static_cast<int64_t>(num(p, 12));
  if (p.count(14)) d.default_type = s(num(p, 14));
  return d;
}

PprofFrame user_frame(const std::string& name, const std::string& module, uint64_t addr) {
  return {name, false, FrameOrigin{module, addr, 0x1000, 0x9000, "abcd"}};
}

std::string temp_dir() {
  char tmpl[] = "/tmp/bpfdiag-pprof-test-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

}  // namespace

TEST_CASE("pprof: sample types, period, window and default type as written") {
  PprofProfile p({{"samples", "count"}, {"cpu", "nanoseconds"}}, 1, {"cpu", "nanoseconds"}, 20408163);
  p.set_window(1700000000123456789, 5000000000);
  p.add({{user_frame("work", "/usr/bin/app", 0x1234)}, {3, 3 * 20408163}, {PprofLabel::number("pid", 42)}});
  Decoded d = decode(p.serialize());
  REQUIRE(d.types.size() == 2);
  CHECK(d.types[0] == std::make_pair(std::string("samples"), std::string("count")));
  CHECK(d.types[1] == std::make_pair(std::string("cpu"), std::string("nanoseconds")));
  CHECK(d.period_type == "cpu/nanoseconds");
  CHECK(d.period == 20408163);
  CHECK(d.time_nanos == 1700000000123456789);
  CHECK(d.duration_nanos == 5000000000);
  CHECK(d.default_type == "cpu");
  REQUIRE(d.samples.size() == 1);
  CHECK(d.samples[0].values == std::vector<int64_t>{3, 3 * 20408163});
}

TEST_CASE("pprof: a stack is leaf first: kernel frames, then user frames; markers have no mapping") {
  Stack st;
  st.kernel = {"schedule", "do_futex"};  // innermost first
  st.user = {"__futex_abstimed_wait_common", "worker"};
  Symbolizer sym;  // no origins: names only
  auto frames = pprof_frames(st, 7, sym);
  REQUIRE(frames.size() == 4);
  CHECK(frames[0].name == "schedule");
  CHECK(frames[0].kernel);
  CHECK(frames[3].name == "worker");
  CHECK_FALSE(frames[3].kernel);
  st.user_missing = true;
  frames = pprof_frames(st, 7, sym);
  REQUIRE(frames.size() == 3);
  CHECK(frames[2].name == "[Missed User Stack]");

  PprofProfile p(std::vector<PprofValueType>{{"off_cpu", "nanoseconds"}});
  p.add({frames, {100}, {}});
  Decoded d = decode(p.serialize());
  REQUIRE(d.samples.size() == 1);
  const auto& s = d.samples[0];
  CHECK(s.frames == std::vector<std::string>{"schedule", "do_futex", "[Missed User Stack]"});
  CHECK(s.mappings == std::vector<std::string>{"[kernel.kallsyms]", "[kernel.kallsyms]", ""});
  CHECK(s.files[0] == "[kernel.kallsyms]");
}

TEST_CASE("pprof: functions, locations, mappings and strings are deduplicated; samples merge") {
  PprofProfile p({{"contentions", "count"}, {"delay", "nanoseconds"}}, 1);
  std::vector<PprofFrame> a = {user_frame("lock_it", "/usr/bin/app", 0x1100),
                               user_frame("main", "/usr/bin/app", 0x1200)};
  std::vector<PprofFrame> b = {user_frame("pthread_mutex_lock", "/usr/lib/libc.so.6", 0x7000),
                               user_frame("main", "/usr/bin/app", 0x1200)};
  std::vector<PprofLabel> l1 = {PprofLabel::number("pid", 5), PprofLabel::text("lock", "cache_lock")};
  std::vector<PprofLabel> l2 = {PprofLabel::number("pid", 5), PprofLabel::text("lock", "other_lock")};
  p.add({a, {1, 10}, l1});
  p.add({a, {2, 20}, l1});  // same stack and labels: one sample
  p.add({a, {4, 40}, l2});  // other labels: another sample
  p.add({b, {8, 80}, l1});
  CHECK(p.sample_count() == 3);
  CHECK(p.totals() == std::vector<int64_t>{15, 150});
  Decoded d = decode(p.serialize());
  REQUIRE(d.samples.size() == 3);
  CHECK(d.samples[0].values == std::vector<int64_t>{3, 30});
  CHECK(d.samples[0].str_labels.at("lock") == "cache_lock");
  CHECK(d.samples[0].num_labels.at("pid") == 5);
  CHECK(d.samples[1].str_labels.at("lock") == "other_lock");
  CHECK(d.functions == 3);  // lock_it, main, pthread_mutex_lock
  CHECK(d.locations == 3);
  CHECK(d.mappings == 2);  // app, libc
  std::map<std::string, int> seen;
  for (auto& s : d.strings) seen[s]++;
  for (auto& kv : seen) CHECK_MESSAGE(kv.second == 1, kv.first);
  CHECK(d.samples[2].files == std::vector<std::string>{"/usr/lib/libc.so.6", "/usr/bin/app"});
  CHECK(d.samples[2].addrs == std::vector<uint64_t>{0x7000, 0x1200});
  const Message& m = d.mapping_msgs.begin()->second;
  CHECK(num(m, 2) == 0x1000);             // memory_start
  CHECK(num(m, 3) == 0x9000);             // memory_limit
  CHECK(d.strings[num(m, 6)] == "abcd");  // build_id
  CHECK(num(m, 7) == 1);                  // has_functions
}

TEST_CASE("pprof: an unknown frame's module comes from its name when no origin was kept") {
  PprofProfile p(std::vector<PprofValueType>{{"samples", "count"}});
  p.add({{PprofFrame{"[unknown] (libfoo.so+0x1a2b)", false, {}}}, {1}, {}});
  Decoded d = decode(p.serialize());
  REQUIRE(d.samples.size() == 1);
  CHECK(d.samples[0].mappings == std::vector<std::string>{"libfoo.so"});
}

TEST_CASE("pprof: varints past 32 bits and negative-free int64 values survive") {
  PprofProfile p(std::vector<PprofValueType>{{"delay", "nanoseconds"}});
  const int64_t big = 86400LL * 1000000000LL * 3;  // three days in ns
  p.add({{}, {big}, {PprofLabel::number("tid", 4194304)}});
  Decoded d = decode(p.serialize());
  REQUIRE(d.samples.size() == 1);
  CHECK(d.samples[0].values[0] == big);
  CHECK(d.samples[0].num_labels.at("tid") == 4194304);
  CHECK(d.samples[0].frames.empty());
}

TEST_CASE("pprof: gzip round trip, and a corrupt stream is an error") {
  std::string data;
  for (int i = 0; i < 10000; ++i) data += std::to_string(i) + ";";
  auto gz = gzip_compress(data);
  REQUIRE(gz);
  CHECK(static_cast<unsigned char>((*gz)[0]) == 0x1f);  // gzip magic
  CHECK(static_cast<unsigned char>((*gz)[1]) == 0x8b);
  CHECK(gz->size() < data.size());
  auto back = gzip_decompress(*gz);
  REQUIRE(back);
  CHECK(*back == data);
  std::string cut = gz->substr(0, gz->size() / 2);
  CHECK_FALSE(gzip_decompress(cut));
}

TEST_CASE("pprof: the output file: created 0644, truncated, never through a symlink") {
  std::string dir = temp_dir();
  std::string f = dir + "/out.pb.gz";
  mode_t old = umask(077);
  CHECK_FALSE(check_output_file("--pprof", f));
  REQUIRE_FALSE(write_output_file(f, "first, longer content"));
  umask(old);
  struct stat st;
  REQUIRE(stat(f.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
  REQUIRE_FALSE(write_output_file(f, "second"));
  REQUIRE(stat(f.c_str(), &st) == 0);
  CHECK(st.st_size == 6);

  std::string victim = dir + "/victim", link = dir + "/link.pb.gz";
  REQUIRE_FALSE(write_output_file(victim, "keep me"));
  REQUIRE(symlink(victim.c_str(), link.c_str()) == 0);
  auto refused = check_output_file("--pprof", link);
  REQUIRE(refused);
  CHECK(refused->message.find("symbolic link") != std::string::npos);
  auto werr = write_output_file(link, "overwritten");
  REQUIRE(werr);
  CHECK(werr->message.find("symbolic link") != std::string::npos);
  REQUIRE(stat(victim.c_str(), &st) == 0);
  CHECK(st.st_size == 7);

  auto nodir = check_output_file("--pprof", dir + "/missing/out.pb.gz");
  REQUIRE(nodir);
  CHECK(nodir->message.find("--pprof " + dir + "/missing/out.pb.gz") == 0);
  CHECK(check_output_file("--pprof", dir));            // a directory
  CHECK(check_output_file("--pprof", victim + "/x"));  // under a file
  CHECK(write_output_file(dir + "/missing/out.pb.gz", "x"));
  REQUIRE(mkfifo((dir + "/fifo").c_str(), 0600) == 0);
  CHECK(check_output_file("--pprof", dir + "/fifo"));
  CHECK(write_output_file(dir + "/fifo", "x"));  // refused, not blocked

  // an inherited descriptor (runbook's /proc/self/fd/N) is written from its start
  int fd = open((dir + "/inherited").c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, "0123456789", 10) == 10);
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  CHECK_FALSE(check_output_file("--pprof", path));
  REQUIRE_FALSE(write_output_file(path, "abc"));
  REQUIRE(fstat(fd, &st) == 0);
  CHECK(st.st_size == 3);
  close(fd);
  CHECK(check_output_file("--pprof", path));  // closed now
  std::system(("rm -rf " + dir).c_str());
}

extern "C" __attribute__((noinline)) int bpfdiag_pproftest_function(int x) {
  asm volatile("" ::: "memory");
  return x * 5 + 2;
}

TEST_CASE("pprof: frames named by the Symbolizer keep their module, address and mapping") {
  Symbolizer sym;
  sym.keep_origins();
  uint32_t pid = static_cast<uint32_t>(getpid());
  auto addr = reinterpret_cast<uint64_t>(&bpfdiag_pproftest_function) + 1;
  std::string name = sym.user(pid, addr);
  REQUIRE(name == "bpfdiag_pproftest_function");
  const FrameOrigin* o = sym.origin(pid, name);
  REQUIRE(o != nullptr);
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(n > 0);
  CHECK(o->module == std::string(exe, static_cast<size_t>(n)));
  CHECK(o->addr == addr);
  CHECK(o->start <= addr);
  CHECK(addr < o->limit);
  CHECK(sym.origin(pid, "no_such_frame") == nullptr);
  Symbolizer off;  // origins are kept only when asked
  (void)off.user(pid, addr);
  CHECK(off.origin(pid, name) == nullptr);

  Stack st;
  st.want_kernel = false;
  st.user = {name};
  PprofProfile p(std::vector<PprofValueType>{{"samples", "count"}});
  p.add({pprof_frames(st, pid, sym), {1}, thread_labels(pid, pid, "unit")});
  Decoded d = decode(p.serialize());
  REQUIRE(d.samples.size() == 1);
  CHECK(d.samples[0].files[0] == std::string(exe, static_cast<size_t>(n)));
  CHECK(d.samples[0].mappings[0] == std::string(exe, static_cast<size_t>(n)));
  CHECK(d.samples[0].addrs[0] == addr);
  CHECK(d.samples[0].num_labels.at("pid") == pid);
  CHECK(d.samples[0].num_labels.at("tid") == pid);
  CHECK(d.samples[0].str_labels.at("comm") == "unit");
}
