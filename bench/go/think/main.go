// SPDX-License-Identifier: MIT
// think, Go: N goroutines each touch 900 KiB of stack (the goroutine's stack
// grows to 1 MiB) and return; windows of 1000 (start 1000, wait for them).
// Baseline: N calls of the same function spread over GOMAXPROCS goroutines
// running at once, so the baseline uses the same CPUs as the goroutines.
package main

import (
	"runtime"
	"sync"
	"time"

	"fernbench/internal/util"
)

func main() {
	n := util.Arg(1000000)
	procs := runtime.GOMAXPROCS(0)
	share := (n + procs - 1) / procs
	var bwg sync.WaitGroup
	b0 := time.Now()
	for p := 0; p < procs; p++ {
		bwg.Add(1)
		go func() {
			for i := 0; i < share; i++ {
				util.Touch900K()
			}
			bwg.Done()
		}()
	}
	bwg.Wait()
	base := time.Since(b0)
	const window = 1000
	var wg sync.WaitGroup
	t0 := time.Now()
	for done := 0; done < n; {
		w := min(window, n-done)
		wg.Add(w)
		for i := 0; i < w; i++ {
			go func() {
				util.Touch900K()
				wg.Done()
			}()
		}
		wg.Wait()
		done += w
	}
	dt := time.Since(t0)
	util.Print("think", "threads", float64(n), "count")
	util.Print("think", "seconds", dt.Seconds(), "s")
	util.Print("think", "us_per_thread", float64(dt.Nanoseconds())/1e3/float64(n), "us")
	util.Print("think", "baseline_s", base.Seconds(), "s")
	util.Print("think", "ratio_to_baseline", dt.Seconds()/base.Seconds(), "x")
	util.Print("think", "peak_rss_mib", float64(util.StatusKiB("VmHWM"))/1024, "MiB")
}
