/* SPDX-License-Identifier: MIT */
/* million, pthreads: N detached kernel threads each wait on one condvar
 * (default N = 10,000: a million kernel threads is out of reach). Metrics as
 * for fern; bytes_per_thread counts VmRSS + VmPTE only, so the kernel's own
 * per-thread cost (16 KiB kernel stack, task_struct) is NOT included. Threads
 * get glibc's default stack (8 MiB reserved, committed on touch). */
#include "bench_common.h"

#include <pthread.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;   /* the one they park on */
static pthread_cond_t main_cv = PTHREAD_COND_INITIALIZER;
static long n, parked, finished;
static int go;

static void *body(void *arg)
{
    pthread_mutex_lock(&mu);
    if (++parked == n)
        pthread_cond_signal(&main_cv);
    while (!go)
        pthread_cond_wait(&cv, &mu);
    if (++finished == n)
        pthread_cond_signal(&main_cv);
    pthread_mutex_unlock(&mu);
    return arg;
}

int main(int argc, char **argv)
{
    n = bench_arg(argc, argv, 10000);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    long m0 = bench_mem_bytes();
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        pthread_t t;
        int rc = pthread_create(&t, &attr, body, NULL);
        if (rc)
            bench_die("pthread_create", rc);
    }
    pthread_mutex_lock(&mu);
    while (parked < n)
        pthread_cond_wait(&main_cv, &mu);
    pthread_mutex_unlock(&mu);
    int64_t t1 = bench_now_ns();
    long m1 = bench_mem_bytes();
    pthread_mutex_lock(&mu);
    go = 1;
    pthread_cond_broadcast(&cv);
    while (finished < n)
        pthread_cond_wait(&main_cv, &mu);
    pthread_mutex_unlock(&mu);
    int64_t t2 = bench_now_ns();
    bench_print("million", "pthread", "threads", (double)n, "count");
    bench_print("million", "pthread", "spawn_park_s", (double)(t1 - t0) / 1e9, "s");
    bench_print("million", "pthread", "bytes_per_thread", (double)(m1 - m0) / (double)n, "bytes");
    bench_print("million", "pthread", "wake_all_s", (double)(t2 - t1) / 1e9, "s");
    return 0;
}
