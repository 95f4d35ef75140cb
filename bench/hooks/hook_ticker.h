/* SPDX-License-Identifier: MIT */
/* The 1 ms tickers of the fern-hook benchmarks (hook_sleep, hook_redis,
 * hook_pg): a green thread sleeping with fern_sleep_until and a plain
 * pthread sleeping with clock_nanosleep to an absolute time, each keeping
 * its worst lateness until *stop is set. The plain one has no fern on its
 * path: its figure is the machine's own lateness, the floor the green
 * ticker's is judged against. */
#ifndef FERN_BENCH_HOOK_TICKER_H
#define FERN_BENCH_HOOK_TICKER_H

#include <fern/fern.h>
#include <stdatomic.h>
#include <time.h>

struct hook_ticker {
    atomic_int *stop;
    atomic_llong late_max; /* ns; reset by the program when measuring starts */
};

static inline void hook_ticker_woke(struct hook_ticker *t, int64_t due)
{
    long long l = fern_now_ns() - due;
    if (l > atomic_load(&t->late_max))
        atomic_store(&t->late_max, l);
}

static inline void *hook_ticker_green(void *arg)
{
    struct hook_ticker *t = arg;
    while (!atomic_load(t->stop)) {
        int64_t due = fern_now_ns() + 1000000;
        fern_sleep_until(due);
        hook_ticker_woke(t, due);
    }
    return NULL;
}

static inline void *hook_ticker_plain(void *arg)
{
    struct hook_ticker *t = arg;
    while (!atomic_load(t->stop)) {
        int64_t due = fern_now_ns() + 1000000;
        struct timespec ts = {due / 1000000000, due % 1000000000};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        hook_ticker_woke(t, due);
    }
    return NULL;
}

#endif
