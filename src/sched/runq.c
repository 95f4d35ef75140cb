/* SPDX-License-Identifier: MIT */
/*
 * The ring run queue's slow paths: spilling a full ring to the inbox,
 * making a one-worker ring shared (the monitor), stealing half a ring.
 */
#include "sched/sched.h"
#include "sched/trace.h"
#include "base/probes.h"

/* Move half of a full ring plus t to the inbox, so a burst of spawns does not
 * stay on one worker. */
void runq_spill(struct worker *w, fern_thread *t, uint32_t head)
{
    uint32_t n = RUNQ_SIZE / 2;
    if (!CAS(&w->rq_head, &head, head + n)) {
        /* A thief took some meanwhile: the ring has room now. */
        uint32_t tail = w->rq_tail;
        STORE_RELAXED(&w->rq[tail % RUNQ_SIZE], t);
        STORE(&w->rq_tail, tail + 1);
        return;
    }
    /* The n slots behind the old head are ours now: thieves read only
     * between head and tail, and the owner reuses a slot only through its
     * own tail, which is still n slots short of them. */
    struct fern_cluster *c = w->cluster;
    spin_lock(&c->inbox.lock);
    for (uint32_t i = 0; i < n; i++)
        inbox_add(&c->inbox, LOAD_RELAXED(&w->rq[(head + i) % RUNQ_SIZE]));
    inbox_add(&c->inbox, t);
    inbox_unlock_added(c);
}


/* Monitor only (rt.boot_lock held, no spin lock): from now on w's owner
 * takes from its ring with a CAS. */
void ring_share(struct worker *w)
{
    if (LOAD_RELAXED(&w->ring_shared))
        return;
    STORE_RELAXED(&w->ring_shared, 1);
    membarrier_all();
    unsigned spins = 0;
    while (LOAD(&w->ring_busy))
        spin_backoff(&spins);
}


/* Steal half of victim's ring, at most max threads, into w's (empty) ring;
 * returns one to run and stores how many were taken in *got. */
fern_thread *runq_steal(struct worker *w, struct worker *v, uint32_t max, uint32_t *got)
{
    for (;;) {
        uint32_t head = LOAD(&v->rq_head);
        uint32_t tail = LOAD(&v->rq_tail);
        uint32_t n = tail - head;
        if (n == 0 || n > RUNQ_SIZE)
            return NULL; /* empty, or a torn read: retry later */
        n -= n / 2;
        if (n > max)
            n = max;
        uint32_t mytail = w->rq_tail;
        for (uint32_t i = 0; i < n; i++)
            STORE_RELAXED(&w->rq[(mytail + i) % RUNQ_SIZE],
                          LOAD_RELAXED(&v->rq[(head + i) % RUNQ_SIZE]));
        if (!CAS(&v->rq_head, &head, head + n))
            continue;
        *got = n;
        n--;
        fern_thread *t = LOAD_RELAXED(&w->rq[(mytail + n) % RUNQ_SIZE]);
        if (n)
            STORE(&w->rq_tail, mytail + n);
        STORE_RELAXED(&w->n_steals, w->n_steals + 1);
        PROBE3(steal, t->id, w->index, v->index);
        TRACE(trace_event(w, TR_STEAL, *got, trace_track(v), t->id));
        return t;
    }
}
