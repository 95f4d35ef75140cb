/* SPDX-License-Identifier: MIT */
/*
 * prodcons: producers and consumers share a bounded buffer guarded by one
 * fern_mutex and two fern_conds, written exactly as with pthreads. Waiting
 * on a full or empty buffer parks the green thread, not the kernel thread.
 *
 * Usage: prodcons [items]   (default 1,000,000 items per producer)
 */
#include <fern/fern.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRODUCERS 4
#define CONSUMERS 4
#define SLOTS     16

static struct {
    fern_mutex mu;
    fern_cond not_full, not_empty;
    long buf[SLOTS];
    unsigned head, count;
    int producers_left;
} q = {.mu = FERN_MUTEX_INIT, .not_full = FERN_COND_INIT, .not_empty = FERN_COND_INIT};

static long items;

static void check(const char *what, int rc)
{
    if (rc != 0) {
        fprintf(stderr, "prodcons: %s failed: %s\n", what, strerror(rc));
        exit(1);
    }
}

static void *producer(void *arg)
{
    long base = (long)(intptr_t)arg * items;
    for (long i = 1; i <= items; i++) {
        check("fern_mutex_lock", fern_mutex_lock(&q.mu));
        while (q.count == SLOTS)
            check("fern_cond_wait", fern_cond_wait(&q.not_full, &q.mu));
        q.buf[(q.head + q.count++) % SLOTS] = base + i;
        check("fern_cond_signal", fern_cond_signal(&q.not_empty));
        check("fern_mutex_unlock", fern_mutex_unlock(&q.mu));
    }
    check("fern_mutex_lock", fern_mutex_lock(&q.mu));
    if (--q.producers_left == 0) /* wake consumers so they see the end */
        check("fern_cond_broadcast", fern_cond_broadcast(&q.not_empty));
    check("fern_mutex_unlock", fern_mutex_unlock(&q.mu));
    return NULL;
}

/* Returns the sum of what it took, through its result. */
static void *consumer(void *arg)
{
    long *sum = arg;
    check("fern_mutex_lock", fern_mutex_lock(&q.mu));
    for (;;) {
        while (q.count == 0 && q.producers_left > 0)
            check("fern_cond_wait", fern_cond_wait(&q.not_empty, &q.mu));
        if (q.count == 0)
            break;
        *sum += q.buf[q.head];
        q.head = (q.head + 1) % SLOTS;
        q.count--;
        check("fern_cond_signal", fern_cond_signal(&q.not_full));
    }
    check("fern_mutex_unlock", fern_mutex_unlock(&q.mu));
    return sum;
}

int main(int argc, char **argv)
{
    items = argc > 1 ? atol(argv[1]) : 1000000;
    if (items <= 0) {
        fprintf(stderr, "usage: %s [items per producer]\n", argv[0]);
        return 2;
    }
    q.producers_left = PRODUCERS;
    fern_thread *p[PRODUCERS], *c[CONSUMERS];
    long sums[CONSUMERS] = {0};
    int64_t t0 = fern_now_ns();
    /* Spawning from main, a plain thread, starts the runtime. */
    for (int i = 0; i < CONSUMERS; i++)
        check("fern_spawn", fern_spawn(&c[i], NULL, consumer, &sums[i]));
    for (int i = 0; i < PRODUCERS; i++)
        check("fern_spawn", fern_spawn(&p[i], NULL, producer, (void *)(intptr_t)i));
    for (int i = 0; i < PRODUCERS; i++)
        check("fern_join", fern_join(p[i], NULL));
    long total = 0;
    for (int i = 0; i < CONSUMERS; i++) {
        check("fern_join", fern_join(c[i], NULL));
        printf("consumer %d took items summing to %ld\n", i, sums[i]);
        total += sums[i];
    }
    double ns = (double)(fern_now_ns() - t0);
    long n = (long)PRODUCERS * items;
    long want = n * (n + 1) / 2; /* producers make 1..n between them */
    printf("%ld items through a %d-slot buffer in %.2f s (%.0f ns per item): sum %s\n", n, SLOTS,
           ns / 1e9, ns / (double)n, total == want ? "correct" : "WRONG");
    check("fern_shutdown", fern_shutdown());
    return total == want ? 0 : 1;
}
