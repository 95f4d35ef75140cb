/* SPDX-License-Identifier: MIT */
/*
 * The cluster inbox: a FIFO of runnable threads under a spin lock, kept as
 * a ring of pointers (see struct inbox, worker.h) with an overflow list
 * for when the array cannot grow. Pushed by anyone outside the cluster's
 * workers (inbox_push, inbox.h); taken by a worker whose ring is empty,
 * a share at a time (inbox_take), and checked every 61 ticks so it cannot
 * starve (switch.c: pick_next).
 */
#include "sched/sched.h"

#include <stdlib.h>

/* Room for m more threads in q's array (lock held), allocating it (there is
 * none before the first push, nor after a large one drained) or doubling it
 * as needed; false if it cannot grow. malloc under the spin lock: producers
 * wait for it once per doubling, and no code that holds malloc's lock takes
 * this one (preemption never stops a thread inside libc: watch/preempt.c). */
bool inbox_room(struct inbox *q, uint32_t m)
{
    if (q->cap - q->cnt >= m)
        return true;
    uint64_t cap = q->cap ? q->cap : INBOX_CAP0;
    while (cap - q->cnt < m)
        cap *= 2;
    fern_thread **slot = cap <= (uint64_t)1 << 31 ? malloc(cap * sizeof *slot) : NULL;
    if (!slot)
        return false;
    for (uint32_t i = 0; i < q->cnt; i++)
        slot[i] = q->slot[(q->head + i) & (q->cap - 1)];
    free(q->slot); /* may be NULL (above) */
    q->slot = slot;
    q->cap = (uint32_t)cap;
    q->head = 0;
    return true;
}

/* Put the list head..tail of m threads at the front of q, in order. */
void inbox_push_front(struct inbox *q, fern_thread *head, fern_thread *tail, uint32_t m)
{
    spin_lock(&q->lock);
    if (inbox_room(q, m)) {
        q->head = (q->head - m) & (q->cap - 1);
        fern_thread *x = head;
        for (uint32_t i = 0; i < m; i++, x = x->link)
            q->slot[(q->head + i) & (q->cap - 1)] = x;
        q->cnt += m;
    } else {
        /* No memory: the array's threads join the list, behind these. */
        fern_thread *x = tail;
        for (uint32_t i = 0; i < q->cnt; i++) {
            fern_thread *y = q->slot[(q->head + i) & (q->cap - 1)];
            x->link = y;
            x = y;
        }
        x->link = q->lhead;
        if (!q->lhead)
            q->ltail = x;
        q->lhead = head;
        q->cnt = 0;
    }
    STORE_RELAXED(&q->n, q->n + m);
    spin_unlock(&q->lock);
}

static fern_thread *inbox_pop_locked(struct inbox *q)
{
    fern_thread *t;
    if (q->cnt) {
        t = q->slot[q->head];
        q->head = (q->head + 1) & (q->cap - 1);
        q->cnt--;
    } else if ((t = q->lhead) != NULL) {
        q->lhead = t->link;
        if (!q->lhead)
            q->ltail = NULL;
    } else {
        return NULL;
    }
    STORE_RELAXED(&q->n, q->n - 1);
    return t;
}

/* Unlock q after taking from it; if that emptied an array larger than
 * INBOX_KEEP, free it (outside the lock): the next push allocates a small
 * one. */
static void inbox_unlock_taken(struct inbox *q)
{
    fern_thread **old = NULL;
    if (!q->cnt && q->cap > INBOX_KEEP) {
        old = q->slot;
        q->slot = NULL;
        q->cap = 0;
        q->head = 0;
    }
    spin_unlock(&q->lock);
    free(old);
}

fern_thread *inbox_pop(struct inbox *q)
{
    if (inbox_len(q) == 0)
        return NULL;
    spin_lock(&q->lock);
    fern_thread *t = inbox_pop_locked(q);
    inbox_unlock_taken(q);
    return t;
}

