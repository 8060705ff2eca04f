// Small /proc readers shared by the tools.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bpfdiag {

bool pid_exists(uint32_t pid);

// The fields of /proc/PID/stat the tools need (comm may hold spaces and parentheses).
struct ProcStat {
  char state = '?';         // R, S, D, Z, X, ...
  uint32_t ppid = 0;
  uint64_t start_time = 0;  // clock ticks after boot (field 22)
};
// `path` is a stat file such as "/proc/12/stat" or "/proc/12/task/13/stat".
std::optional<ProcStat> read_proc_stat(const std::string& path);
// The same from the file's first line (the parser, on bytes: tests/fuzz).
std::optional<ProcStat> parse_proc_stat(std::string_view line);

// One line of /proc/PID/maps: "start-end perms offset maj:min inode   path".
struct MapsLine {
  uint64_t start = 0, end = 0, offset = 0, inode = 0;
  unsigned maj = 0, min = 0;
  char perms[5] = {0};  // "r-xp"
  std::string path;     // "" for anonymous mappings; " (deleted)" kept
};
// nullopt when the line does not have the six fixed fields.
std::optional<MapsLine> parse_maps_line(const std::string& line);
// True while the process exists and has a thread that is not a zombie (a leader that
// called pthread_exit shows state Z while its other threads run on): what "the target
// is still running" means for tools that stop when it exits.
bool proc_running(uint32_t pid);
// True if `tid` is a thread of process `pid`.
bool is_thread_of(uint32_t tid, uint32_t pid);
std::string proc_comm(uint32_t pid);   // "" if gone
uint32_t proc_ppid(uint32_t pid);      // 0 if unknown
uint32_t proc_tgid(uint32_t tid);      // 0 if unknown
std::vector<uint32_t> proc_threads(uint32_t pid);
// Every process now (the numeric entries of /proc), at most `max`.
std::vector<uint32_t> proc_all_pids(size_t max = 1 << 22);
// The child processes of `pid` (every thread's /proc/PID/task/TID/children), sorted,
// without duplicates; empty if gone or unreadable.
std::vector<uint32_t> proc_children(uint32_t pid);
// `pid`'s descendants (children, theirs, ...), nearest first, at most `max`.
std::vector<uint32_t> proc_descendants(uint32_t pid, size_t max);
// Absolute path of the first mapping of a file whose base name starts with `prefix`
// (e.g. "libc.so"), as seen in /proc/PID/maps; "" if none.
std::string proc_find_mapping(uint32_t pid, const std::string& prefix);
int online_cpus();

// The file descriptors of `pid` that are connections one of its listening sockets
// accepted, as its /proc/PID/net/{tcp,tcp6,unix} show them: TCP established on a port
// the process listens on; UNIX stream connected and bearing a path the process listens
// on (an accepted UNIX socket carries its listener's path, a client's has none). At
// most `max` (sorted); empty when the process is gone.
std::vector<uint32_t> accepted_socket_fds(uint32_t pid, size_t max = 65536);
// The parsers, on one file's text (tests): socket inode -> (listening, port or path).
struct SocketLine {
  uint64_t inode = 0;
  bool listening = false, connected = false;
  std::string local;  // TCP: the local port (decimal); UNIX: the path ("" for none)
};
std::vector<SocketLine> parse_tcp_sockets(std::string_view text);
std::vector<SocketLine> parse_unix_sockets(std::string_view text);

}  // namespace bpfdiag
