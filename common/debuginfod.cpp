// The debuginfod client of the suite: libdebuginfod (dlopen'ed) in one background
// thread, its cache checked as root's own, its files checked as hostile input.
#include "common/debuginfod.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/runloop.h"
#include "common/untrusted_file.h"

#if __has_include(<elfutils/debuginfod.h>)
#include <elfutils/debuginfod.h>
#define BPFDIAG_HAVE_DEBUGINFOD_H 1
#endif

namespace bpfdiag {

namespace {

// libdebuginfod's client API (elfutils >= 0.178), called through dlsym.
struct dclient;
using begin_fn = dclient* (*)();
using end_fn = void (*)(dclient*);
using find_fn = int (*)(dclient*, const unsigned char*, int, char**);
using progress_fn = int (*)(dclient*, long, long);
using set_progress_fn = void (*)(dclient*, progress_fn);
#ifdef BPFDIAG_HAVE_DEBUGINFOD_H
// The header, where installed, checks these signatures (the client type aside).
static_assert(std::is_same_v<decltype(&debuginfod_find_debuginfo),
                             int (*)(debuginfod_client*, const unsigned char*, int, char**)>);
static_assert(std::is_same_v<debuginfod_progressfn_t, int (*)(debuginfod_client*, long, long)>);
#endif
constexpr const char* kSoname = "libdebuginfod.so.1";

// The signal that interrupts the worker's poll (curl waits up to a second between
// progress callbacks) so a cancelled lookup ends at once.
int wake_signal() { return SIGRTMIN + 5; }
void on_wake(int) {}

std::atomic<void*> g_worker_impl{nullptr};  // the Impl the worker's progress callback checks

std::string mib(uint64_t b) { return b < (1u << 20) ? std::to_string(b) + " bytes" : std::to_string(b >> 20) + " MiB"; }

// DEBUGINFOD_MAXSIZE (bytes, > 0) when set, capped by kMaxElfSize.
uint64_t max_download() {
  const char* s = std::getenv("DEBUGINFOD_MAXSIZE");
  if (s && *s) {
    char* end = nullptr;
    unsigned long long v = std::strtoull(s, &end, 10);
    if (end && !*end && v > 0 && v < kMaxElfSize) return v;
  }
  return kMaxElfSize;
}

std::string trimmed(const char* s) {
  std::string v = s ? s : "";
  size_t a = v.find_first_not_of(" \t\n"), b = v.find_last_not_of(" \t\n");
  return a == std::string::npos ? "" : v.substr(a, b - a + 1);
}

bool is_hex_id(const std::string& id) {
  if (id.size() < 2 || id.size() > 128 || id.size() % 2) return false;
  for (char c : id)
    if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string short_id(const std::string& id) { return id.size() > 16 ? id.substr(0, 16) + "..." : id; }

std::string base_name(const std::string& p) {
  auto i = p.rfind('/');
  return i == std::string::npos ? p : p.substr(i + 1);
}

}  // namespace

std::string check_private_dir(const std::string& dir, uid_t uid, bool create) {
  if (dir.empty() || dir[0] != '/') return "is not an absolute path";
  std::vector<std::string> parts;
  for (size_t i = 0; i < dir.size();) {
    size_t j = dir.find('/', i);
    if (j == std::string::npos) j = dir.size();
    std::string p = dir.substr(i, j - i);
    if (p == "." || p == "..") return "has a . or .. component";
    if (!p.empty()) parts.push_back(p);
    i = j + 1;
  }
  if (parts.empty()) return "is /";
  int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return std::string("/ cannot be opened: ") + std::strerror(errno);
  std::string walked;
  std::string why;
  for (size_t i = 0; i <= parts.size() && why.empty(); ++i) {
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      why = (walked.empty() ? "/" : walked) + " cannot be read: " + std::strerror(errno);
      break;
    }
    const std::string shown = walked.empty() ? "/" : walked;
    const bool last = i == parts.size();
    if (!S_ISDIR(st.st_mode)) {
      why = shown + " is not a directory";
      break;
    }
    if (last) {
      if (st.st_uid != uid) why = "belongs to uid " + std::to_string(st.st_uid) + ", not to this user";
      else if (st.st_mode & 077) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
        why = std::string("has mode ") + mode + ", not 0700 (it must be private)";
      }
      break;
    }
    if (st.st_uid != 0 && st.st_uid != uid) {
      why = shown + " belongs to uid " + std::to_string(st.st_uid);
      break;
    }
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
      why = shown + " is writable by others";
      break;
    }
    walked += "/" + parts[i];
    int next = openat(fd, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && errno == ENOENT && create) {
      if (mkdirat(fd, parts[i].c_str(), 0700) != 0 && errno != EEXIST) {
        why = walked + " cannot be created: " + std::strerror(errno);
        break;
      }
      next = openat(fd, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (next < 0) {
      why = walked + (errno == ELOOP || errno == ENOTDIR ? " is a symbolic link or not a directory"
                                                         : std::string(" cannot be opened: ") + std::strerror(errno));
      break;
    }
    struct stat lst {};
    if (fstatat(next, "", &lst, AT_EMPTY_PATH) == 0 && S_ISLNK(lst.st_mode)) {
      close(next);
      why = walked + " is a symbolic link";
      break;
    }
    close(fd);
    fd = next;
  }
  close(fd);
  return why;
}

DebuginfodConfig debuginfod_config(bool create) {
  DebuginfodConfig c;
  c.urls = trimmed(std::getenv("DEBUGINFOD_URLS"));
  std::string env = trimmed(std::getenv("DEBUGINFOD_CACHE_PATH"));
  c.cache_dir = env.empty() ? kDebuginfodCacheDir : env;
  while (c.cache_dir.size() > 1 && c.cache_dir.back() == '/') c.cache_dir.pop_back();
  struct stat st {};
  if (!create && lstat(c.cache_dir.c_str(), &st) != 0 && errno == ENOENT) {
    c.cache_missing = true;
    return c;
  }
  c.cache_why = check_private_dir(c.cache_dir, geteuid(), create);
  c.cache_usable = c.cache_why.empty();
  return c;
}

void debuginfod_note(const std::string& key, const std::string& text) {
  static std::mutex mu;
  static std::set<std::string> said;
  static size_t lines = 0;
  constexpr size_t kMaxLines = 20;
  std::string line;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!said.insert(key).second || lines > kMaxLines) return;
    ++lines;
    line = std::string(program_invocation_short_name) +
           ": debuginfod: " + (lines > kMaxLines ? "further lookups are only counted (data_quality)" : text) + "\n";
  }
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

