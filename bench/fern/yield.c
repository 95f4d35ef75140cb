/* SPDX-License-Identifier: MIT */
/* yield, fern: two green threads on a one-worker runtime alternate with
 * fern_yield(). ns per switch (per yield call); switch_pct = share of yields
 * that actually handed the worker to the other thread. */
#include "bench_common.h"

#include <fern/fern.h>

static long n_iter;
static volatile int last_runner = -1;
static long switched[2];
static int started;
static int64_t t_start, t_end;

static void *body(void *arg)
{
    int me = (int)(intptr_t)arg;
    long sw = 0;
    /* Start gate: the clock starts when both threads are running, so the
     * first one does not count yields made while it was alone. */
    if (__atomic_add_fetch(&started, 1, __ATOMIC_ACQ_REL) == 2)
        __atomic_store_n(&t_start, bench_now_ns(), __ATOMIC_RELEASE);
    while (__atomic_load_n(&t_start, __ATOMIC_ACQUIRE) == 0)
        fern_yield();
    for (long i = 0; i < n_iter; i++) {
        if (last_runner != me) {
            sw++;
            last_runner = me;
        }
        fern_yield();
    }
    switched[me] = sw;
    int64_t now = bench_now_ns(), end = __atomic_load_n(&t_end, __ATOMIC_RELAXED);
    while (now > end && !__atomic_compare_exchange_n(&t_end, &end, now, false, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED))
        ; /* keep the later finish time; main reads it after the joins */
    return NULL;
}

int main(int argc, char **argv)
{
    n_iter = bench_arg(argc, argv, 1000000);
    fern_config cfg = {.workers = 1, .stack_size = 0};
    int rc = fern_init(&cfg);
    if (rc)
        bench_die("fern_init", rc);
    fern_thread *t[2];
    for (int i = 0; i < 2; i++)
        if ((rc = fern_spawn(&t[i], NULL, body, (void *)(intptr_t)i)))
            bench_die("fern_spawn", rc);
    for (int i = 0; i < 2; i++)
        if ((rc = fern_join(t[i], NULL)))
            bench_die("fern_join", rc);
    int64_t dt = t_end - t_start;
    double yields = 2.0 * (double)n_iter;
    bench_print("yield", "fern", "ns_per_switch", (double)dt / yields, "ns");
    bench_print("yield", "fern", "switch_pct", 100.0 * (double)(switched[0] + switched[1]) / yields, "%");
    fern_shutdown();
    return 0;
}
