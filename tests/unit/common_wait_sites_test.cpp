// Wait-site rules (common/wait_sites): the format, the matching order, the built-in
// table on real runtimes' wait stacks, and the rule directory's file rules.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/jvm_state.h"
#include "common/wait_sites.h"
#include "tests/unit/test_env.h"
#include "tests/unit/temp_dir.h"

using namespace bpfdiag;

namespace {

using bpfdiag_test::TempDir;

}  // namespace

TEST_CASE("glob_match: '*' only, anchored at both ends") {
  CHECK(glob_match("LWLockAcquire", "LWLockAcquire"));
  CHECK_FALSE(glob_match("LWLockAcquire", "LWLockAcquireOrWait"));
  CHECK(glob_match("ObjectMonitor::EnterI*", "ObjectMonitor::EnterI(JavaThread*)"));
  CHECK(glob_match("*ThreadPoolExecutor*getTask*", "Ljava/util/concurrent/ThreadPoolExecutor;::getTask"));
  CHECK_FALSE(glob_match("*getTask", "getTaskX"));
  CHECK(glob_match("*", ""));
  CHECK_FALSE(glob_match("a", ""));
  // no exponential backtracking: a hostile pattern on a long name stays fast
  std::string p(200, '*'), t(4000, 'a');
  p += "b";
  CHECK_FALSE(glob_match(p, t));
}

TEST_CASE("parse: classes, /own, via fallbacks; malformed lines named and skipped") {
  std::vector<std::string> errs;
  auto r = WaitRules::parse(
      "# comment\n"
      "lock/own   ObjectMonitor::EnterI*   Java monitor enter\n"
      "via:condition  *pthread_cond_wait*  pthread condition variable\n"
      "via  Parker::park*\n"
      "wrapper psi_*   instrumentation\n"
      "spin  foo  bar\n"          // unknown class
      "lock/mine  foo  bar\n"     // unknown modifier
      "idle\n"                    // no pattern
      "via:nonsense foo\n",       // unknown fallback class
      "t.rules", &errs);
  REQUIRE(r.size() == 4);
  CHECK(r.rules()[0].own_word);
  CHECK(r.rules()[0].kind == WaitKind::Lock);
  CHECK(r.rules()[1].role == WaitRule::Role::Via);
  CHECK(r.rules()[1].kind == WaitKind::Condition);
  CHECK(r.rules()[2].what == "Parker::park*");  // no words: the pattern stands for itself
  CHECK(r.rules()[2].kind == WaitKind::Unclassified);
  CHECK(r.rules()[3].role == WaitRule::Role::Wrapper);
  REQUIRE(errs.size() == 4);
  CHECK(errs[0].rfind("t.rules:6: unknown class", 0) == 0);
  CHECK(errs[1].rfind("t.rules:7: unknown modifier", 0) == 0);
  CHECK(errs[2] == "t.rules:8: no pattern");
  CHECK(errs[3].rfind("t.rules:9: unknown class", 0) == 0);
}

TEST_CASE("classify: the innermost deciding frame; else the outermost via; else unclassified") {
  auto r = WaitRules::parse(
      "via:condition *pthread_cond_wait*  pthread condition variable\n"
      "via/own  Parker::park*  Java park\n"
      "lock/own ObjectMonitor::EnterI*  Java monitor enter\n"
      "idle  *getTask*  pool worker waiting for a task\n"
      "lock  *AbstractQueuedSynchronizer*acquire*  j.u.c lock\n",
      "t");
  // a monitor enter: the condvar is how, EnterI decides
  auto v = r.classify({"futex_wait", "___pthread_cond_wait+0x1c", "PlatformEvent::park()",
                       "ObjectMonitor::EnterI(JavaThread*)+0x2a0", "ObjectMonitor::enter(JavaThread*)", "Task.run"});
  CHECK(v.decided);
  CHECK(v.kind == WaitKind::Lock);
  CHECK(v.what == "Java monitor enter");
  CHECK(v.frame == 3);
  CHECK(v.own_word);
  // a park: with Java frames the AQS acquire decides (innermost), the park says the word is own
  v = r.classify({"__futex_abstimed_wait_common", "___pthread_cond_wait", "Parker::park(bool, long)",
                  "Unsafe_Park", "AbstractQueuedSynchronizer.acquire", "ThreadPoolExecutor.getTask"});
  CHECK(v.kind == WaitKind::Lock);
  CHECK(v.what == "j.u.c lock");
  CHECK(v.own_word);
  // without Java frames: the outermost via, Parker::park, and its class (none)
  v = r.classify({"___pthread_cond_wait", "Parker::park(bool, long)", "Unsafe_Park", "[unknown]"});
  CHECK_FALSE(v.decided);
  CHECK(v.kind == WaitKind::Unclassified);
  CHECK(v.what == "Java park");
  CHECK(v.frame == 1);
  // only the condvar: its fallback class
  v = r.classify({"___pthread_cond_wait", "my_worker_loop"});
  CHECK(v.kind == WaitKind::Condition);
  CHECK_FALSE(v.decided);
  // nothing known: unclassified, no words
  v = r.classify({"[unknown] (app+0x1234)", "main"});
  CHECK(v.kind == WaitKind::Unclassified);
  CHECK(v.what.empty());
  CHECK(v.rule == nullptr);
}

