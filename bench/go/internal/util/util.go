// SPDX-License-Identifier: MIT
// Package util: helpers shared by the Go peers of fern's benchmarks. Every
// program prints lines `scenario runtime metric value unit` on stdout.
package util

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Arg returns os.Args[1] as a positive integer, or def.
func Arg(def int) int {
	if len(os.Args) > 1 {
		if v, err := strconv.Atoi(os.Args[1]); err == nil && v > 0 {
			return v
		}
	}
	return def
}

// Print writes one result line.
func Print(scenario, metric string, value float64, unit string) {
	fmt.Printf("%s go %s %.6g %s\n", scenario, metric, value, unit)
}

// StatusKiB reads a field (VmRSS, VmPTE, VmHWM...) of /proc/self/status in KiB.
func StatusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, field+":") {
			fs := strings.Fields(line[len(field)+1:])
			if len(fs) > 0 {
				v, _ := strconv.ParseInt(fs[0], 10, 64)
				return v
			}
		}
	}
	return -1
}

// MemBytes is VmRSS + VmPTE in bytes.
func MemBytes() int64 {
	pte := StatusKiB("VmPTE")
	if pte < 0 {
		pte = 0
	}
	return (StatusKiB("VmRSS") + pte) * 1024
}

// Since returns the elapsed time in seconds.
func Since(t time.Time) float64 { return time.Since(t).Seconds() }
