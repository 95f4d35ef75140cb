/* SPDX-License-Identifier: MIT */
/* mutex, pthreads: 8 kernel threads (4 x 2 CPUs, not pinned) each lock one
 * pthread_mutex (default type), increment a shared counter and unlock, N
 * times. ops per second = total increments / wall time. */
#include "bench_common.h"

#include <pthread.h>

#define THREADS 8

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long counter;
static long per_thread;

static void *body(void *arg)
{
    for (long i = 0; i < per_thread; i++) {
        pthread_mutex_lock(&mu);
        counter++;
        pthread_mutex_unlock(&mu);
    }
    return arg;
}

static double run(long per)
{
    pthread_t t[THREADS];
    int rc;
    per_thread = per;
    counter = 0;
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < THREADS; i++)
        if ((rc = pthread_create(&t[i], NULL, body, NULL)))
            bench_die("pthread_create", rc);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
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
    run(total / THREADS / 10 + 1);
    bench_print("mutex", "pthread", "ops_per_sec", run(total / THREADS), "ops/s");
    bench_print("mutex", "pthread", "nthreads", THREADS, "count");
    return 0;
}
