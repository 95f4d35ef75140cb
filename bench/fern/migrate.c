/* SPDX-License-Identifier: MIT */
/* migrate, fern: two clusters A and B of k workers each (k = 1, 2; the
 * default cluster has one worker and stays idle). T green threads start on A
 * and each calls fern_migrate(B), fern_migrate(A) 10 times (20 migrations).
 * Timed from the opening of a start gate to the last join (from a plain
 * thread): before it, every thread has started on A (its stack bound and
 * touched) and yields there until the gate opens, as the peers' emulations
 * create their work items before their clocks start. A thread's first run
 * is spawn's cost (bench spawn, million), not a migration's.
 * migrations_counted is fern_stats().migrations over the run, a check. */
#include "bench_common.h"

#include <fern/fern.h>

#include <unistd.h>

#define ROUNDS 10

static fern_cluster *ca, *cb;
static long started;
static int gate;

static void *body(void *arg)
{
    __atomic_fetch_add(&started, 1, __ATOMIC_RELAXED);
    while (!__atomic_load_n(&gate, __ATOMIC_ACQUIRE))
        fern_yield();
    for (int i = 0; i < ROUNDS; i++) {
        int rc = fern_migrate(cb);
        if (rc == 0)
            rc = fern_migrate(ca);
        if (rc)
            bench_die("fern_migrate", rc);
    }
    return arg;
}

static void run(long n, unsigned k)
{
    int rc;
    if ((rc = fern_cluster_create(&ca, k)) || (rc = fern_cluster_create(&cb, k)))
        bench_die("fern_cluster_create", rc);
    fern_thread **t = calloc((size_t)n, sizeof *t);
    fern_attr attr = {.stack_size = 0, .name = NULL, .cluster = ca, .detached = false};
    struct fern_stats s0, s1;
    __atomic_store_n(&started, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&gate, 0, __ATOMIC_RELAXED);
    for (long i = 0; i < n; i++)
        if ((rc = fern_spawn(&t[i], &attr, body, NULL)))
            bench_die("fern_spawn", rc);
    while (__atomic_load_n(&started, __ATOMIC_RELAXED) < n)
        usleep(100);
    fern_stats(&s0);
    int64_t t0 = bench_now_ns();
    __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
    for (long i = 0; i < n; i++)
        if ((rc = fern_join(t[i], NULL)))
            bench_die("fern_join", rc);
    int64_t dt = bench_now_ns() - t0;
    fern_stats(&s1);
    char metric[64];
    snprintf(metric, sizeof metric, "migrations_per_s_k%u", k);
    bench_print("migrate", "fern", metric, (double)n * 2 * ROUNDS / ((double)dt / 1e9), "per_s");
    snprintf(metric, sizeof metric, "migrations_counted_k%u", k);
    bench_print("migrate", "fern", metric, (double)(s1.migrations - s0.migrations), "count");
    if ((rc = fern_cluster_destroy(ca)) || (rc = fern_cluster_destroy(cb)))
        bench_die("fern_cluster_destroy", rc);
    free(t);
}

int main(int argc, char **argv)
{
    long n = bench_arg(argc, argv, 10000);
    fern_config cfg = {.workers = 1, .stack_size = 0};
    int rc = fern_init(&cfg);
    if (rc)
        bench_die("fern_init", rc);
    run(n, 1);
    run(n, 2);
    fern_shutdown();
    return 0;
}