TEST_CASE("java: rules name a parked JVM thread's blocker by its class, then its superclasses") {
  std::vector<std::string> errs;
  auto r = WaitRules::parse(
      "lock       java:java.util.concurrent.locks.ReentrantLock$*   ReentrantLock\n"
      "condition  java:*$ConditionObject                            Condition.await\n"
      "via        java:com.example.Gate                             gate\n"   // must decide
      "lock/own   java:com.example.Other                            other\n",  // no /own
      "t.rules", &errs);
  REQUIRE(errs.size() == 2);
  CHECK(errs[0].find("t.rules:3: a java: rule must decide") == 0);
  CHECK(errs[1].find("t.rules:4:") == 0);
  CHECK(r.rules().empty());  // never matched against frames
  REQUIRE(r.object_rules().size() == 2);
  auto v = r.classify_object({"java.util.concurrent.locks.ReentrantLock$NonfairSync",
                              "java.util.concurrent.locks.ReentrantLock$Sync",
                              "java.util.concurrent.locks.AbstractQueuedSynchronizer"});
  CHECK(v.decided);
  CHECK(v.kind == WaitKind::Lock);
  CHECK(v.what == "ReentrantLock");
  CHECK(v.frame == 0);
  // a user's subclass: decided by the superclass that matches
  v = r.classify_object({"com.example.MyCondition", "java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject"});
  CHECK(v.kind == WaitKind::Condition);
  CHECK(v.frame == 1);
  // nothing matches: not decided
  v = r.classify_object({"java.util.concurrent.Semaphore$NonfairSync", "java.util.concurrent.Semaphore$Sync"});
  CHECK_FALSE(v.decided);
  CHECK(v.kind == WaitKind::Unclassified);
  // the built-in table: the JDK's locks, conditions and hand-offs
  const WaitRules& b = WaitRules::suite();
  CHECK(b.classify_object({"java.util.concurrent.locks.ReentrantReadWriteLock$NonfairSync"}).kind == WaitKind::Lock);
  CHECK(b.classify_object({"java.util.concurrent.locks.AbstractQueuedSynchronizer$ConditionObject"}).kind ==
        WaitKind::Condition);
  CHECK(b.classify_object({"java.util.concurrent.ForkJoinPool"}).kind == WaitKind::Idle);
  CHECK_FALSE(b.classify_object({"java.util.concurrent.Semaphore$NonfairSync"}).decided);
}

TEST_CASE("java_wait_name: jstack's words; the JVM's state decides monitors, the rules parks") {
  DeclaredName d = java_wait_name(JVM_WAIT_MONITOR, {"com.example.Account"});
  CHECK(d.kind == WaitKind::Lock);
  CHECK(d.what == "Java monitor enter (waiting to lock a com.example.Account)");
  d = java_wait_name(JVM_WAIT_OBJECT, {});
  CHECK(d.kind == WaitKind::Condition);
  CHECK(d.what == "Java Object.wait() (waiting on an object of unknown class)");
  d = java_wait_name(JVM_WAIT_PARK, {"java.util.concurrent.locks.ReentrantLock$FairSync"});
  CHECK(d.kind == WaitKind::Lock);
  CHECK(d.what == "java.util.concurrent ReentrantLock (parking to wait for a java.util.concurrent.locks.ReentrantLock$FairSync)");
  CHECK(d.origin.find("wait_sites.rules:") != std::string::npos);
  d = java_wait_name(JVM_WAIT_PARK, {"com.example.Gate"});  // an unknown design: unclassified, named
  CHECK(d.kind == WaitKind::Unclassified);
  CHECK(d.what == "Java LockSupport.park (parking to wait for a com.example.Gate)");
  // a process that is no JVM is refused with a reason (never read)
  auto j = JvmState::open(static_cast<uint32_t>(getpid()));
  REQUIRE_FALSE(j);
  CHECK(j.error() == "not a HotSpot JVM (no libjvm.so mapped)");
}

