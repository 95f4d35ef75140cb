/* SPDX-License-Identifier: MIT */
/* The baseline of the think scenario: n plain calls of bench_touch_stack,
 * spread over `threads` kernel threads running at once, so that it uses as
 * many CPUs as the runtime it is compared with (fern's workers, Go's
 * GOMAXPROCS, the kernel threads of the pthread peer). Comparing threads on
 * two CPUs with plain calls on one would flatter the threads twofold.
 * Returns the wall time in nanoseconds. */
#ifndef FERN_BENCH_THINK_BASELINE_H
#define FERN_BENCH_THINK_BASELINE_H

#include "bench_common.h"

#include <pthread.h>
#include <unistd.h>

#define THINK_TOUCH (900u * 1024u)

static long think_share;

static void *think_calls(void *arg)
{
    for (long i = 0; i < think_share; i++)
        bench_touch_stack(THINK_TOUCH);
    return arg;
}

static int64_t think_baseline(long n, int threads)
{
    pthread_t t[64];
    if (threads < 1)
        threads = 1;
    if (threads > 64)
        threads = 64;
    think_share = (n + threads - 1) / threads;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 2u << 20);
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < threads; i++) {
        int rc = pthread_create(&t[i], &attr, think_calls, NULL);
        if (rc)
            bench_die("pthread_create", rc);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    return bench_now_ns() - t0;
}

/* CPUs this process may run on: what fern's default worker count and
 * GOMAXPROCS follow. */
static int think_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

#endif
