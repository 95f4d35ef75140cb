/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the C and C++ benchmark programs (fern, pthread, boost).
 *
 * Every program prints lines `scenario runtime metric value unit` on stdout;
 * bench/tools/run.py parses them. Diagnostics go to stderr.
 */
#ifndef FERN_BENCH_COMMON_H
#define FERN_BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <alloca.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_PAGE 4096u

static inline int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Optional size argument: argv[1] as a positive integer, else def. */
static inline long bench_arg(int argc, char **argv, long def)
{
    if (argc > 1) {
        long v = strtol(argv[1], NULL, 10);
        if (v > 0)
            return v;
    }
    return def;
}

/* A field of /proc/self/status in KiB (VmRSS, VmPTE, VmHWM...), -1 if absent. */
static inline long bench_status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t n = strlen(field);
    long v = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            v = strtol(line + n + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

/* Resident memory that a thread costs the process: RSS plus page tables. */
static inline long bench_mem_bytes(void)
{
    long rss = bench_status_kib("VmRSS"), pte = bench_status_kib("VmPTE");
    if (pte < 0)
        pte = 0;
    return (rss + pte) * 1024;
}

static inline void bench_print(const char *scenario, const char *runtime, const char *metric,
                               double value, const char *unit)
{
    printf("%s %s %s %.6g %s\n", scenario, runtime, metric, value, unit);
    fflush(stdout);
}

static inline void bench_die(const char *what, int err)
{
    fprintf(stderr, "bench: %s failed: %s\n", what, strerror(err));
    exit(2);
}

/* Touch `bytes` of the caller's stack, one volatile byte write per 4 KiB
 * page, from the top (nearest the caller) down, as a deep call would. The
 * alloca'd block is the frame; noinline keeps it out of the caller's frame. */
__attribute__((noinline, unused)) static void bench_touch_stack(size_t bytes)
{
    volatile char *buf = (volatile char *)alloca(bytes);
    for (size_t off = bytes; off >= BENCH_PAGE; off -= BENCH_PAGE)
        buf[off - BENCH_PAGE] = (char)off;
    __asm__ volatile("" ::"r"(buf) : "memory");
}

#endif
