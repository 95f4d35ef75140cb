// SPDX-License-Identifier: MIT
// fasthttp plaintext peer: GET /plaintext -> "Hello, World!".
// --port N (0 = free port), --workers N (GOMAXPROCS; 0 = Go default).
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/valyala/fasthttp"
)

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
	body := []byte("Hello, World!")
	srv := &fasthttp.Server{
		Name: "fasthttp",
		Handler: func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/plaintext" {
				ctx.SetContentType("text/plain")
				ctx.SetBody(body)
			} else {
				ctx.SetStatusCode(404)
			}
		},
		Concurrency: 1 << 20,
	}
	fmt.Printf("listening on %s\n", ln.Addr().String())
	os.Stdout.Sync()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; ln.Close() }()
	srv.Serve(ln) // returns once the listener is closed
}
