// JvmLocks: a fixed pool of N workers that take one shared lock for each task, either a
// `synchronized` monitor or a java.util.concurrent ReentrantLock; the JVM's own
// accounting is the truth (ThreadMXBean with thread contention monitoring: BLOCKED
// time for a monitor, WAITING time for a parked ReentrantLock acquire).
// Not built by CMake: a test compiles it with javac into a temp dir.
//
// --mode queue is the idle counterpart: no shared lock; the workers take tasks from a
// LinkedBlockingQueue that one producer fills slowly (a task every 2 ms), so they wait
// for work (WAITING on the queue's Condition). --mode semaphore takes a one-permit
// java.util.concurrent.Semaphore as the lock: a design the tools have no rule for.
//
// USAGE: java JvmLocks [--mode monitor|reentrant|semaphore|queue] [--workers N] [--hold-us US] [--free-us US]
// Prints {"pid":..,"workers":[tid..]} when ready (native tids from /proc/self/task
// names are not needed: the tracer filters by pid). Commands on stdin:
//   start   snapshot every worker's blocked/waited time
//   stop    print {"window_ns", "blocked_ns", "waited_ns", "tasks"} summed over the
//           workers since start, then exit
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantLock;

public class JvmLocks {
  static final Object MONITOR = new Object();
  static final ReentrantLock RLOCK = new ReentrantLock();
  static final Semaphore PERMIT = new Semaphore(1);
  static final LinkedBlockingQueue<Long> QUEUE = new LinkedBlockingQueue<>();
  static final AtomicLong tasks = new AtomicLong();
  static volatile long sink;

  static void spin(long ns) {
    long end = System.nanoTime() + ns;
    long x = 0;
    while (System.nanoTime() < end) x++;
    sink += x;
  }

  public static void main(String[] args) throws Exception {
    String mode = "monitor";
    int workers = 8;
    long holdUs = 500, freeUs = 200;
    for (int i = 0; i + 1 < args.length; i += 2) {
      switch (args[i]) {
        case "--mode": mode = args[i + 1]; break;
        case "--workers": workers = Integer.parseInt(args[i + 1]); break;
        case "--hold-us": holdUs = Long.parseLong(args[i + 1]); break;
        case "--free-us": freeUs = Long.parseLong(args[i + 1]); break;
        default: throw new IllegalArgumentException(args[i]);
      }
    }
    ThreadMXBean mx = ManagementFactory.getThreadMXBean();
    mx.setThreadContentionMonitoringEnabled(true);
    final String m = mode;
    if (!m.equals("monitor") && !m.equals("reentrant") && !m.equals("semaphore") && !m.equals("queue"))
      throw new IllegalArgumentException(m);
    final long hold = holdUs * 1000, free = freeUs * 1000;
    List<Thread> pool = new ArrayList<>();
    for (int w = 0; w < workers; ++w) {
      Thread t = new Thread(() -> {
        try {
          while (true) {
            if (m.equals("monitor")) {
              synchronized (MONITOR) { spin(hold); }
            } else if (m.equals("reentrant")) {
              RLOCK.lock();
              try { spin(hold); } finally { RLOCK.unlock(); }
            } else if (m.equals("semaphore")) {
              PERMIT.acquire();
              try { spin(hold); } finally { PERMIT.release(); }
            } else {
              QUEUE.take();
              spin(hold);
            }
            tasks.incrementAndGet();
            spin(free);
          }
        } catch (InterruptedException e) {
          return;
        }
      }, "worker-" + w);
      t.setDaemon(true);
      t.start();
      pool.add(t);
    }
    if (m.equals("queue")) {
      Thread producer = new Thread(() -> {
        try {
          for (long i = 0;; ++i) { QUEUE.put(i); Thread.sleep(2); }
        } catch (InterruptedException e) {
          return;
        }
      }, "producer");
      producer.setDaemon(true);
      producer.start();
    }
    System.out.println("{\"pid\":" + ProcessHandle.current().pid() + ",\"mode\":\"" + mode + "\"}");
    System.out.flush();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    long t0 = 0, b0 = 0, w0 = 0, k0 = 0;
    for (String line; (line = in.readLine()) != null;) {
      long blocked = 0, waited = 0;
      for (Thread t : pool) {
        ThreadInfo ti = mx.getThreadInfo(t.getId());
        blocked += ti.getBlockedTime();
        waited += ti.getWaitedTime();
      }
      if (line.equals("start")) {
        t0 = System.nanoTime(); b0 = blocked; w0 = waited; k0 = tasks.get();
      } else if (line.equals("stop")) {
        System.out.println("{\"window_ns\":" + (System.nanoTime() - t0) + ",\"blocked_ns\":" + (blocked - b0) * 1000000L
            + ",\"waited_ns\":" + (waited - w0) * 1000000L + ",\"tasks\":" + (tasks.get() - k0) + "}");
        System.out.flush();
        return;
      }
    }
  }
}
