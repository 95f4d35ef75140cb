// SPDX-License-Identifier: MIT
// yield, Go: two goroutines alternate with runtime.Gosched(), GOMAXPROCS=1.
package main

import (
	"runtime"
	"sync"
	"time"

	"fernbench/internal/util"
)

func main() {
	runtime.GOMAXPROCS(1)
	n := util.Arg(1000000)
	var wg sync.WaitGroup
	last := -1
	var switched [2]int
	wg.Add(2)
	t0 := time.Now()
	for me := 0; me < 2; me++ {
		go func(me int) {
			defer wg.Done()
			sw := 0
			for i := 0; i < n; i++ {
				if last != me {
					sw++
					last = me
				}
				runtime.Gosched()
			}
			switched[me] = sw
		}(me)
	}
	wg.Wait()
	dt := time.Since(t0)
	yields := 2.0 * float64(n)
	util.Print("yield", "ns_per_switch", float64(dt.Nanoseconds())/yields, "ns")
	util.Print("yield", "switch_pct", 100*float64(switched[0]+switched[1])/yields, "%")
}
