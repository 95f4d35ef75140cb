/* SPDX-License-Identifier: MIT */
/* migrate, pthreads (emulation: kernel threads cannot change pools): two
 * pools of k worker threads, each pool with a FIFO queue (mutex + condvar).
 * A "thread" is a work item; a "migration" is a worker of one pool taking the
 * item and pushing it onto the other pool's queue. T items start in pool A and
 * each hops A->B->A 10 times (20 migrations). Reported for k = 1 and k = 2 as
 * migrations per second. */
#include "bench_common.h"

#include <pthread.h>

#define HOPS 20

struct item {
    struct item *next;
    int hops;
};

struct pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct item *head, *tail;
    struct pool *other;
};

static long n_items;
static long done_items;
static int stop;
static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;

static void push(struct pool *p, struct item *it)
{
    it->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->next = it;
    else
        p->head = it;
    p->tail = it;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *worker(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->head && !__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
            pthread_cond_wait(&p->cv, &p->mu);
        struct item *it = p->head;
        if (!it) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        p->head = it->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        if (it->hops++ < HOPS) {
            push(p->other, it);
        } else {
            pthread_mutex_lock(&done_mu);
            if (++done_items == n_items)
                pthread_cond_signal(&done_cv);
            pthread_mutex_unlock(&done_mu);
        }
    }
}

static double run(unsigned k)
{
    struct pool a = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, NULL};
    struct pool b = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, NULL};
    a.other = &b;
    b.other = &a;
    struct item *items = calloc((size_t)n_items, sizeof *items);
    pthread_t th[8];
    done_items = 0;
    stop = 0;
    int64_t t0 = bench_now_ns();
    for (unsigned i = 0; i < k; i++) {
        pthread_create(&th[2 * i], NULL, worker, &a);
        pthread_create(&th[2 * i + 1], NULL, worker, &b);
    }
    /* The first hop is the move into pool B: items are queued on A. */
    for (long i = 0; i < n_items; i++)
        push(&a, &items[i]);
    pthread_mutex_lock(&done_mu);
    while (done_items < n_items)
        pthread_cond_wait(&done_cv, &done_mu);
    pthread_mutex_unlock(&done_mu);
    int64_t dt = bench_now_ns() - t0;
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (struct pool *p = &a; p; p = (p == &a ? &b : NULL)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    for (unsigned i = 0; i < 2 * k; i++)
        pthread_join(th[i], NULL);
    free(items);
    return (double)n_items * HOPS / ((double)dt / 1e9);
}

int main(int argc, char **argv)
{
    n_items = bench_arg(argc, argv, 10000);
    bench_print("migrate", "pthread", "migrations_per_s_k1", run(1), "per_s");
    bench_print("migrate", "pthread", "migrations_per_s_k2", run(2), "per_s");
    return 0;
}
