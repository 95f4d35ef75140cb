/* SPDX-License-Identifier: MIT */
/*
 * Timers: deadlines for sleeps and timed waits.
 *
 * Each worker owns a binary min-heap of timers. Only the owner adds timers
 * (a thread parks on its own worker and adds its timer in the post-switch
 * action). The owner fires them (scheduler tick, idle path); so does the
 * monitor when the owner is stuck in one thread (watch/monitor.c), so a sleeper's
 * lateness does not depend on which worker queued its timer. Anyone may
 * cancel, because a woken thread may resume on another worker.
 *
 * Other workers of the cluster fire a worker's due timers too
 * (timers_help): an idle owner that the kernel has not yet run again (a
 * loaded machine) would otherwise hold its sleepers past their deadlines
 * while a busy worker of the same cluster is running. h->due, the earliest
 * deadline, stored under the lock and read relaxed, tells them when to look.
 *
 * A retiring compensation worker hands its heap to another worker
 * (timers_move). A timer's owner changes only with both heaps locked, so
 * timer_cancel re-reads the owner once it holds a heap lock and retries if
 * the timer moved meanwhile.
 *
 * Exactly-once with the wait queue: a timer's fire callback runs under the
 * heap lock and does the waiter's CAS; timer_cancel takes the same lock, so
 * once cancel returns no callback is running or will run for that timer and
 * the waiter (which lives on the parked thread's stack) may go away.
 *
 * Memory ordering: the heap is under its spin lock. h->n is stored relaxed
 * under it and read relaxed outside as a "maybe something due" hint, always
 * re-read under the lock. t->owner is relaxed: timer_cancel runs in the
 * thread that parked, after its wake-up, which happens after timer_add (the
 * waker took the queue lock released after timer_add, and the wake reaches
 * the thread through the run queue's release/acquire).
 */
#include "sched/sched.h"

#include <time.h>

static void heap_swap(struct timer **v, uint32_t a, uint32_t b)
{
    struct timer *t = v[a];
    v[a] = v[b];
    v[b] = t;
    v[a]->index = (int32_t)a;
    v[b]->index = (int32_t)b;
}

static void sift_up(struct timer **v, uint32_t i)
{
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (v[p]->deadline <= v[i]->deadline)
            break;
        heap_swap(v, i, p);
        i = p;
    }
}

static void sift_down(struct timer **v, uint32_t n, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && v[l]->deadline < v[m]->deadline)
            m = l;
        if (r < n && v[r]->deadline < v[m]->deadline)
            m = r;
        if (m == i)
            return;
        heap_swap(v, i, m);
        i = m;
    }
}

/* The heap's earliest deadline for other workers' looks (lock held). */
static void heap_note_due(struct timer_heap *h)
{
    STORE_RELAXED(&h->due, h->n ? h->v[0]->deadline : 0);
}

static void heap_remove(struct timer_heap *h, uint32_t i)
{
    uint32_t last = h->n - 1;
    STORE_RELAXED(&h->n, last);
    h->v[i]->index = -1;
    if (i != last) {
        h->v[i] = h->v[last];
        h->v[i]->index = (int32_t)i;
        sift_down(h->v, h->n, i);
        sift_up(h->v, i);
    }
    heap_note_due(h);
}

void timer_add(struct worker *w, struct timer *t)
{
    struct timer_heap *h = &w->timers;
    spin_lock(&h->lock);
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 64;
        struct timer **v = realloc(h->v, cap * sizeof *v);
        if (!v) {
            /* Without room to queue the timer the deadline cannot be kept;
             * fire it now: the waiter sees a timeout early rather than never. */
            spin_unlock(&h->lock);
            t->index = -1;
            t->owner = NULL;
            t->fire(t);
            return;
        }
        h->v = v;
        h->cap = cap;
    }
    STORE_RELAXED(&t->owner, w);
    t->index = (int32_t)h->n;
    h->v[h->n] = t;
    STORE_RELAXED(&h->n, h->n + 1);
    sift_up(h->v, (uint32_t)t->index);
    heap_note_due(h);
    spin_unlock(&h->lock);
}

void timer_cancel(struct timer *t)
{
    for (;;) {
        struct worker *w = LOAD_RELAXED(&t->owner);
        if (!w)
            return;
        spin_lock(&w->timers.lock);
        if (LOAD_RELAXED(&t->owner) != w) {
            spin_unlock(&w->timers.lock);
            continue;
        }
        if (t->index >= 0)
            heap_remove(&w->timers, (uint32_t)t->index);
        spin_unlock(&w->timers.lock);
        return;
    }
}

