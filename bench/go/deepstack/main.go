// SPDX-License-Identifier: MIT
// deepstack, Go (GOMAXPROCS=1): goroutines that use 256 KiB of stack (their
// stack grows 8 KiB -> 512 KiB by copying).
//   fresh:  N goroutines alive at once (each grows, then waits on a Cond),
//           so every one needs a new 512 KiB stack.
//   pooled: N sequential go + wait; the runtime's stack cache hands back a
//           freed 512 KiB stack (the goroutine still starts at 8 KiB and
//           grows by copying).
package main

import (
	"runtime"
	"sync"
	"time"

	"fernbench/internal/util"
)

func main() {
	runtime.GOMAXPROCS(1)
	n := util.Arg(1000)
	var mu sync.Mutex
	cv := sync.NewCond(&mu)
	mainCv := sync.NewCond(&mu)
	touched := 0
	release := false
	var wg sync.WaitGroup
	t0 := time.Now()
	wg.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			defer wg.Done()
			util.Touch256K()
			mu.Lock()
			touched++
			if touched == n {
				mainCv.Signal()
			}
			for !release {
				cv.Wait()
			}
			mu.Unlock()
		}()
	}
	mu.Lock()
	for touched < n {
		mainCv.Wait()
	}
	release = true
	cv.Broadcast()
	mu.Unlock()
	wg.Wait()
	fresh := time.Since(t0)

	done := make(chan struct{})
	t0 = time.Now()
	for i := 0; i < n; i++ {
		go func() {
			util.Touch256K()
			done <- struct{}{}
		}()
		<-done
	}
	pooled := time.Since(t0)
	util.Print("deepstack", "fresh_us", float64(fresh.Nanoseconds())/1e3/float64(n), "us")
	util.Print("deepstack", "pooled_us", float64(pooled.Nanoseconds())/1e3/float64(n), "us")
	util.Print("deepstack", "fresh_over_pooled", fresh.Seconds()/pooled.Seconds(), "x")
}
