/* SPDX-License-Identifier: MIT */
/* yield, pthreads: two kernel threads pinned to one CPU alternate with
 * sched_yield(2). ns per yield call; switch_pct = how many yields actually
 * handed the CPU to the other thread (the kernel may return at once). */
#include "bench_common.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>

static long n_iter;
static volatile int last_runner;
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
        sched_yield();
    for (long i = 0; i < n_iter; i++) {
        if (last_runner != me) {
            sw++;
            last_runner = me;
        }
        sched_yield();
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
    n_iter = bench_arg(argc, argv, 500000);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        bench_die("sched_setaffinity", errno);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        int rc = pthread_create(&t[i], NULL, body, (void *)(intptr_t)i);
        if (rc)
            bench_die("pthread_create", rc);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    int64_t dt = t_end - t_start;
    double yields = 2.0 * (double)n_iter;
    bench_print("yield", "pthread", "ns_per_switch", (double)dt / yields, "ns");
    bench_print("yield", "pthread", "switch_pct", 100.0 * (double)(switched[0] + switched[1]) / yields, "%");
    return 0;
}
