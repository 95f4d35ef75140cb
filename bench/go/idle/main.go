// SPDX-License-Identifier: MIT
// Go server of the idle-connections scenario (bench/idle/idle.py,
// bench/README.md "Idle connections"): one goroutine per connection, blocked
// in Read on a 512-byte buffer (which escapes to the heap: Read is an
// interface call), writing back what it reads until the peer closes.
// --port N (0 = any free port), --workers N (GOMAXPROCS; 0 = default).
// Prints "listening on 127.0.0.1:PORT" once ready; SIGTERM ends it.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"
)

func serve(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 512)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func main() {
	port := flag.Int("port", 0, "port (0 = free port)")
	workers := flag.Int("workers", 0, "GOMAXPROCS (0 = default)")
	flag.Parse()
	if *workers > 0 {
		runtime.GOMAXPROCS(*workers)
	}
	ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", ln.Addr().String())
	os.Stdout.Sync()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			fmt.Fprintln(os.Stderr, "accept:", err)
			time.Sleep(10 * time.Millisecond) // out of descriptors: back off
			continue
		}
		c.(*net.TCPConn).SetNoDelay(true)
		go serve(c)
	}
}
