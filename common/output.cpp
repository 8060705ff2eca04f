#include "common/output.h"

#include <errno.h>
#include <unistd.h>

#include <cstdio>

#include "common/runloop.h"
#include "common/timing.h"

namespace bpfdiag {

Window window_ending_now(uint64_t interval_ns, bool final) { return Window{realtime_ns(), interval_ns, final}; }

nlohmann::json make_record(const std::string& tool, const std::string& kind, const Window& w,
                           const nlohmann::json& fields, const DataQuality& dq) {
  return make_record_json(tool, kind, w, fields, dq.to_json());
}

nlohmann::json make_record_json(const std::string& tool, const std::string& kind, const Window& w,
                                nlohmann::json fields, const nlohmann::json& dq) {
  nlohmann::json j = fields.is_object() ? std::move(fields) : nlohmann::json::object();
  j["type"] = tool + "." + kind;
  j["schema"] = kSchemaVersion;
  j["time_ns"] = w.time_ns;
  j["interval_ns"] = w.interval_ns;
  j["final"] = w.final;
  j["data_quality"] = dq;
  return j;
}

nlohmann::json stack_json(const Stack& st) {
  nlohmann::json j = nlohmann::json::object();
  if (st.want_user) {
    j["user_stack"] = st.user;
    j["user_stack_missing"] = st.user_missing;
  }
  if (st.want_kernel) {
    j["kernel_stack"] = st.kernel;
    j["kernel_stack_missing"] = st.kernel_missing;
  }
  return j;
}

Stack stack_from_json(const nlohmann::json& r) {
  Stack st;
  auto part = [&](const char* key, const char* missing, bool& want, bool& miss, std::vector<std::string>& frames) {
    want = r.contains(key) && r[key].is_array();
    if (!want) return;
    for (auto& f : r[key])
      if (f.is_string()) frames.push_back(f.get<std::string>());
    miss = r.value(missing, false);
  };
  part("user_stack", "user_stack_missing", st.want_user, st.user_missing, st.user);
  part("kernel_stack", "kernel_stack_missing", st.want_kernel, st.kernel_missing, st.kernel);
  return st;
}

nlohmann::json start_record_fields(const std::vector<uint32_t>& pids, const std::vector<uint32_t>& tids,
                                   uint64_t probes, const nlohmann::json& options) {
  nlohmann::json f = nlohmann::json::object();
  if (!pids.empty()) f["pid"] = pids;
  if (!tids.empty()) f["tid"] = tids;
  f["probes"] = probes;
  f["options"] = options;
  return f;
}

void write_record_shared_dq(std::ostream& os, const nlohmann::json& record, const std::string& dq_text) {
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // the key as dumped; inside a string value its quotes would be escaped (\"), so the
  // first match is the key
  static const std::string kPlaceholder = "\"data_quality\":null";
  const size_t at = line.find(kPlaceholder);
  if (at != std::string::npos) line.replace(at + kPlaceholder.size() - 4, 4, dq_text);
  os << line << '\n';
}

void write_record(std::ostream& os, const nlohmann::json& record) { emit_json(os, record); }

void announce_attached(std::ostream& out, const std::string& tool, bool json, const std::string& banner,
                       const nlohmann::json& fields, const DataQuality& zero_dq) {
  timing_mark("after attach, before banner");
  timing_report();
  if (!banner.empty()) {
    std::fprintf(stderr, "%s\n", banner.c_str());
    std::fflush(stderr);
  }
  if (json) write_record(out, make_record(tool, "start", window_ending_now(0, false), fields, zero_dq));
}

bool write_all(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace bpfdiag
