/* SPDX-License-Identifier: MIT */
/* deepstack, pthreads (process pinned to one CPU): threads with 512 KiB
 * stacks that each touch 256 KiB of stack.
 *  fresh:  N threads alive at once (each touches, then waits on a barrier),
 *          so every one maps and faults in a new stack.
 *  pooled: N sequential create + join; glibc's stack cache hands the same
 *          stack back each time (glibc drops its pages with MADV_DONTNEED
 *          at thread exit, so they fault in again).
 * us per thread for each, and fresh/pooled. */
#include "bench_common.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>

#define TOUCH (256u * 1024u)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t main_cv = PTHREAD_COND_INITIALIZER;
static long n, touched;
static int release;

static void *fresh_body(void *arg)
{
    bench_touch_stack(TOUCH);
    pthread_mutex_lock(&mu);
    if (++touched == n)
        pthread_cond_signal(&main_cv);
    while (!release)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return arg;
}

static void *pooled_body(void *arg)
{
    bench_touch_stack(TOUCH);
    return arg;
}

int main(int argc, char **argv)
{
    n = bench_arg(argc, argv, 1000);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        bench_die("sched_setaffinity", errno);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 512 * 1024);
    pthread_t *t = calloc((size_t)n, sizeof *t);

    int64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        int rc = pthread_create(&t[i], &attr, fresh_body, NULL);
        if (rc)
            bench_die("pthread_create", rc);
    }
    pthread_mutex_lock(&mu);
    while (touched < n)
        pthread_cond_wait(&main_cv, &mu);
    release = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (long i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    int64_t fresh = bench_now_ns() - t0;

    t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        pthread_t one;
        int rc = pthread_create(&one, &attr, pooled_body, NULL);
        if (rc)
            bench_die("pthread_create", rc);
        pthread_join(one, NULL);
    }
    int64_t pooled = bench_now_ns() - t0;
    bench_print("deepstack", "pthread", "fresh_us", (double)fresh / 1e3 / (double)n, "us");
    bench_print("deepstack", "pthread", "pooled_us", (double)pooled / 1e3 / (double)n, "us");
    bench_print("deepstack", "pthread", "fresh_over_pooled", (double)fresh / (double)pooled, "x");
    free(t);
    return 0;
}
