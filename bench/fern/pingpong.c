/* SPDX-License-Identifier: MIT */
/* pingpong, fern: two green threads bounce a counter over two unbuffered
 * fern channels (ping: A -> B, pong: B -> A). ns per round trip
 * (2 sends + 2 receives), first on a one-worker runtime (fern_init
 * workers=1), then on a cluster of 2 workers (the two threads may run on
 * different workers; the scheduler decides).
 * Usage: fern_pingpong [N [W]]  N round trips; W = 1 or 2 runs only that part
 * (bench/tools/run.py's callgrind count uses W = 1: with the fixed warm-up, the
 * difference of two run lengths is exactly the extra round trips). */
#include "bench_common.h"

#include <fern/fern.h>

#define WARMUP 10000L /* round trips before each measured round (fixed) */

struct pp {
    fern_chan *ping, *pong;
    long n;
    int64_t t0, t1;
};

static void *pinger(void *arg)
{
    struct pp *p = arg;
    int rc;
    p->t0 = bench_now_ns();
    for (long i = 0; i < p->n; i++) {
        long v = i, back;
        if ((rc = fern_chan_send(p->ping, &v)))
            bench_die("fern_chan_send", rc);
        if ((rc = fern_chan_recv(p->pong, &back)))
            bench_die("fern_chan_recv", rc);
        if (back != i + 1) {
            fprintf(stderr, "pingpong: got %ld, want %ld\n", back, i + 1);
            exit(2);
        }
    }
    p->t1 = bench_now_ns();
    return NULL;
}

static void *ponger(void *arg)
{
    struct pp *p = arg;
    int rc;
    for (long i = 0; i < p->n; i++) {
        long v;
        if ((rc = fern_chan_recv(p->ping, &v)))
            bench_die("fern_chan_recv", rc);
        v++;
        if ((rc = fern_chan_send(p->pong, &v)))
            bench_die("fern_chan_send", rc);
    }
    return NULL;
}

/* One measured round of n round trips on cluster c (NULL = default). */
static double round_ns(fern_cluster *c, long n)
{
    struct pp p = {.n = n};
    int rc;
    if ((rc = fern_chan_create(&p.ping, sizeof(long), 0)) || (rc = fern_chan_create(&p.pong, sizeof(long), 0)))
        bench_die("fern_chan_create", rc);
    fern_attr a = {.cluster = c};
    fern_thread *t[2];
    if ((rc = fern_spawn(&t[1], &a, ponger, &p)) || (rc = fern_spawn(&t[0], &a, pinger, &p)))
        bench_die("fern_spawn", rc);
    for (int i = 0; i < 2; i++)
        if ((rc = fern_join(t[i], NULL)))
            bench_die("fern_join", rc);
    fern_chan_destroy(p.ping);
    fern_chan_destroy(p.pong);
    return (double)(p.t1 - p.t0) / (double)n;
}

int main(int argc, char **argv)
{
    long n = bench_arg(argc, argv, 1000000);
    int only = argc > 2 ? atoi(argv[2]) : 0;
    fern_config cfg = {.workers = 1, .stack_size = 0};
    int rc = fern_init(&cfg);
    if (rc)
        bench_die("fern_init", rc);
    if (only == 0 || only == 1) {
        round_ns(NULL, WARMUP < n ? WARMUP : n); /* warm-up: stacks, channel paths */
        bench_print("pingpong", "fern", "ns_per_roundtrip_w1", round_ns(NULL, n), "ns");
        bench_print("pingpong", "fern", "roundtrips_w1", (double)n, "count");
    }
    if (only == 0 || only == 2) {
        fern_cluster *c2;
        if ((rc = fern_cluster_create(&c2, 2)))
            bench_die("fern_cluster_create", rc);
        round_ns(c2, WARMUP < n ? WARMUP : n);
        struct fern_stats s0, s1;
        fern_stats(&s0);
        bench_print("pingpong", "fern", "ns_per_roundtrip_w2", round_ns(c2, n), "ns");
        bench_print("pingpong", "fern", "roundtrips_w2", (double)n, "count");
        fern_stats(&s1);
        /* How often the pair was split over the two workers: steals, and
         * times a worker went to sleep idle, during the measured round. */
        bench_print("pingpong", "fern", "steals_w2", (double)(s1.steals - s0.steals), "count");
        bench_print("pingpong", "fern", "worker_sleeps_w2", (double)(s1.worker_sleeps - s0.worker_sleeps), "count");
        if ((rc = fern_cluster_destroy(c2)))
            bench_die("fern_cluster_destroy", rc);
    }
    fern_shutdown();
    return 0;
}
