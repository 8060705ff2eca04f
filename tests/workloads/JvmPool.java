// JvmPool: an HTTP server on loopback (com.sun.net.httpserver) whose handlers run on a
// fixed pool (Executors.newFixedThreadPool, threads "pool-1-thread-N"). Each request
// burns --cpu-us of thread CPU time, then Thread.sleep(--sleep-ms), then answers.
// Ground truth for threadpool's JVM test: every worker times its own busy (handler
// start to end), CPU and sleep time. Not built by CMake: the test compiles it with
// javac into a temp dir.
//
// USAGE: java JvmPool [--port N] [--workers N] [--cpu-us US] [--sleep-ms MS]
// Prints {"pid":..,"port":..} when ready. Reads commands on stdin:
//   start   begin the measurement window (snapshot of every worker's counters)
//   stop    end it and print one JSON line of truth for the window, then exit
import com.sun.net.httpserver.HttpServer;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

public class JvmPool {
  static final class Stats {
    final long tid = Thread.currentThread().getId();
    volatile long busyNs, cpuNs, sleepNs, requests, curStart;
  }

  static final List<Stats> all = new CopyOnWriteArrayList<>();
  static final ThreadLocal<Stats> mine = ThreadLocal.withInitial(() -> {
    Stats s = new Stats();
    all.add(s);
    return s;
  });
  static final ThreadMXBean mx = ManagementFactory.getThreadMXBean();

  // {busy, cpu, sleep, requests} summed over workers at `now`, in-progress work included
  static long[] snapshot(long now) {
    long[] r = new long[4];
    for (Stats s : all) {
      long cur = s.curStart;
      r[0] += s.busyNs + (cur != 0 && now > cur ? now - cur : 0);
      r[1] += s.cpuNs;
      r[2] += s.sleepNs;
      r[3] += s.requests;
    }
    return r;
  }

  public static void main(String[] args) throws Exception {
    int port = 0, workers = 8;
    long cpuUs = 200, sleepMs = 5;
    for (int i = 0; i + 1 < args.length; i += 2) {
      long v = Long.parseLong(args[i + 1]);
      switch (args[i]) {
        case "--port": port = (int) v; break;
        case "--workers": workers = (int) v; break;
        case "--cpu-us": cpuUs = v; break;
        case "--sleep-ms": sleepMs = v; break;
        default: throw new IllegalArgumentException("unknown option " + args[i]);
      }
    }
    final long cpuNs = cpuUs * 1000, sleep = sleepMs;
    HttpServer srv = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 128);
    ExecutorService pool = Executors.newFixedThreadPool(workers);
    srv.setExecutor(pool);
    final byte[] body = "ok\n".getBytes();
    srv.createContext("/", ex -> {
      Stats s = mine.get();
      long t0 = System.nanoTime();
      s.curStart = t0;
      long c0 = mx.getCurrentThreadCpuTime();
      long c = c0;
      while (c - c0 < cpuNs) c = mx.getCurrentThreadCpuTime();
      long s0 = System.nanoTime();
      try {
        Thread.sleep(sleep);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      long s1 = System.nanoTime();
      ex.getRequestBody().readAllBytes();
      ex.sendResponseHeaders(200, body.length);
      try (OutputStream os = ex.getResponseBody()) {
        os.write(body);
      }
      long c1 = mx.getCurrentThreadCpuTime();
      long t1 = System.nanoTime();
      s.sleepNs += s1 - s0;
      s.cpuNs += c1 - c0;
      s.busyNs += t1 - t0;
      s.requests++;
      s.curStart = 0;
    });
    srv.start();
    // start every worker now so the pool is complete before anyone traces it
    for (int i = 0; i < workers; ++i) pool.submit(() -> mine.get());
    System.out.println("{\"pid\":" + ProcessHandle.current().pid() + ",\"port\":"
        + srv.getAddress().getPort() + ",\"workers\":" + workers + "}");
    System.out.flush();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    long[] a = null;
    long ta = 0;
    String line;
    while ((line = in.readLine()) != null) {
      if (line.equals("start")) {
        ta = System.nanoTime();
        a = snapshot(ta);
      } else if (line.equals("stop") && a != null) {
        long tb = System.nanoTime();
        long[] b = snapshot(tb);
        double w = tb - ta;
        double busy = (b[0] - a[0]) / w;
        long req = b[3] - a[3];
        System.out.printf(
            "{\"window_ns\":%d,\"workers\":%d,\"busy_avg\":%.4f,\"utilization\":%.4f,"
                + "\"cpu_avg\":%.4f,\"sleep_avg\":%.4f,\"idle_avg\":%.4f,\"requests\":%d,"
                + "\"req_per_s\":%.1f}%n",
            (long) w, workers, busy, busy / workers, (b[1] - a[1]) / w, (b[2] - a[2]) / w,
            workers - busy, req, req / (w / 1e9));
        System.out.flush();
        break;
      }
    }
    srv.stop(0);
    pool.shutdownNow();
    System.exit(0);
  }
}
