// SPDX-License-Identifier: MIT
// pingpong, Go: two goroutines bounce a counter over two unbuffered channels
// (ping, pong). ns per round trip. Usage: pingpong [N [W]]: W = GOMAXPROCS
// (1 or 2); without W both are run, 1 then 2.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"fernbench/internal/util"
)

func round(n int) float64 {
	ping, pong := make(chan int), make(chan int)
	done := make(chan struct{})
	go func() {
		for i := 0; i < n; i++ {
			pong <- (<-ping) + 1
		}
		close(done)
	}()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		ping <- i
		if back := <-pong; back != i+1 {
			fmt.Fprintf(os.Stderr, "pingpong: got %d, want %d\n", back, i+1)
			os.Exit(2)
		}
	}
	dt := time.Since(t0)
	<-done
	return float64(dt.Nanoseconds()) / float64(n)
}

func main() {
	n := util.Arg(1000000)
	ws := []int{1, 2}
	if len(os.Args) > 2 {
		w, err := strconv.Atoi(os.Args[2])
		if err != nil || w < 1 {
			fmt.Fprintln(os.Stderr, "pingpong: bad W")
			os.Exit(2)
		}
		ws = []int{w}
	}
	for _, w := range ws {
		runtime.GOMAXPROCS(w)
		round(min(n, 10000))
		util.Print("pingpong", "ns_per_roundtrip_w"+strconv.Itoa(w), round(n), "ns")
		util.Print("pingpong", "roundtrips_w"+strconv.Itoa(w), float64(n), "count")
	}
}
