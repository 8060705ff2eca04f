// libbcc's stderr: the noise it prints on every load filtered out, clang's diagnostics
// reduced to their first error, and the rescue of a compile that exits the process.
#pragma once
#include <string>

namespace bpfdiag {

// `s` up to its first newline, trailing blanks dropped.
std::string first_line(const std::string& s);

// Redirects stderr into a temp file while alive; on destruction replays every line
// except libbcc's harmless noise ("sha1 socket not available", "cannot get prog tag").
class StderrNoiseFilter {
 public:
  StderrNoiseFilter();
  ~StderrNoiseFilter();
  // Drop everything captured (e.g. clang's diagnostics when the error is reported
  // as one line instead); BPFDIAG_DEBUG=1 in the environment keeps it all.
  void discard() { discard_ = true; }
  // What was written to stderr so far.
  std::string captured() const;
  StderrNoiseFilter(const StderrNoiseFilter&) = delete;
  StderrNoiseFilter& operator=(const StderrNoiseFilter&) = delete;

 private:
  int saved_fd_ = -1;
  int tmp_fd_ = -1;
  bool discard_ = false;
};

bool is_libbcc_noise(const std::string& line);

// The first compiler error line of clang/LLVM diagnostics ("" if none).
std::string first_compile_error(const std::string& diagnostics);

// While alive (around a libbcc compile, created before its StderrNoiseFilter): if the
// compiler exits the process (LLVM's fatal-error path), what the filter captured is
// printed as one line, "TOOL: cannot compile BPF program: FIRST ERROR", on the real
// stderr before the exit completes.
class CompileExitRescue {
 public:
  CompileExitRescue();
  ~CompileExitRescue();
  void watch(StderrNoiseFilter* quiet);
  CompileExitRescue(const CompileExitRescue&) = delete;
  CompileExitRescue& operator=(const CompileExitRescue&) = delete;
};

}  // namespace bpfdiag
