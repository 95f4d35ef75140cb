// SPDX-License-Identifier: MIT
// mutex, Go: 8 goroutines (4 x GOMAXPROCS=2) each lock one sync.Mutex,
// increment a shared counter and unlock, N/8 times. ops per second.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"fernbench/internal/util"
)

const workers = 2
const goroutines = 4 * workers

func run(per int) float64 {
	var mu sync.Mutex
	counter := 0
	var wg sync.WaitGroup
	t0 := time.Now()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				mu.Lock()
				counter++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	dt := time.Since(t0)
	if counter != per*goroutines {
		fmt.Fprintf(os.Stderr, "mutex: counter %d, want %d\n", counter, per*goroutines)
		os.Exit(2)
	}
	return float64(counter) / dt.Seconds()
}

func main() {
	runtime.GOMAXPROCS(workers)
	per := util.Arg(8000000) / goroutines
	run(per/10 + 1)
	util.Print("mutex", "ops_per_sec", run(per), "ops/s")
	util.Print("mutex", "nthreads", goroutines, "count")
}