struct Debuginfod::Impl {
  struct Job {
    std::string name;
    bool done = false;
    DebuginfodOutcome out;
  };
  DebuginfodConfig cfg;
  uint64_t max_size = kMaxElfSize;
  pid_t owner = 0;

  std::mutex mu;
  std::condition_variable cv;       // a job finished, the queue grew, or cancel
  std::deque<std::string> queue;    // build-ids to ask for, in order
  std::map<std::string, Job> jobs;  // every build-id asked for in this run
  uint64_t wait_left = kDebuginfodWaitNs;
  bool started = false, exited = false;
  pthread_t thread{};
  std::atomic<bool> cancel{false};
  std::atomic<bool> too_big{false};  // the current download passed max_size

  // libdebuginfod, resolved in the worker
  void* lib = nullptr;
  begin_fn begin = nullptr;
  end_fn end = nullptr;
  find_fn find = nullptr;
  set_progress_fn set_progress = nullptr;
  std::string load_error;

  static int progress(dclient* c, long a, long b);
  static void* thread_main(void* self);
  void start();
  void run();
  void load_library();
  DebuginfodOutcome lookup(dclient* client, const std::string& id);
};

int Debuginfod::Impl::progress(dclient* c, long a, long b) {
  (void)c;
  Impl* self = static_cast<Impl*>(g_worker_impl.load());
  if (!self) return 1;
  if (self->cancel.load()) return 1;
  // a: bytes received once a server answers (a loop count before); b: the announced size
  if ((b > 0 && static_cast<uint64_t>(b) > self->max_size) || (a > 0 && static_cast<uint64_t>(a) > self->max_size)) {
    self->too_big.store(true);
    return 1;
  }
  return 0;
}