/* Out of line: inlined into sched_ready, it made every hand-off on a
 * worker save and restore more registers (6 instructions a wake-up).
 * A sleeper whose timer the monitor fired (the owner had not switched for
 * a tick: fern_tls_firing_) goes to the inbox's front, not behind what a
 * rescue moved there: the monitor holds rt.boot_lock, so c stays while
 * cluster_wake runs after the push. */
__attribute__((noinline)) void inbox_push_wake(struct fern_cluster *c, fern_thread *t)
{
    if (unlikely(fern_tls_firing_)) {
        STORE_RELAXED(&t->run_state, T_RUNNABLE);
        inbox_push_front(&c->inbox, t, t, 1);
        cluster_wake(c);
        return;
    }
    inbox_push(c, t, false);
}

/* Most threads taken from the inbox at once (see inbox_take): their
 * pointers are copied under its lock, 16 lines at most. */
#define INBOX_BATCH 128u
/* Descriptors of a batch's first threads prefetched (runq_prefetch looks
 * after the rest): as far as its first pop's stack burst reaches
 * (PREFETCH_STACK + PREFETCH_BURST), with room. */
#define INBOX_PREFETCH 12u

/* The inbox's next thread for w, whose ring is empty: with it, a share of
 * what waits there moves into the ring, so a worker fed through the inbox
 * (threads migrating in, wake-ups from plain threads or other clusters)
 * takes the inbox's lock once per batch rather than once per thread, and
 * the line holding it stays with the producers. A share: the inbox's
 * length over the cluster's workers (all of it for a one-worker cluster),
 * at most INBOX_BATCH. Only the array's threads are batched (the overflow
 * list, used only when memory ran out, gives one at a time). */
__attribute__((noinline)) fern_thread *inbox_take(struct worker *w)
{
    struct fern_cluster *c = w->cluster;
    struct inbox *q = &c->inbox;
    if (inbox_len(q) == 0)
        return NULL;
    uint32_t nw = LOAD_RELAXED(&c->nworkers);
    spin_lock(&q->lock);
    uint32_t n = q->n;
    fern_thread *t = inbox_pop_locked(q);
    uint32_t more = (nw > 1 ? n / nw + 1 : n) - 1;
    if (more > INBOX_BATCH - 1)
        more = INBOX_BATCH - 1;
    if (more > q->cnt)
        more = q->cnt;
    /* The ring was empty when pick_next looked and only its owner adds to
     * it, so they fit. */
    uint32_t tail = w->rq_tail;
    for (uint32_t i = 0; i < more; i++)
        STORE_RELAXED(&w->rq[(tail + i) % RUNQ_SIZE], q->slot[(q->head + i) & (q->cap - 1)]);
    q->head = (q->head + more) & (q->cap - 1);
    q->cnt -= more;
    STORE_RELAXED(&q->n, q->n - more);
    inbox_unlock_taken(q);
    if (!more)
        return t;
    STORE(&w->rq_tail, tail + more);
    for (uint32_t i = 0; i < more && i < INBOX_PREFETCH; i++)
        prefetch_w(LOAD_RELAXED(&w->rq[(tail + i) % RUNQ_SIZE]));
    /* The threads moved from the inbox to the ring, which a worker going
     * to sleep may have looked at before they arrived: the producer's side
     * of the no-lost-wake-up protocol for them, once per batch. */
    if (nw > 1)
        cluster_wake(c);
    return t;
}


/* A thread spawned from outside its cluster: counted in the cluster's
 * live_ext by the push. Out of line: inlined, it made sched_spawned save
 * more registers on every spawn (6 instructions, callgrind). */
__attribute__((noinline)) void inbox_push_gained(struct fern_cluster *c, fern_thread *t)
{
    inbox_push(c, t, true);
}


/* Is the thread at the front of c's inbox one rescue_worker took from a
 * worker asleep in the kernel (monitor thread, which set the flag)? */
bool inbox_front_rescued(struct fern_cluster *c)
{
    struct inbox *q = &c->inbox;
    if (!inbox_len(q))
        return false;
    spin_lock(&q->lock);
    fern_thread *t = q->cnt ? q->slot[q->head] : q->lhead;
    bool r = t && t->rescued;
    spin_unlock(&q->lock);
    return r;
}
