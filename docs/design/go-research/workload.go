// Workload: goroutine waits with the program's own truth.
// modes: mutex (N goroutines, one sync.Mutex, hold ~H us busy),
//        chan (N goroutines receive from a channel fed slowly),
//        rw (sync.RWMutex: 1 writer holding H us, N-1 readers),
//        cond (sync.Cond: N waiters, producer signals every P us)
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

var waitNs int64 // own timing of every blocking call (Lock/RLock/recv/Wait)
var ops int64

//go:noinline
func markWindow(n int) int { return n * 7 } // uprobe target: window start (1) / end (2)

func spin(d time.Duration) {
	t := time.Now()
	for time.Since(t) < d {
	}
}

func cyclesPerSecond() float64 {
	var b bytes.Buffer
	pprof.Lookup("block").WriteTo(&b, 1)
	m := regexp.MustCompile(`cycles/second=(\d+)`).FindSubmatch(b.Bytes())
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

func profTotals() (blockNs, mutexNs float64, blockN, mutexN int64) {
	cps := cyclesPerSecond()
	n, _ := runtime.BlockProfile(nil)
	br := make([]runtime.BlockProfileRecord, n+100)
	n, _ = runtime.BlockProfile(br)
	for _, r := range br[:n] {
		blockNs += float64(r.Cycles) / cps * 1e9
		blockN += r.Count
	}
	n, _ = runtime.MutexProfile(nil)
	mr := make([]runtime.BlockProfileRecord, n+100)
	n, _ = runtime.MutexProfile(mr)
	for _, r := range mr[:n] {
		mutexNs += float64(r.Cycles) / cps * 1e9
		mutexN += r.Count
	}
	return
}

func main() {
	mode := flag.String("mode", "mutex", "mutex|chan|rw|cond")
	n := flag.Int("n", 20, "goroutines")
	hold := flag.Duration("hold", 200*time.Microsecond, "hold time (busy) / feed period")
	dur := flag.Duration("d", 10*time.Second, "measurement window")
	warm := flag.Duration("warm", time.Second, "warmup before window")
	prof := flag.Bool("prof", true, "enable block+mutex profiles (rate 1)")
	flag.Parse()
	if *prof {
		runtime.SetMutexProfileFraction(1)
		runtime.SetBlockProfileRate(1)
	}
	fmt.Fprintf(os.Stderr, "pid %d mode %s n %d hold %v GOMAXPROCS %d\n", os.Getpid(), *mode, *n, *hold, runtime.GOMAXPROCS(0))
	var mu sync.Mutex
	var rw sync.RWMutex
	cond := sync.NewCond(&mu)
	ch := make(chan int)
	ready := 0
	pp := make([]chan int, *n+1)
	for i := range pp {
		pp[i] = make(chan int)
	}
	stop := int32(0)
	var wg sync.WaitGroup
	for i := 0; i < *n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for atomic.LoadInt32(&stop) == 0 {
				switch *mode {
				case "mutex":
					t := time.Now()
					mu.Lock()
					atomic.AddInt64(&waitNs, int64(time.Since(t)))
					spin(*hold)
					mu.Unlock()
				case "chan":
					t := time.Now()
					v := <-ch
					atomic.AddInt64(&waitNs, int64(time.Since(t)))
					if v < 0 {
						return
					}
				case "rw":
					if i == 0 {
						t := time.Now()
						rw.Lock()
						atomic.AddInt64(&waitNs, int64(time.Since(t)))
						spin(*hold)
						rw.Unlock()
						spin(*hold / 4)
					} else {
						t := time.Now()
						rw.RLock()
						atomic.AddInt64(&waitNs, int64(time.Since(t)))
						spin(*hold / 4)
						rw.RUnlock()
					}
				case "pingpong": // pairs (i, i^1) bounce over unbuffered channels: max park rate
					if i%2 == 0 {
						pp[i] <- 1
						<-pp[i+1]
					} else {
						<-pp[i-1]
						pp[i] <- 1
					}
				case "cond":
					mu.Lock()
					t := time.Now()
					for ready == 0 && atomic.LoadInt32(&stop) == 0 {
						cond.Wait()
					}
					atomic.AddInt64(&waitNs, int64(time.Since(t)))
					if ready > 0 {
						ready--
					}
					mu.Unlock()
				}
				atomic.AddInt64(&ops, 1)
			}
		}(i)
	}
	// feeders for chan / cond: one item per hold period (slow)
	if *mode == "chan" || *mode == "cond" {
		go func() {
			for atomic.LoadInt32(&stop) == 0 {
				time.Sleep(*hold)
				if *mode == "chan" {
					select {
					case ch <- 1:
					case <-time.After(100 * time.Millisecond):
					}
				} else {
					mu.Lock()
					ready++
					cond.Signal()
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(*warm)
	b0, m0, bn0, mn0 := profTotals()
	w0, o0 := atomic.LoadInt64(&waitNs), atomic.LoadInt64(&ops)
	t0 := time.Now()
	markWindow(1)
	time.Sleep(*dur)
	markWindow(2)
	el := time.Since(t0)
	w1, o1 := atomic.LoadInt64(&waitNs), atomic.LoadInt64(&ops)
	b1, m1, bn1, mn1 := profTotals()
	out := map[string]interface{}{
		"mode": *mode, "n": *n, "hold_ns": hold.Nanoseconds(), "window_ns": el.Nanoseconds(),
		"own_wait_ns": w1 - w0, "ops": o1 - o0,
		"ops_per_s":      float64(o1-o0) / el.Seconds(),
		"block_prof_ns":  int64(b1 - b0), "block_prof_events": bn1 - bn0,
		"mutex_prof_ns":  int64(m1 - m0), "mutex_prof_events": mn1 - mn0,
	}
	json.NewEncoder(os.Stdout).Encode(out)
	atomic.StoreInt32(&stop, 1)
	os.Exit(0)
}
