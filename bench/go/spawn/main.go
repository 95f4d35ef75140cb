// SPDX-License-Identifier: MIT
// spawn, Go: `go` + sync.WaitGroup for trivial goroutines in batches of 1000.
package main

import (
	"sync"
	"time"

	"fernbench/internal/util"
)

func main() {
	n := util.Arg(1000000)
	const batch = 1000
	var wg sync.WaitGroup
	t0 := time.Now()
	for done := 0; done < n; {
		b := min(batch, n-done)
		wg.Add(b)
		for i := 0; i < b; i++ {
			go wg.Done()
		}
		wg.Wait()
		done += b
	}
	dt := time.Since(t0)
	util.Print("spawn", "ns_per_thread", float64(dt.Nanoseconds())/float64(n), "ns")
	util.Print("spawn", "threads", float64(n), "count")
}
