#include "common/bcc_stderr.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace bpfdiag {

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

bool is_libbcc_noise(const std::string& line) {
  static const char* kNoise[] = {"sha1 socket not available", "cannot get prog tag",
                                 "Kernel lockdown", "could not open bpf map"};
  for (const char* n : kNoise)
    if (line.find(n) != std::string::npos) return true;
  return false;
}

StderrNoiseFilter::StderrNoiseFilter() {
  std::fflush(stderr);
  tmp_fd_ = memfd_create("bpfdiag-stderr", MFD_CLOEXEC);  // no file anywhere
  if (tmp_fd_ < 0) return;
  saved_fd_ = dup(STDERR_FILENO);
  dup2(tmp_fd_, STDERR_FILENO);
}

std::string StderrNoiseFilter::captured() const {
  std::string all;
  if (tmp_fd_ < 0) return all;
  std::fflush(stderr);
  char buf[4096];
  ssize_t n;
  for (off_t off = 0; (n = pread(tmp_fd_, buf, sizeof buf, off)) > 0; off += n) all.append(buf, static_cast<size_t>(n));
  return all;
}

StderrNoiseFilter::~StderrNoiseFilter() {
  if (tmp_fd_ < 0) return;
  std::fflush(stderr);
  dup2(saved_fd_, STDERR_FILENO);
  close(saved_fd_);
  lseek(tmp_fd_, 0, SEEK_SET);
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = read(tmp_fd_, buf, sizeof buf)) > 0) all.append(buf, static_cast<size_t>(n));
  close(tmp_fd_);
  if (discard_ && !std::getenv("BPFDIAG_DEBUG")) return;
  std::istringstream in(all);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && !is_libbcc_noise(line)) std::fprintf(stderr, "%s\n", line.c_str());
}

// --- compile errors ----------------------------------------------------------------

// clang's diagnostics run to many lines; the first "error:" line says what broke.
std::string first_compile_error(const std::string& diagnostics) {
  std::istringstream in(diagnostics);
  for (std::string line; std::getline(in, line);)
    if (line.find("error:") != std::string::npos || line.find("LLVM ERROR") != std::string::npos) {
      const std::string unknown = "error: <unknown>:0:0: ";  // LLVM backend errors: no location
      if (line.rfind(unknown, 0) == 0) line = "error: " + line.substr(unknown.size());
      return first_line(line);
    }
  return "";
}

namespace {

// LLVM's BPF backend reports some errors (e.g. "Looks like the BPF stack limit of
// 512 bytes is exceeded") through its fatal-error path, which prints them and calls
// exit(1) inside libbcc's compile, while stderr is captured: the user would see
// nothing. While a compile runs, an atexit handler turns what was captured into the
// same one line as a returned compile error, on the real stderr (exit status stays 1).
struct RescueState {
  int real_stderr = -1;
  StderrNoiseFilter* quiet = nullptr;
};
RescueState g_rescue;

void compile_exit_rescue() {
  if (!g_rescue.quiet || g_rescue.real_stderr < 0) return;
  std::string all = g_rescue.quiet->captured();
  std::string first = first_compile_error(all);
  if (first.empty()) first = "the compiler exited without a message";
  std::string line = std::string(program_invocation_short_name) + ": cannot compile BPF program: " + first +
                     " (BPFDIAG_DEBUG=1 shows all diagnostics)\n";
  if (std::getenv("BPFDIAG_DEBUG")) line = all + line;
  if (write(g_rescue.real_stderr, line.data(), line.size()) < 0) {
  }
}

}  // namespace

CompileExitRescue::CompileExitRescue() {
  static bool registered = (std::atexit(compile_exit_rescue), true);
  (void)registered;
  std::fflush(stderr);
  g_rescue.real_stderr = dup(STDERR_FILENO);
}

void CompileExitRescue::watch(StderrNoiseFilter* quiet) { g_rescue.quiet = quiet; }

CompileExitRescue::~CompileExitRescue() {
  g_rescue.quiet = nullptr;
  if (g_rescue.real_stderr >= 0) close(g_rescue.real_stderr);
  g_rescue.real_stderr = -1;
}

}  // namespace bpfdiag