TEST_CASE("built-in rules on real runtimes' wait stacks") {
  const WaitRules& r = WaitRules::suite();
  REQUIRE(r.size() > 50);
  // PostgreSQL 15: a row lock wait sleeps on its latch in epoll_wait (ProcSleep decides)
  auto v = r.classify({"epoll_wait", "WaitEventSetWaitBlock", "WaitEventSetWait", "WaitLatch", "ProcSleep",
                       "WaitOnLock", "LockAcquireExtended", "XactLockTableWait", "heapam_tuple_lock"});
  CHECK(v.kind == WaitKind::Lock);
  CHECK(v.what.find("heavyweight lock") != std::string::npos);
  // ... an LWLock waits on the backend's own semaphore
  v = r.classify({"do_futex_wait", "__new_sem_wait_slow64", "PGSemaphoreLock", "LWLockAcquire", "XLogInsertRecord"});
  CHECK(v.kind == WaitKind::Lock);
  CHECK(v.own_word);
  // ... an idle backend reads from its client
  v = r.classify({"epoll_wait", "WaitEventSetWait", "secure_read", "pq_recvbuf", "PostgresMain"});
  CHECK(v.kind == WaitKind::Idle);
  // glibc 2.36's names for the mutex slow path and the condvar
  CHECK(r.classify({"__lll_lock_wait", "___pthread_mutex_lock", "app_fn"}).kind == WaitKind::Lock);
  CHECK(r.classify({"__futex_abstimed_wait_common", "___pthread_cond_wait", "app_fn"}).kind == WaitKind::Condition);
  // Go: an idle M is not a held lock
  CHECK(r.classify({"runtime.futex", "runtime.futexsleep", "runtime.notesleep", "runtime.stopm",
                    "runtime.findRunnable", "runtime.schedule"})
            .kind == WaitKind::Idle);
  // a tracer detaching, wherever the frame is: before the inner mutex's lock rule
  v = r.classify({"__mutex_lock.constprop.0", "perf_trace_destroy", "_free_event", "perf_event_release_kernel"});
  CHECK(v.kind == WaitKind::Tracer);
  CHECK(v.frame == 1);
  // kernel frames of an off-CPU stack: block I/O, a sleep
  CHECK(r.classify({"io_schedule", "folio_wait_bit_common", "filemap_fault"}).kind == WaitKind::Io);
  CHECK(r.classify({"schedule", "do_nanosleep", "hrtimer_nanosleep", "clock_nanosleep"}).kind == WaitKind::Sleep);
  // wrappers
  CHECK(r.is_wrapper("psi_mutex_lock"));
  CHECK(r.is_wrapper("PyThread_acquire_lock_timed"));
  CHECK_FALSE(r.is_wrapper("tdc_acquire_share"));
  CHECK_FALSE(r.is_wrapper("ProcSleep"));  // deciding rules are not wrappers
}

TEST_CASE("rule directory: root-owned, not group/other-writable, no symlinks; bad lines skipped") {
  // the owner rule needs root to create root-owned files
  if (!bpfdiag_test::require_env(geteuid() == 0, "needs root")) return;
  TempDir d("bpfdiag-wait-rules");
  d.write("10-app.rules", "lock  my_app_lock_wait  my app's lock\nbogus line here\n");
  d.write("20-open.rules", "idle  world_writable_rule  x\n", 0666);
  d.write("ignored.txt", "idle  not_a_rules_file  x\n");
  REQUIRE(symlink((d.path + "/10-app.rules").c_str(), (d.path + "/30-link.rules").c_str()) == 0);
  WaitRules r = WaitRules::read_dir(d.path);
  REQUIRE(r.size() == 1);  // 10-app's good line; 20 (mode 0666) and 30 (a symlink) refused
  CHECK(r.rules()[0].pattern == "my_app_lock_wait");
  CHECK(r.rules()[0].origin == d.path + "/10-app.rules:1");
  // a directory writable by others is refused whole
  REQUIRE(chmod(d.path.c_str(), 0777) == 0);
  CHECK(WaitRules::read_dir(d.path).size() == 0);
  CHECK(WaitRules::read_dir(d.path + "/missing").size() == 0);
}
