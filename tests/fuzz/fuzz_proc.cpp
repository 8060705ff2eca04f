// /proc parsers on hostile text (a process names its own comm, and its mappings'
// paths): /proc/PID/stat, /proc/PID/maps lines, /proc/kallsyms (common/proc,
// common/symbolize read_kallsyms), /proc/PID/net/{tcp,unix} (a socket's path is its
// owner's choice).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/proc.h"
#include "common/symbolize.h"
#include "tests/fuzz/fuzz_input.h"

using namespace bpfdiag;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)parse_proc_stat(text);
  (void)parse_tcp_sockets(text);
  for (const auto& s : parse_unix_sockets(text)) (void)s.local.size();
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (auto m = parse_maps_line(line)) (void)m->path.size();
  int fd = bpfdiag_fuzz::memfd_with(data, size);
  if (fd < 0) return 0;
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  (void)read_proc_stat(path);
  KernelSymbols k = read_kallsyms(path);
  (void)k;
  close(fd);
  return 0;
}
