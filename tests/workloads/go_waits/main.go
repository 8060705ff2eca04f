// go_waits: goroutine waits with the program's own truth, for lockstat's Go test
// (tests/integration/test_lockstat_go.py; docs/design/go-waits.md).
//
//   mutex     N goroutines take one sync.Mutex and hold it `hold` (busy)
//   chan      N goroutines receive from one channel a feeder sends on every `hold`
//             (the idle counterpart: waiting for work, not for a lock)
//   pingpong  pairs of goroutines bounce a value over unbuffered channels: every
//             operation parks (the rate guard's case)
//
// Prints {"pid", "mode"} when running; then on stdin "start" opens a window and "stop"
// prints what the program measured over it as one JSON line: own_wait_ns (every
// Lock/receive timed with time.Now/time.Since around it, added when it completes),
// waits (those calls), block_prof_ns/block_prof_events (runtime.SetBlockProfileRate(1):
// the runtime's own accounting of blocking), window_ns. Exits when stdin closes.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

var waitNs, waits, ops int64

func spin(d time.Duration) {
	t := time.Now()
	for time.Since(t) < d {
	}
}

//go:noinline
func lockedWork(mu *sync.Mutex, hold time.Duration) {
	t := time.Now()
	mu.Lock()
	atomic.AddInt64(&waitNs, int64(time.Since(t)))
	atomic.AddInt64(&waits, 1)
	spin(hold)
	mu.Unlock()
}

//go:noinline
func takeWork(ch chan int) {
	t := time.Now()
	<-ch
	atomic.AddInt64(&waitNs, int64(time.Since(t)))
	atomic.AddInt64(&waits, 1)
}

func blockProfile() (ns float64, events int64) {
	var b bytes.Buffer
	pprof.Lookup("block").WriteTo(&b, 1)
	m := regexp.MustCompile(`cycles/second=(\d+)`).FindSubmatch(b.Bytes())
	if m == nil {
		return 0, 0
	}
	cps, _ := strconv.ParseFloat(string(m[1]), 64)
	n, _ := runtime.BlockProfile(nil)
	recs := make([]runtime.BlockProfileRecord, n+100)
	n, _ = runtime.BlockProfile(recs)
	for _, r := range recs[:n] {
		ns += float64(r.Cycles) / cps * 1e9
		events += r.Count
	}
	return
}

func main() {
	mode := flag.String("mode", "mutex", "mutex|chan|pingpong")
	n := flag.Int("n", 20, "goroutines")
	hold := flag.Duration("hold", 200*time.Microsecond, "hold time (mutex) / feed period (chan)")
	flag.Parse()
	runtime.SetBlockProfileRate(1)
	var mu sync.Mutex
	ch := make(chan int)
	for i := 0; i < *n; i++ {
		i := i
		go func() {
			for {
				switch *mode {
				case "mutex":
					lockedWork(&mu, *hold)
				case "chan":
					takeWork(ch)
				default:
					return
				}
				atomic.AddInt64(&ops, 1)
			}
		}()
		_ = i
	}
	if *mode == "chan" {
		go func() {
			for {
				time.Sleep(*hold)
				ch <- 1
			}
		}()
	}
	if *mode == "pingpong" {
		for p := 0; p < *n/2; p++ {
			a, b := make(chan int), make(chan int)
			go func() {
				for {
					a <- 1
					<-b
				}
			}()
			go func() {
				for {
					<-a
					b <- 1
					atomic.AddInt64(&ops, 1)
				}
			}()
		}
	}
	out := json.NewEncoder(os.Stdout)
	out.Encode(map[string]interface{}{"pid": os.Getpid(), "mode": *mode, "gomaxprocs": runtime.GOMAXPROCS(0)})
	var t0 time.Time
	var w0, c0, o0, e0 int64
	var b0 float64
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "start":
			b0, e0 = blockProfile()
			w0, c0, o0 = atomic.LoadInt64(&waitNs), atomic.LoadInt64(&waits), atomic.LoadInt64(&ops)
			t0 = time.Now()
		case "stop":
			el := time.Since(t0)
			w1, c1, o1 := atomic.LoadInt64(&waitNs), atomic.LoadInt64(&waits), atomic.LoadInt64(&ops)
			b1, e1 := blockProfile()
			out.Encode(map[string]interface{}{"mode": *mode, "window_ns": el.Nanoseconds(), "own_wait_ns": w1 - w0,
				"waits": c1 - c0, "ops": o1 - o0, "block_prof_ns": int64(b1 - b0), "block_prof_events": e1 - e0})
		case "ops":
			out.Encode(map[string]interface{}{"ops": atomic.LoadInt64(&ops)})
		}
	}
}
