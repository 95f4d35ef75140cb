// SPDX-License-Identifier: MIT
// prodcons, Go: one producer and one consumer goroutine, GOMAXPROCS=1.
//   condvar: one-slot buffer, sync.Mutex + two sync.Cond (notFull, notEmpty);
//   chan:    make(chan int, 1).
// ns per item; the consumer checks the sum.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"fernbench/internal/util"
)

func runCond(n int) (float64, int) {
	var mu sync.Mutex
	notFull, notEmpty := sync.NewCond(&mu), sync.NewCond(&mu)
	slot, full := 0, false
	var t0, t1 time.Time
	sum := 0
	done := make(chan struct{})
	go func() {
		s := 0
		for i := 1; i <= n; i++ {
			mu.Lock()
			for !full {
				notEmpty.Wait()
			}
			s += slot
			full = false
			notFull.Signal()
			mu.Unlock()
		}
		t1 = time.Now()
		sum = s
		close(done)
	}()
	t0 = time.Now()
	for i := 1; i <= n; i++ {
		mu.Lock()
		for full {
			notFull.Wait()
		}
		slot = i
		full = true
		notEmpty.Signal()
		mu.Unlock()
	}
	<-done
	return float64(t1.Sub(t0).Nanoseconds()) / float64(n), sum
}

func runChan(n int) (float64, int) {
	ch := make(chan int, 1)
	var t1 time.Time
	sum := 0
	done := make(chan struct{})
	go func() {
		s := 0
		for i := 1; i <= n; i++ {
			s += <-ch
		}
		t1 = time.Now()
		sum = s
		close(done)
	}()
	t0 := time.Now()
	for i := 1; i <= n; i++ {
		ch <- i
	}
	<-done
	return float64(t1.Sub(t0).Nanoseconds()) / float64(n), sum
}

func check(n, sum int) {
	if sum != n*(n+1)/2 {
		fmt.Fprintf(os.Stderr, "prodcons: sum %d, want %d\n", sum, n*(n+1)/2)
		os.Exit(2)
	}
}

func main() {
	runtime.GOMAXPROCS(1)
	n := util.Arg(1000000)
	w := n/10 + 1
	_, s := runCond(w)
	check(w, s)
	_, s = runChan(w)
	check(w, s)
	cv, s := runCond(n)
	check(n, s)
	ch, s := runChan(n)
	check(n, s)
	util.Print("prodcons", "ns_per_item_condvar", cv, "ns")
	util.Print("prodcons", "ns_per_item_chan", ch, "ns")
	util.Print("prodcons", "items", float64(n), "count")
}