void Debuginfod::Impl::load_library() {
  lib = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    load_error = std::string("cannot load ") + kSoname + " (Debian package libdebuginfod1): " + (e ? e : "?");
    return;
  }
  begin = reinterpret_cast<begin_fn>(dlsym(lib, "debuginfod_begin"));
  end = reinterpret_cast<end_fn>(dlsym(lib, "debuginfod_end"));
  find = reinterpret_cast<find_fn>(dlsym(lib, "debuginfod_find_debuginfo"));
  set_progress = reinterpret_cast<set_progress_fn>(dlsym(lib, "debuginfod_set_progressfn"));
  if (!begin || !end || !find || !set_progress)
    load_error = std::string(kSoname) + " lacks the client API (elfutils 0.178 or later needed)";
}

DebuginfodOutcome Debuginfod::Impl::lookup(dclient* client, const std::string& id) {
  DebuginfodOutcome o;
  too_big.store(false);
  char* path = nullptr;
  int rc = find(client, reinterpret_cast<const unsigned char*>(id.c_str()), 0, &path);
  if (rc >= 0) {
    close(rc);  // reopened by path as untrusted input (open_debuginfod_file)
    if (path) {
      o.found = true;
      o.path = path;
    } else {
      o.error = "no path returned";
    }
  } else if (cancel.load()) {
    // libdebuginfod takes a cancelled transfer for a miss and records it as one (an
    // empty file, trusted for 10 minutes): a later run would not ask again. Not a miss.
    std::string miss = cfg.cache_dir + "/" + id + "/debuginfo";
    struct stat st {};
    if (fstatat(AT_FDCWD, miss.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
      unlink(miss.c_str());
    o.error = "cancelled: the tool exited";
  } else if (too_big.load() || rc == -EFBIG) {
    o.error = "larger than " + mib(max_size) + " (DEBUGINFOD_MAXSIZE)";
  } else if (rc == -ENOENT) {
    o.error = "not found on the server";
  } else if (rc == -ETIME || rc == -ETIMEDOUT) {
    o.error = "timed out (DEBUGINFOD_TIMEOUT, DEBUGINFOD_MAXTIME)";
  } else {
    o.error = std::strerror(-rc);
  }
  std::free(path);
  return o;
}

void* Debuginfod::Impl::thread_main(void* p) {
  static_cast<Impl*>(p)->run();
  return nullptr;
}

void Debuginfod::Impl::run() {
  sigset_t w;
  sigemptyset(&w);
  sigaddset(&w, wake_signal());
  pthread_sigmask(SIG_UNBLOCK, &w, nullptr);
  load_library();
  dclient* client = nullptr;
  if (load_error.empty()) {
    client = begin();
    if (!client) load_error = "debuginfod_begin failed";
    else set_progress(client, &Impl::progress);
  }
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    cv.wait(lk, [&] { return cancel.load() || !queue.empty(); });
    if (cancel.load()) break;
    std::string id = queue.front();
    queue.pop_front();
    lk.unlock();
    DebuginfodOutcome o;
    if (client) o = lookup(client, id);
    else o.error = load_error;
    lk.lock();
    Job& j = jobs[id];
    j.out = std::move(o);
    j.done = true;
    cv.notify_all();
  }
  for (auto& id : queue) {
    Job& j = jobs[id];
    j.out.error = "cancelled: the tool exited";
    j.done = true;
  }
  queue.clear();
  lk.unlock();
  if (client) end(client);
  lk.lock();
  exited = true;
  cv.notify_all();
}

void Debuginfod::Impl::start() {
  // libdebuginfod reads its cache path from the environment at every lookup: ours,
  // checked, set before the thread that reads it exists
  setenv("DEBUGINFOD_CACHE_PATH", cfg.cache_dir.c_str(), 1);
  g_worker_impl.store(this);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_wake;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: curl's poll returns EINTR
  sigaction(wake_signal(), &sa, nullptr);
  // The worker (and curl's resolver threads it starts) takes no signal but the wake
  // one: stop signals stay with the main thread, whose waits they must interrupt.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  started = pthread_create(&thread, nullptr, &Impl::thread_main, this) == 0;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!started) {
    load_error = std::string("cannot start its thread: ") + std::strerror(errno);
    exited = true;
  }
}

Debuginfod::Debuginfod() : impl_(std::make_unique<Impl>()) {
  impl_->cfg = debuginfod_config();
  impl_->max_size = max_download();
  impl_->owner = getpid();
}

