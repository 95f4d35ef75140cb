// SPDX-License-Identifier: MIT
// Go net/http plaintext peer: GET /plaintext -> "Hello, World!".
// --port N (0 = free port), --workers N (GOMAXPROCS; 0 = Go default).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
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
	mux := http.NewServeMux()
	mux.HandleFunc("/plaintext", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Type"] = []string{"text/plain"}
		h["Server"] = []string{"go"}
		w.Write(body)
	})
	srv := &http.Server{Handler: mux}
	fmt.Printf("listening on %s\n", ln.Addr().String())
	os.Stdout.Sync()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; srv.Shutdown(context.Background()); srv.Close() }()
	srv.Serve(ln)
}
