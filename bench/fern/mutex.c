/* SPDX-License-Identifier: MIT */
/* mutex, fern: 4 x workers green threads (8 on a 2-worker runtime) each
 * lock one fern_mutex, increment a shared counter and unlock, N times.
 * ops per second = total increments / wall time (first spawn to last join).
 * The final counter is checked. */
#include "bench_common.h"

#include <fern/fern.h>

#define WORKERS 2
#define THREADS (4 * WORKERS)

static fern_mutex mu = FERN_MUTEX_INIT;
static long counter;
static long per_thread;

static void *body(void *arg)
{
    for (long i = 0; i < per_thread; i++) {
        fern_mutex_lock(&mu);
        counter++;
        fern_mutex_unlock(&mu);
    }
    return arg;
}

static double run(long per)
{
    fern_thread *t[THREADS];
    int rc;
    per_thread = per;
    counter = 0;
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < THREADS; i++)
        if ((rc = fern_spawn(&t[i], NULL, body, NULL)))
            bench_die("fern_spawn", rc);
    for (int i = 0; i < THREADS; i++)
        if ((rc = fern_join(t[i], NULL)))
            bench_die("fern_join", rc);
    int64_t dt = bench_now_ns() - t0;
    if (counter != per * THREADS) {
        fprintf(stderr, "mutex: counter %ld, want %ld\n", counter, per * THREADS);
        exit(2);
    }
    return (double)counter / ((double)dt / 1e9);
}

int main(int argc, char **argv)
{
    long total = bench_arg(argc, argv, 8000000);
    fern_config cfg = {.workers = WORKERS, .stack_size = 0};
    int rc = fern_init(&cfg);
    if (rc)
        bench_die("fern_init", rc);
    run(total / THREADS / 10 + 1); /* warm-up */
    bench_print("mutex", "fern", "ops_per_sec", run(total / THREADS), "ops/s");
    bench_print("mutex", "fern", "nthreads", THREADS, "count");
    fern_shutdown();
    return 0;
}