Debuginfod::~Debuginfod() {
  Impl& d = *impl_;
  if (!d.started || d.owner != getpid()) return;
  d.cancel.store(true);
  std::unique_lock<std::mutex> lk(d.mu);
  d.cv.notify_all();
  // curl sleeps in poll for up to a second between progress callbacks: interrupt it
  // until the thread has seen the cancel
  while (!d.exited) {
    pthread_kill(d.thread, wake_signal());
    d.cv.wait_for(lk, std::chrono::milliseconds(20));
  }
  lk.unlock();
  pthread_join(d.thread, nullptr);
}

Debuginfod* Debuginfod::get() {
  static std::unique_ptr<Debuginfod> inst = []() -> std::unique_ptr<Debuginfod> {
    if (trimmed(std::getenv("DEBUGINFOD_URLS")).empty()) return nullptr;
    return std::unique_ptr<Debuginfod>(new Debuginfod());
  }();
  if (inst && inst->impl_->owner != getpid()) return nullptr;
  return inst.get();
}

const std::string& Debuginfod::urls() const { return impl_->cfg.urls; }

bool Debuginfod::request(const std::string& build_id, const std::string& name) {
  Impl& d = *impl_;
  if (!d.cfg.cache_usable) {
    debuginfod_note("#cache", "not used: its cache " + d.cfg.cache_dir + " " + d.cfg.cache_why);
    return false;
  }
  if (!is_hex_id(build_id)) return false;
  std::lock_guard<std::mutex> lk(d.mu);
  if (d.jobs.count(build_id)) return true;
  if (d.jobs.size() >= kMaxDebuginfodLookups) {
    debuginfod_note("#cap", "more than " + std::to_string(kMaxDebuginfodLookups) +
                                " build-ids in this run: the rest are not looked up");
    return false;
  }
  d.jobs[build_id].name = name;
  d.queue.push_back(build_id);
  if (!d.started && !d.exited) d.start();
  if (!d.started) {  // no thread: the lookup fails at once
    Impl::Job& j = d.jobs[build_id];
    j.done = true;
    j.out.error = d.load_error;
    d.queue.clear();
  }
  d.cv.notify_all();
  return true;
}

std::optional<DebuginfodOutcome> Debuginfod::result(const std::string& build_id, bool wait) {
  Impl& d = *impl_;
  std::unique_lock<std::mutex> lk(d.mu);
  auto it = d.jobs.find(build_id);
  if (it == d.jobs.end()) return DebuginfodOutcome{false, "", "not asked for"};
  while (!it->second.done && wait && d.wait_left > 0 && !stop_signal()) {
    uint64_t t0 = monotonic_ns();
    uint64_t slice = std::min<uint64_t>(d.wait_left, 50000000ULL);  // a stop signal is seen within 50 ms
    d.cv.wait_for(lk, std::chrono::nanoseconds(slice));
    uint64_t spent = monotonic_ns() - t0;
    d.wait_left -= std::min(spent, d.wait_left);
  }
  if (!it->second.done) return std::nullopt;
  return it->second.out;
}

uint64_t Debuginfod::wait_left_ns() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->wait_left;
}

std::unique_ptr<ElfFile> open_debuginfod_file(const DebuginfodOutcome& o, const std::string& build_id,
                                              std::string* why) {
  auto fail = [&](std::string w) -> std::unique_ptr<ElfFile> {
    if (why) *why = std::move(w);
    return nullptr;
  };
  if (!o.found) return fail(o.error);
  UntrustedPolicy pol;  // in our private cache, yet what a server sent: no link, size-capped, ours
  pol.max_size = max_download();
  pol.owner = geteuid();
  UntrustedOpen r = open_untrusted(o.path, pol);
  if (!r.file)
    return fail(!r.refused.empty() ? "refused " + o.path + ": " + r.refused
                                   : "cannot open " + o.path + ": " + std::strerror(r.err));
  auto e = ElfFile::open(r.file);
  if (!e) return fail("refused " + o.path + ": not an ELF file");
  std::string got = e->build_id();
  if (got != build_id) {
    unlink(o.path.c_str());  // a poisoned cache entry: asked for again next time
    return fail("refused the file the server sent: its build-id is " +
                (got.empty() ? std::string("missing") : short_id(got)) + ", not the one asked for");
  }
  return e;
}

std::string debuginfod_file_label(const std::string& name, const std::string& build_id) {
  return base_name(name) + " (build-id " + short_id(build_id) + ")";
}

}  // namespace bpfdiag
