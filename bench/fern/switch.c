/* SPDX-License-Identifier: MIT */
/* switch, fern: context switches whose two sides are not the same code, on a
 * one-worker runtime (argv: N MODE).
 *   asym: two threads running two different functions alternate with
 *         fern_yield(), N yields each;
 *   rr3:  three threads, three different functions, round-robin, N each;
 *   cold: 10,000 threads round-robin, N yields in all, so each switch enters
 *         a stack last touched 9,999 switches ago (out of L1 and L2).
 * ns per switch (per yield call), from the moment every thread runs. */
#include "bench_common.h"

#include <errno.h>

#include <fern/fern.h>

#define COLD_THREADS 10000

static long n_iter;
static int nthreads;
static int started;
static int64_t t_start, t_end;
/* What each body does between yields differs, so that the compiler cannot
 * fold the bodies into one function (gcc's -fipa-icf would). */
static volatile long sum_a, xor_b, cnt_c;

/* The clock starts when every thread runs. Early arrivals wait blocked (a
 * yield loop would cost O(threads^2) yields with 10,000 threads). */
static fern_mutex gate_m = FERN_MUTEX_INIT;
static fern_cond gate_c = FERN_COND_INIT;

static void gate(void)
{
    fern_mutex_lock(&gate_m);
    if (++started == nthreads) {
        t_start = bench_now_ns();
        fern_cond_broadcast(&gate_c);
    }
    while (t_start == 0)
        fern_cond_wait(&gate_c, &gate_m);
    fern_mutex_unlock(&gate_m);
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
        fern_yield();
    }
    finish();
    return NULL;
}

__attribute__((noinline)) static void *body_b(void *arg)
{
    long n = (long)(intptr_t)arg;
    gate();
    for (long i = 0; i < n; i++) {
        fern_yield();
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
        fern_yield();
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
    fern_config cfg = {.workers = 1, .stack_size = 0};
    int rc = fern_init(&cfg);
    if (rc)
        bench_die("fern_init", rc);
    fern_thread **t = calloc((size_t)nthreads, sizeof *t);
    if (!t)
        bench_die("calloc", ENOMEM);
    for (int i = 0; i < nthreads; i++)
        if ((rc = fern_spawn(&t[i], NULL, bodies[nthreads == COLD_THREADS ? 0 : i],
                             (void *)(intptr_t)per_thread)))
            bench_die("fern_spawn", rc);
    for (int i = 0; i < nthreads; i++)
        if ((rc = fern_join(t[i], NULL)))
            bench_die("fern_join", rc);
    char metric[32];
    snprintf(metric, sizeof metric, "ns_per_switch_%s", mode);
    bench_print("switch", "fern", metric, (double)(t_end - t_start) / ((double)nthreads * (double)per_thread),
                "ns");
    free(t);
    fern_shutdown();
    return 0;
}
