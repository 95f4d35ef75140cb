// SPDX-License-Identifier: MIT
// million, Go: N goroutines each wait on one sync.Cond (with a sync.Mutex),
// like fern's fern_cond + fern_mutex; then Broadcast and wait until all ran.
package main

import (
	"sync"
	"time"

	"fernbench/internal/util"
)

func main() {
	n := util.Arg(1000000)
	var mu sync.Mutex
	cv := sync.NewCond(&mu)
	mainCv := sync.NewCond(&mu)
	parked, finished := 0, 0
	wake := false
	m0 := util.MemBytes()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		go func() {
			mu.Lock()
			parked++
			if parked == n {
				mainCv.Signal()
			}
			for !wake {
				cv.Wait()
			}
			finished++
			if finished == n {
				mainCv.Signal()
			}
			mu.Unlock()
		}()
	}
	mu.Lock()
	for parked < n {
		mainCv.Wait()
	}
	mu.Unlock()
	t1 := time.Now()
	m1 := util.MemBytes()
	mu.Lock()
	wake = true
	cv.Broadcast()
	for finished < n {
		mainCv.Wait()
	}
	mu.Unlock()
	t2 := time.Now()
	util.Print("million", "threads", float64(n), "count")
	util.Print("million", "spawn_park_s", t1.Sub(t0).Seconds(), "s")
	util.Print("million", "bytes_per_thread", float64(m1-m0)/float64(n), "bytes")
	util.Print("million", "wake_all_s", t2.Sub(t1).Seconds(), "s")
}
