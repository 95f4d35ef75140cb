/* SPDX-License-Identifier: MIT */
/* prodcons, fern: one producer and one consumer green thread on a one-worker
 * runtime (fern_init workers=1).
 *  condvar: the classic one-slot buffer, a fern_mutex and two fern_conds
 *           (not_full, not_empty), each side waiting in a while loop;
 *  chan:    a fern channel of capacity 1.
 * ns per item (producer's first put to consumer's last get); the consumer
 * checks the sum of the items.
 * Usage: fern_prodcons [N [cv|chan]]  N items; the second argument runs only
 * that version (for callgrind: the warm-up is N/10 + 1 items either way). */
#include "bench_common.h"

#include <fern/fern.h>

static long n;

static struct {
    fern_mutex m;
    fern_cond not_full, not_empty;
    long slot;
    int full;
} buf = {FERN_MUTEX_INIT, FERN_COND_INIT, FERN_COND_INIT, 0, 0};

static fern_chan *ch;
static int64_t t0, t1;
static long got_sum;

static void *cv_producer(void *arg)
{
    t0 = bench_now_ns();
    for (long i = 1; i <= n; i++) {
        fern_mutex_lock(&buf.m);
        while (buf.full)
            fern_cond_wait(&buf.not_full, &buf.m);
        buf.slot = i;
        buf.full = 1;
        fern_cond_signal(&buf.not_empty);
        fern_mutex_unlock(&buf.m);
    }
    return arg;
}

static void *cv_consumer(void *arg)
{
    long sum = 0;
    for (long i = 1; i <= n; i++) {
        fern_mutex_lock(&buf.m);
        while (!buf.full)
            fern_cond_wait(&buf.not_empty, &buf.m);
        sum += buf.slot;
        buf.full = 0;
        fern_cond_signal(&buf.not_full);
        fern_mutex_unlock(&buf.m);
    }
    t1 = bench_now_ns();
    got_sum = sum;
    return arg;
}

static void *ch_producer(void *arg)
{
    int rc;
    t0 = bench_now_ns();
    for (long i = 1; i <= n; i++)
        if ((rc = fern_chan_send(ch, &i)))
            bench_die("fern_chan_send", rc);
    return arg;
}

static void *ch_consumer(void *arg)
{
    long sum = 0, v;
    int rc;
    for (long i = 1; i <= n; i++) {
        if ((rc = fern_chan_recv(ch, &v)))
            bench_die("fern_chan_recv", rc);
        sum += v;
    }
    t1 = bench_now_ns();
    got_sum = sum;
    return arg;
}

static double run(fern_fn prod, fern_fn cons)
{
    fern_thread *t[2];
    int rc;
    got_sum = 0;
    if ((rc = fern_spawn(&t[0], NULL, cons, NULL)) || (rc = fern_spawn(&t[1], NULL, prod, NULL)))
        bench_die("fern_spawn", rc);
    for (int i = 0; i < 2; i++)
        if ((rc = fern_join(t[i], NULL)))
            bench_die("fern_join", rc);
    if (got_sum != n * (n + 1) / 2) {
        fprintf(stderr, "prodcons: sum %ld, want %ld\n", got_sum, n * (n + 1) / 2);
        exit(2);
    }
    return (double)(t1 - t0) / (double)n;
}

int main(int argc, char **argv)
{
    long full = bench_arg(argc, argv, 1000000);
    const char *only = argc > 2 ? argv[2] : "";
    bool cv = strcmp(only, "chan") != 0, chan = strcmp(only, "cv") != 0;
    fern_config cfg = {.workers = 1, .stack_size = 0};
    int rc = fern_init(&cfg);
    if (rc)
        bench_die("fern_init", rc);
    if ((rc = fern_chan_create(&ch, sizeof(long), 1)))
        bench_die("fern_chan_create", rc);
    n = full / 10 + 1; /* warm-up */
    if (cv)
        run(cv_producer, cv_consumer);
    if (chan)
        run(ch_producer, ch_consumer);
    n = full;
    if (cv)
        bench_print("prodcons", "fern", "ns_per_item_condvar", run(cv_producer, cv_consumer), "ns");
    if (chan)
        bench_print("prodcons", "fern", "ns_per_item_chan", run(ch_producer, ch_consumer), "ns");
    bench_print("prodcons", "fern", "items", (double)n, "count");
    fern_chan_destroy(ch);
    fern_shutdown();
    return 0;
}
