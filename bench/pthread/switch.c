/* SPDX-License-Identifier: MIT */
/* switch, pthreads: the fern_switch.c scenarios with kernel threads pinned to
 * one CPU and sched_yield(2) (argv: N MODE).
 *   asym: two threads running two different functions, N yields each;
 *   rr3:  three threads, three different functions, N each;
 *   cold: 1,000 threads (not 10,000: each is a kernel task with a 64 KiB
 *         stack), N yields in all.
 * ns per yield call, from the moment every thread runs. */
#include "bench_common.h"

#include <errno.h>

#include <pthread.h>
#include <sched.h>

#define COLD_THREADS 1000

static long n_iter;
static int nthreads;
static int started;
static int64_t t_start, t_end;
/* What each body does between yields differs, so that the compiler cannot
 * fold the bodies into one function (gcc's -fipa-icf would). */
static volatile long sum_a, xor_b, cnt_c;

/* The clock starts when every thread runs; early arrivals wait blocked. */
static pthread_mutex_t gate_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_c = PTHREAD_COND_INITIALIZER;

static void gate(void)
{
    pthread_mutex_lock(&gate_m);
    if (++started == nthreads) {
        t_start = bench_now_ns();
        pthread_cond_broadcast(&gate_c);
    }
    while (t_start == 0)
        pthread_cond_wait(&gate_c, &gate_m);
    pthread_mutex_unlock(&gate_m);
}

static void finish(void)
{
    int64_t now = bench_now_ns(), end = __atomic_load_n(&t_end, __ATOMIC_RELAXED);
    while (now > end && !__atomic_compare_exchange_n(&t_end, &end, now, false, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED))
        ; /* keep the later finish time; main reads it after the joins */
}

__attribute__((noinline)) static void *body_a(void *arg)
{
    long n = (long)(intptr_t)arg;
    gate();
    for (long i = 0; i < n; i++) {
        sum_a += i;
        sched_yield();
    }
    finish();
    return NULL;
}

__attribute__((noinline)) static void *body_b(void *arg)
{
    long n = (long)(intptr_t)arg;
    gate();
    for (long i = 0; i < n; i++) {
        sched_yield();
        xor_b ^= i;
    }
    finish();
    return NULL;
}

__attribute__((noinline)) static void *body_c(void *arg)
{
    long n = (long)(intptr_t)arg;
    gate();
    for (long i = n; i > 0; i--) {
        if (i & 1)
            cnt_c++;
        sched_yield();
    }
    finish();
    return NULL;
}

int main(int argc, char **argv)
{
    n_iter = bench_arg(argc, argv, 1000000);
    const char *mode = argc > 2 ? argv[2] : "asym";
    void *(*bodies[3])(void *) = {body_a, body_b, body_c};
    long per_thread;
    if (!strcmp(mode, "asym") || !strcmp(mode, "rr3")) {
        nthreads = mode[0] == 'a' ? 2 : 3;
        per_thread = n_iter;
    } else if (!strcmp(mode, "cold")) {
        nthreads = COLD_THREADS;
        per_thread = n_iter / COLD_THREADS > 0 ? n_iter / COLD_THREADS : 1;
    } else {
        fprintf(stderr, "usage: %s N asym|rr3|cold\n", argv[0]);
        return 2;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        bench_die("sched_setaffinity", errno);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    pthread_t *t = calloc((size_t)nthreads, sizeof *t);
    if (!t)
        bench_die("calloc", ENOMEM);
    int rc;
    for (int i = 0; i < nthreads; i++)
        if ((rc = pthread_create(&t[i], &attr, bodies[nthreads == COLD_THREADS ? 0 : i],
                                 (void *)(intptr_t)per_thread)))
            bench_die("pthread_create", rc);
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    char metric[32];
    snprintf(metric, sizeof metric, "ns_per_switch_%s", mode);
    bench_print("switch", "pthread", metric, (double)(t_end - t_start) / ((double)nthreads * (double)per_thread),
                "ns");
    free(t);
    return 0;
}
