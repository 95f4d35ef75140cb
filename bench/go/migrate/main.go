// SPDX-License-Identifier: MIT
// migrate, Go (emulation: Go has no clusters): two pools of k worker
// goroutines, each pool fed by a buffered channel. A "thread" is a work item;
// a "migration" is a worker of one pool sending the item to the other pool's
// channel. T items start on pool A and each hops A->B->A 10 times (20
// migrations). GOMAXPROCS = default. k = 1 and k = 2.
package main

import (
	"sync"
	"time"

	"fernbench/internal/util"
)

const hops = 20

type item struct{ hops int }

func run(n, k int) float64 {
	a := make(chan *item, n)
	b := make(chan *item, n)
	var done, workers sync.WaitGroup
	done.Add(n)
	worker := func(in, out chan *item) {
		defer workers.Done()
		for it := range in {
			if it.hops < hops {
				it.hops++
				out <- it
			} else {
				done.Done()
			}
		}
	}
	items := make([]item, n)
	t0 := time.Now()
	workers.Add(2 * k)
	for i := 0; i < k; i++ {
		go worker(a, b)
		go worker(b, a)
	}
	for i := range items {
		a <- &items[i]
	}
	done.Wait()
	dt := time.Since(t0)
	close(a)
	close(b)
	workers.Wait()
	return float64(n*hops) / dt.Seconds()
}

func main() {
	n := util.Arg(10000)
	util.Print("migrate", "migrations_per_s_k1", run(n, 1), "per_s")
	util.Print("migrate", "migrations_per_s_k2", run(n, 2), "per_s")
}
