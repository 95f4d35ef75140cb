/* SPDX-License-Identifier: MIT */
/* million, fern: N detached green threads (default stack size) each wait on
 * one fern_cond with one fern_mutex; the main green thread waits until all
 * are parked, broadcasts, and waits until all have run. Default workers.
 *   spawn_park_s:     first spawn until the last thread is parked
 *   bytes_per_thread: growth of VmRSS + VmPTE over that span / N
 *   wake_all_s:       broadcast until the last thread has run
 * With a second argument S (seconds), the main thread first sleeps S
 * seconds with all of them parked, then reports (for stack hibernation,
 * docs/stacks.md: run with FERN_HIBERNATE=1):
 *   bytes_per_thread_parked: VmRSS + VmPTE growth from before the first
 *                     spawn to S seconds after the last park, / N
 *   hibernated:       threads whose stack was hibernated at that moment
 *   heap_bytes_per_hibernated: their heap blocks (header + saved bytes), each
 *   wake_all_s then counts from after the sleep.
 * The bodies check their stacks survived: each writes a pattern into a
 * local buffer before it parks and compares it after. */
#include "bench_common.h"

#include <fern/fern.h>

static fern_mutex mu = FERN_MUTEX_INIT;
static fern_cond cv = FERN_COND_INIT;      /* the one they park on */
static fern_cond main_cv = FERN_COND_INIT;
static long n, parked, finished, damaged;
static int go;
static double park_s;

static void *body(void *arg)
{
    volatile uint32_t mark[8];
    uint32_t seed = (uint32_t)(uintptr_t)&mark;
    for (int i = 0; i < 8; i++)
        mark[i] = seed * 2654435761u + (uint32_t)i;
    fern_mutex_lock(&mu);
    if (++parked == n)
        fern_cond_signal(&main_cv);
    while (!go)
        fern_cond_wait(&cv, &mu);
    for (int i = 0; i < 8; i++)
        damaged += mark[i] != seed * 2654435761u + (uint32_t)i;
    if (++finished == n)
        fern_cond_signal(&main_cv);
    fern_mutex_unlock(&mu);
    return arg;
}

static void *main_green(void *arg)
{
    fern_attr attr = {.stack_size = 0, .name = NULL, .cluster = NULL, .detached = true};
    int rc;
    long m0 = bench_mem_bytes();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++)
        if ((rc = fern_spawn(NULL, &attr, body, NULL))) {
            fprintf(stderr, "fern_spawn failed at thread %ld\n", i);
            bench_die("fern_spawn", rc);
        }
    fern_mutex_lock(&mu);
    while (parked < n)
        fern_cond_wait(&main_cv, &mu);
    fern_mutex_unlock(&mu);
    int64_t t1 = bench_now_ns();
    long m1 = bench_mem_bytes();
    struct fern_stats st;
    fern_stats(&st);
    long m2 = m1;
    if (park_s > 0) {
        fern_sleep_ns((int64_t)(park_s * 1e9));
        m2 = bench_mem_bytes();
        fern_stats(&st);
    }
    int64_t tw = bench_now_ns();
    fern_mutex_lock(&mu);
    go = 1;
    fern_cond_broadcast(&cv);
    while (finished < n)
        fern_cond_wait(&main_cv, &mu);
    fern_mutex_unlock(&mu);
    int64_t t2 = bench_now_ns();
    struct fern_stats st2;
    fern_stats(&st2);
    bench_print("million", "fern", "threads", (double)n, "count");
    bench_print("million", "fern", "spawn_park_s", (double)(t1 - t0) / 1e9, "s");
    bench_print("million", "fern", "bytes_per_thread", (double)(m1 - m0) / (double)n, "bytes");
    bench_print("million", "fern", "wake_all_s", (double)(t2 - tw) / 1e9, "s");
    if (park_s > 0) {
        bench_print("million", "fern", "bytes_per_thread_parked", (double)(m2 - m0) / (double)n,
                    "bytes");
        bench_print("million", "fern", "hibernated", (double)st.hibernated, "count");
        if (st.hibernated)
            bench_print("million", "fern", "heap_bytes_per_hibernated",
                        (double)st.hibernate_bytes / (double)st.hibernated, "bytes");
        /* Over the whole run: a restore that a touch made (a waker reading a
         * waiter record on the stack) is counted in both. */
        bench_print("million", "fern", "hibernations", (double)st2.hibernations, "count");
        bench_print("million", "fern", "restores", (double)st2.hibernate_restores, "count");
        bench_print("million", "fern", "restores_by_touch", (double)st2.hibernate_touches, "count");
    }
    if (damaged) {
        fprintf(stderr, "million: %ld stack words changed while parked\n", damaged);
        exit(1);
    }
    bench_print("million", "fern", "stacks_mapped", (double)st.stacks_mapped, "count");
    bench_print("million", "fern", "guard_mode", (double)st.guard_mode, "enum");
    return arg;
}

int main(int argc, char **argv)
{
    n = bench_arg(argc, argv, 1000000);
    if (argc > 2)
        park_s = strtod(argv[2], NULL);
    int rc = fern_run(main_green, NULL, NULL);
    if (rc)
        bench_die("fern_run", rc);
    fern_shutdown();
    return 0;
}
