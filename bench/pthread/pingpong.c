/* SPDX-License-Identifier: MIT */
/* pingpong, pthreads: two kernel threads bounce a counter through two
 * one-slot rendezvous (mutex + condvar; the sender waits until the receiver
 * has taken the value, like an unbuffered channel). ns per round trip.
 * "1 worker": the process pinned to its first CPU; "2 workers": pinned to its
 * first two CPUs (the kernel places the threads).
 * Usage: pthread_pingpong [N [W]]. */
#include "bench_common.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>

struct rv { /* one-slot rendezvous */
    pthread_mutex_t m;
    pthread_cond_t c;
    long val;
    int full;
};

static void rv_send(struct rv *r, long v)
{
    pthread_mutex_lock(&r->m);
    while (r->full)
        pthread_cond_wait(&r->c, &r->m);
    r->val = v;
    r->full = 1;
    pthread_cond_signal(&r->c);
    while (r->full) /* wait until taken: unbuffered */
        pthread_cond_wait(&r->c, &r->m);
    pthread_mutex_unlock(&r->m);
}

static long rv_recv(struct rv *r)
{
    pthread_mutex_lock(&r->m);
    while (!r->full)
        pthread_cond_wait(&r->c, &r->m);
    long v = r->val;
    r->full = 0;
    pthread_cond_signal(&r->c);
    pthread_mutex_unlock(&r->m);
    return v;
}

static struct rv ping = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
static struct rv pong = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
static long n;

static void *ponger(void *arg)
{
    for (long i = 0; i < n; i++)
        rv_send(&pong, rv_recv(&ping) + 1);
    return arg;
}

static double round_ns(long rounds)
{
    pthread_t t;
    n = rounds;
    int rc = pthread_create(&t, NULL, ponger, NULL);
    if (rc)
        bench_die("pthread_create", rc);
    int64_t t0 = bench_now_ns();
    for (long i = 0; i < n; i++) {
        rv_send(&ping, i);
        long back = rv_recv(&pong);
        if (back != i + 1) {
            fprintf(stderr, "pingpong: got %ld, want %ld\n", back, i + 1);
            exit(2);
        }
    }
    int64_t dt = bench_now_ns() - t0;
    pthread_join(t, NULL);
    return (double)dt / (double)rounds;
}

static void pin(int ncpu)
{
    cpu_set_t have, set;
    if (sched_getaffinity(0, sizeof have, &have) != 0)
        bench_die("sched_getaffinity", errno);
    CPU_ZERO(&set);
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < ncpu; c++)
        if (CPU_ISSET(c, &have)) {
            CPU_SET(c, &set);
            k++;
        }
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        bench_die("sched_setaffinity", errno);
}

int main(int argc, char **argv)
{
    long rounds = bench_arg(argc, argv, 200000);
    int only = argc > 2 ? atoi(argv[2]) : 0;
    if (only == 0 || only == 1) {
        pin(1);
        round_ns(rounds < 1000 ? rounds : 1000);
        bench_print("pingpong", "pthread", "ns_per_roundtrip_w1", round_ns(rounds), "ns");
        bench_print("pingpong", "pthread", "roundtrips_w1", (double)rounds, "count");
    }
    if (only == 0 || only == 2) {
        pin(2);
        round_ns(rounds < 1000 ? rounds : 1000);
        bench_print("pingpong", "pthread", "ns_per_roundtrip_w2", round_ns(rounds), "ns");
        bench_print("pingpong", "pthread", "roundtrips_w2", (double)rounds, "count");
    }
    return 0;
}
