// SPDX-License-Identifier: MIT
// switch, Go: switches whose two sides are not the same code, GOMAXPROCS=1.
// Usage: switch N MODE.
//   asym: two goroutines running two different functions alternate with
//         runtime.Gosched(), N each;
//   rr3:  three goroutines, three different functions, round-robin, N each;
//   cold: 10,000 goroutines round-robin, N Gosched calls in all.
// ns per switch (per Gosched call), from the moment every goroutine runs.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"fernbench/internal/util"
)

const coldGoroutines = 10000

var (
	started, total int32
	startNs        atomic.Int64
	sumA, xorB     int64
	cntC           int64
	wg             sync.WaitGroup
	startCh        = make(chan struct{})
	epoch          = time.Now()
)

// gate: the clock starts when every goroutine is running; early arrivals
// wait blocked (a Gosched loop would cost O(goroutines^2) switches).
func gate() {
	if atomic.AddInt32(&started, 1) == total {
		startNs.Store(int64(time.Since(epoch)))
		close(startCh)
	}
	<-startCh
}

//go:noinline
func bodyA(n int) {
	defer wg.Done()
	gate()
	for i := 0; i < n; i++ {
		sumA += int64(i)
		runtime.Gosched()
	}
}

//go:noinline
func bodyB(n int) {
	defer wg.Done()
	gate()
	for i := 0; i < n; i++ {
		runtime.Gosched()
		xorB ^= int64(i)
	}
}

//go:noinline
func bodyC(n int) {
	defer wg.Done()
	gate()
	for i := n; i > 0; i-- {
		if i&1 != 0 {
			cntC++
		}
		runtime.Gosched()
	}
}

func main() {
	runtime.GOMAXPROCS(1)
	n := util.Arg(1000000)
	mode := "asym"
	if len(os.Args) > 2 {
		mode = os.Args[2]
	}
	bodies := []func(int){bodyA, bodyB, bodyC}
	per := n
	switch mode {
	case "asym":
		total = 2
	case "rr3":
		total = 3
	case "cold":
		total = coldGoroutines
		per = n / coldGoroutines
		if per < 1 {
			per = 1
		}
	default:
		fmt.Fprintf(os.Stderr, "usage: switch N asym|rr3|cold\n")
		os.Exit(2)
	}
	wg.Add(int(total))
	for i := 0; i < int(total); i++ {
		b := bodyA
		if total <= 3 {
			b = bodies[i]
		}
		go b(per)
	}
	wg.Wait()
	dt := float64(int64(time.Since(epoch)) - startNs.Load())
	util.Print("switch", "ns_per_switch_"+mode, dt/(float64(total)*float64(per)), "ns")
}
