/* SPDX-License-Identifier: MIT */
/*
 * The cluster inbox (inbox.c; struct inbox is in worker.h): where work
 * from outside a cluster's workers arrives (plain threads, other clusters,
 * migrations, a full ring's spill, a rescue), and where a worker with an
 * empty ring looks first.
 */
#ifndef FERN_SCHED_INBOX_H
#define FERN_SCHED_INBOX_H

#include "sched/tqueue.h"
#include "sched/worker.h"

bool inbox_room(struct inbox *q, uint32_t m);
void inbox_push_front(struct inbox *q, fern_thread *head, fern_thread *tail, uint32_t m);
fern_thread *inbox_pop(struct inbox *q);
fern_thread *inbox_take(struct worker *w);
void inbox_push_gained(struct fern_cluster *c, fern_thread *t);


/* ---- the inbox's array (struct inbox: worker.h) ---- */
#define INBOX_CAP0 256u
/* An array larger than this (32 KiB) is freed when it empties: a burst of
 * a million wake-ups leaves no 8 MiB array behind. */
#define INBOX_KEEP 4096u


/* Append t to q (lock held): to the array, or behind the overflow list if
 * that is in use or the array cannot grow. */
static inline void inbox_add(struct inbox *q, fern_thread *t)
{
    if (!q->lhead && inbox_room(q, 1)) {
        q->slot[(q->head + q->cnt) & (q->cap - 1)] = t;
        q->cnt++;
    } else {
        tlist_append(&q->lhead, &q->ltail, t);
    }
    STORE_RELAXED(&q->n, q->n + 1);
}

/* Unlock c's inbox after adding threads to it, with the producer's side of
 * the no-lost-wake-up protocol (a full fence, then nidle) inside the lock
 * hold. If a worker is to be woken, c->wakers is raised before the lock is
 * dropped: until then no thread just added can run, finish and let its
 * cluster be destroyed, and cluster_stop waits for wakers to fall to 0.
 * The common case (nobody idle) costs the fence alone. */
static inline void inbox_unlock_added(struct fern_cluster *c)
{
    full_fence();
    bool wake = LOAD_RELAXED(&c->nidle) != 0;
    if (wake)
        ADD_RELAXED(&c->wakers, 1);
    spin_unlock(&c->inbox.lock);
    if (wake) {
        cluster_wake(c);
        __atomic_fetch_sub(&c->wakers, 1, __ATOMIC_RELEASE);
    }
}

/* Make t runnable on cluster c from outside c's workers and wake one of
 * them if any is idle. `gained`: t has just joined c (a migration): c's
 * live count goes up in the same lock hold, before t can run there, on the
 * line the lock has brought in (a separate atomic add cost a migration
 * a contended line and a second full fence). */
static inline void inbox_push(struct fern_cluster *c, fern_thread *t, bool gained)
{
    STORE_RELAXED(&t->run_state, T_RUNNABLE);
    spin_lock(&c->inbox.lock);
    if (gained) /* every change of live_ext is here, under the lock */
        STORE_RELAXED(&c->live_ext, c->live_ext + 1);
    inbox_add(&c->inbox, t);
    inbox_unlock_added(c);
}

#endif
