/* SPDX-License-Identifier: MIT */
/*
 * Compensation and rescue (driven by the monitor, watch/monitor.c): a
 * cluster's worker array has room for SPARES_MAX extra workers beyond the
 * ones asked for. The monitor starts one when a stuck worker's queue
 * cannot be served by the others; a spare that finds nothing to do for
 * SPARE_LINGER_NS hands its timers to worker 0 and ends. Slots are never
 * removed (others iterate over them without locks): an ended spare's slot
 * stays, empty, and a later start reuses it. c->nworkers only grows,
 * published with release after the slot is filled. rescue_worker moves
 * what waits on a worker asleep in the kernel to its cluster's inbox.
 */
#include "sched/sched.h"
#include "sched/trace.h"

/* Start a compensation worker in c: a dormant slot's, or a new one while
 * there is room. Called by the monitor with rt.boot_lock held (so c is not
 * being stopped: cluster_stop sets `stopping` and then takes that lock
 * before it counts the workers it joins). */
int spare_start(struct fern_cluster *c, bool rescue)
{
    if (LOAD(&c->stopping))
        return EINVAL;
    struct worker *w = NULL;
    unsigned n = c->nworkers;
    /* Slots past SPARES_MAX are the rescue spares': an ordinary start
     * does not reuse them. */
    unsigned limit = c->nbase + SPARES_MAX + (rescue ? RESCUE_SPARES_MAX : 0);
    for (unsigned i = c->nbase; i < n && i < limit && !w; i++)
        if (LOAD(&c->workers[i]->spare) == SPARE_DORMANT)
            w = c->workers[i];
    if (!w) {
        if (n >= limit)
            return EAGAIN;
        if (!(w = worker_new(c, n, false)))
            return ENOMEM;
        w->spare = SPARE_DORMANT;
        c->workers[n] = w;
        STORE(&c->nworkers, n + 1); /* the slot is filled before it is counted */
    }
    if (c->nbase == 1)
        ring_share(c->workers[0]); /* the spare steals from it */
    STORE_RELAXED(&w->mon.idle, 0);
    STORE(&w->spare, SPARE_RUNNING);
    if (worker_launch(w)) {
        STORE_RELAXED(&w->mon.idle, 1);
        STORE(&w->spare, SPARE_DORMANT);
        return EAGAIN;
    }
    TRACE(trace_event(NULL, TR_SPARE_START, w->index, (uintptr_t)c, rescue));
    return 0;
}

/* Join the spares of c that ended by themselves (rt.boot_lock held). Once
 * none runs and the last tick found no worker stuck, a one-worker
 * cluster's ring is its owner's alone again: every steal by a spare came
 * before the spare's release of SPARE_EXITED, which the acquire load here
 * saw; the release store of ring_shared passes that on to the owner. */
void spares_reap(struct fern_cluster *c)
{
    bool running = false;
    for (unsigned i = c->nbase; i < c->nworkers; i++) {
        struct worker *w = c->workers[i];
        uint32_t state = LOAD(&w->spare);
        if (state == SPARE_EXITED) {
            pthread_join(w->os, NULL);
            STORE(&w->spare, SPARE_DORMANT);
        }
        running |= state == SPARE_RUNNING;
    }
    struct worker *w0 = c->workers[0];
    if (w0->alone && !running && !LOAD_RELAXED(&c->stuck) && LOAD_RELAXED(&w0->ring_shared) &&
        membarrier_ready())
        STORE(&w0->ring_shared, 0);
}

bool worker_has_queued(struct worker *v)
{
    return !runq_empty(v) || LOAD_RELAXED(&v->next) || tqueue_len(&v->pinned) ||
           tqueue_len(&v->soon);
}

unsigned rescue_worker(struct worker *v, bool pinned_too)
{
    fern_thread *batch[RUNQ_SIZE + 1];
    unsigned n = 0;
    ring_share(v);
    for (;;) {
        uint32_t head = LOAD(&v->rq_head);
        uint32_t tail = LOAD(&v->rq_tail);
        uint32_t k = tail - head;
        if (k == 0 || k > RUNQ_SIZE)
            break;
        for (uint32_t i = 0; i < k; i++)
            batch[i] = LOAD_RELAXED(&v->rq[(head + i) % RUNQ_SIZE]);
        if (CAS(&v->rq_head, &head, head + k)) {
            n = k;
            break;
        }
    }
    /* A one-worker cluster's hand-off slot is its owner's alone (plain
     * stores): it stays. */
    if (!v->alone) {
        fern_thread *t = next_steal(v);
        if (t)
            batch[n++] = t;
    }
    fern_thread *pinned = NULL, *pinned_tail = NULL, *soon = NULL, *soon_tail;
    uint32_t npinned = 0, nsoon = 0;
    if (pinned_too && tqueue_len(&v->pinned))
        pinned = tqueue_take(&v->pinned, &pinned_tail, &npinned);
    if (tqueue_len(&v->soon))
        soon = tqueue_take(&v->soon, &soon_tail, &nsoon);
    if (n + npinned + nsoon == 0)
        return 0;
    /* Its preempted threads go to the front of the inbox: v sleeps in the
     * kernel, quite possibly on a pthread mutex (or another kernel-side
     * lock) that one of them holds, and every thread that ran before it
     * could block there too. Behind a long inbox, the spares (at most
     * SPARES_MAX) could all block on that lock before the holder's turn:
     * a hang seen under qemu-user with 100 threads sharing a std::mutex.
     * The rest, queued but not yet run, go to the back as usual. */
    if (pinned) {
        /* ...and each runs, where it lands, until it leaves the CPU by
         * itself: preempted again for the next woken thread, a holder
         * would hand its new worker to a thread that blocks on its lock,
         * and so on through every spare. (A true spinner so rescued is
         * stopped by compensation instead: watch/monitor.c.) */
        for (fern_thread *x = pinned; x; x = x->link) {
            x->rescued_sw = UINT64_MAX;
            x->rescued = 1;
        }
        inbox_push_front(&v->cluster->inbox, pinned, pinned_tail, npinned);
    }
    if (n + nsoon) {
        /* Those woken by a timer or an event first, as v would have run
         * them first. */
        struct inbox *q = &v->cluster->inbox;
        spin_lock(&q->lock);
        for (fern_thread *x = soon, *y; x; x = y) {
            y = x->link;
            inbox_add(q, x);
        }
        for (unsigned i = 0; i < n; i++)
            inbox_add(q, batch[i]);
        spin_unlock(&q->lock);
    }
    cluster_wake(v->cluster);
    TRACE(trace_event(NULL, TR_RESCUE, trace_track(v), n + npinned + nsoon, 0));
    return n + npinned + nsoon;
}