void timers_move(struct worker *from, struct worker *to)
{
    struct timer_heap *a = &from->timers, *b = &to->timers;
    if (from == to || LOAD_RELAXED(&a->n) == 0)
        return;
    /* Both locks, in address order (another mover may lock the pair). */
    struct timer_heap *first = a < b ? a : b, *second = a < b ? b : a;
    spin_lock(&first->lock);
    spin_lock(&second->lock);
    while (a->n > 0) {
        if (b->n == b->cap) {
            uint32_t cap = b->cap ? b->cap * 2 : 64;
            struct timer **v = realloc(b->v, cap * sizeof *v);
            if (!v)
                break; /* the rest stays with `from`, which keeps firing them */
            b->v = v;
            b->cap = cap;
        }
        struct timer *t = a->v[a->n - 1];
        heap_remove(a, a->n - 1);
        STORE_RELAXED(&t->owner, to);
        t->index = (int32_t)b->n;
        b->v[b->n] = t;
        STORE_RELAXED(&b->n, b->n + 1);
        sift_up(b->v, (uint32_t)t->index);
    }
    heap_note_due(b);
    spin_unlock(&second->lock);
    spin_unlock(&first->lock);
}

__thread bool fern_tls_firing_ __attribute__((tls_model("initial-exec")));

/* Fired on a worker (its own heap or another's: timers_help), a sleeper
 * goes to that worker's `soon` list (ready.c: wake_from), ahead of the
 * threads queued there; fired by the monitor (a stuck worker's heap), to
 * the front of its cluster's inbox (fern_tls_firing_), ahead of a
 * rescued ring's threads. */
int timers_run(struct worker *w, int64_t now)
{
    struct timer_heap *h = &w->timers;
    int fired = 0;
    if (LOAD_RELAXED(&h->n) == 0)
        return 0;
    struct worker *self = worker_self();
    uint8_t was = self ? self->wake_from : WAKE_DIRECT;
    if (self)
        self->wake_from = WAKE_TIMER;
    else
        fern_tls_firing_ = true;
    spin_lock(&h->lock);
    while (h->n > 0 && h->v[0]->deadline <= now) {
        struct timer *t = h->v[0];
        heap_remove(h, 0);
        t->fire(t);
        fired++;
    }
    spin_unlock(&h->lock);
    if (self)
        self->wake_from = was;
    else
        fern_tls_firing_ = false;
    return fired;
}

int64_t timers_next(struct worker *w)
{
    struct timer_heap *h = &w->timers;
    int64_t d = FERN_FOREVER;
    if (LOAD_RELAXED(&h->n) == 0)
        return d;
    spin_lock(&h->lock);
    if (h->n > 0)
        d = h->v[0]->deadline;
    spin_unlock(&h->lock);
    return d;
}

void timers_free(struct worker *w)
{
    free(w->timers.v);
    w->timers.v = NULL;
    w->timers.n = w->timers.cap = 0;
    w->timers.due = 0;
}

/* Fire the due timers of one other worker of w's cluster, a different one
 * each call: its owner may be idle but waiting for a CPU (a loaded
 * machine), or busy between its own 61-tick looks, while w runs. The
 * sleepers go to w's `soon` list (timers_run). Called every 61 ticks
 * (switch.h: pick_next) and from the idle loop: a relaxed load of the
 * other heap's earliest deadline, compared with `now`, the caller's clock
 * reading (0: not read, as w has no timer; then read here only if the
 * other heap has one). */
__attribute__((noinline)) void timers_help(struct worker *w, int64_t now)
{
    struct fern_cluster *c = w->cluster;
    unsigned nw = LOAD(&c->nworkers);
    if (nw < 2)
        return;
    struct worker *v = c->workers[(w->index + 1 + w->help_next++ % (nw - 1)) % nw];
    int64_t due = LOAD_RELAXED(&v->timers.due);
    if (due && due <= (now ? now : (now = fern_now_ns())))
        timers_run(v, now);
}

/* pick_next's every-61-ticks look at the timers: w's own heap, and one
 * other's (timers_help). At most one clock read, for both heaps, and none
 * while neither has a timer; a heap's lock only when its earliest deadline
 * is due. With `soon` non-empty every pick comes here (soon_rearm). Out of
 * line: inlined, it made the switch paths' code larger (about 4 instructions
 * per ping-pong round trip, callgrind). */
__attribute__((noinline)) void timers_tick(struct worker *w)
{
    int64_t now = 0, due = LOAD_RELAXED(&w->timers.due);
    if (due && due <= (now = fern_now_ns()))
        timers_run(w, now);
    if (!w->alone)
        timers_help(w, now);
}
