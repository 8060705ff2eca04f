// Small /proc readers shared by the tools.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace bpfdiag {

bool pid_exists(uint32_t pid);
// True while the process exists and is not a zombie (state Z/X in /proc/PID/stat):
// what "the target is still running" means for tools that stop when it exits.
bool proc_running(uint32_t pid);
// True if `tid` is a thread of process `pid`.
bool is_thread_of(uint32_t tid, uint32_t pid);
std::string proc_comm(uint32_t pid);   // "" if gone
uint32_t proc_ppid(uint32_t pid);      // 0 if unknown
uint32_t proc_tgid(uint32_t tid);      // 0 if unknown
std::vector<uint32_t> proc_threads(uint32_t pid);
// Absolute path of the first mapping of a file whose base name starts with `prefix`
// (e.g. "libc.so"), as seen in /proc/PID/maps; "" if none.
std::string proc_find_mapping(uint32_t pid, const std::string& prefix);
int online_cpus();

}  // namespace bpfdiag
