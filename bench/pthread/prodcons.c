/* SPDX-License-Identifier: MIT */
/* prodcons, pthreads: the classic one-slot buffer (pthread_mutex + two
 * pthread_conds, not_full / not_empty), one producer and one consumer
 * kernel thread, the process pinned to one CPU ("1 worker"). ns per item.
 * No channel version (pthreads has no channel; a capacity-1 channel built
 * on a mutex and condvars would be this same code). */
#include "bench_common.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>

static long n;

static struct {
    pthread_mutex_t m;
    pthread_cond_t not_full, not_empty;
    long slot;
    int full;
} buf = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

static int64_t t0, t1;
static long got_sum;

static void *producer(void *arg)
{
    t0 = bench_now_ns();
    for (long i = 1; i <= n; i++) {
        pthread_mutex_lock(&buf.m);
        while (buf.full)
            pthread_cond_wait(&buf.not_full, &buf.m);
        buf.slot = i;
        buf.full = 1;
        pthread_cond_signal(&buf.not_empty);
        pthread_mutex_unlock(&buf.m);
    }
    return arg;
}

static void *consumer(void *arg)
{
    long sum = 0;
    for (long i = 1; i <= n; i++) {
        pthread_mutex_lock(&buf.m);
        while (!buf.full)
            pthread_cond_wait(&buf.not_empty, &buf.m);
        sum += buf.slot;
        buf.full = 0;
        pthread_cond_signal(&buf.not_full);
        pthread_mutex_unlock(&buf.m);
    }
    t1 = bench_now_ns();
    got_sum = sum;
    return arg;
}

static double run(long items)
{
    pthread_t t[2];
    int rc;
    n = items;
    if ((rc = pthread_create(&t[0], NULL, consumer, NULL)) || (rc = pthread_create(&t[1], NULL, producer, NULL)))
        bench_die("pthread_create", rc);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    if (got_sum != n * (n + 1) / 2) {
        fprintf(stderr, "prodcons: sum %ld, want %ld\n", got_sum, n * (n + 1) / 2);
        exit(2);
    }
    return (double)(t1 - t0) / (double)n;
}

int main(int argc, char **argv)
{
    long items = bench_arg(argc, argv, 200000);
    cpu_set_t have, set;
    if (sched_getaffinity(0, sizeof have, &have) != 0)
        bench_die("sched_getaffinity", errno);
    CPU_ZERO(&set);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &have)) {
            CPU_SET(c, &set);
            break;
        }
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        bench_die("sched_setaffinity", errno);
    run(items / 10 + 1);
    bench_print("prodcons", "pthread", "ns_per_item_condvar", run(items), "ns");
    bench_print("prodcons", "pthread", "items", (double)items, "count");
    return 0;
}
