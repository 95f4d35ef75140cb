/* SPDX-License-Identifier: MIT */
/*
 * Making a thread runnable: a wake-up (sched_ready: into the waker's
 * hand-off slot, or behind its queue: sched_ready_tail; one a timer or an
 * event woke: ready_from, the soon list or the ring's tail) and a new
 * thread (sched_spawned). A thread moving to another cluster parks first:
 * fern_migrate is switch.c's.
 */
#include "sched/sched.h"
#include "sched/switch.h"
#include "sched/trace.h"
#include "sched/hibernate.h"
#include "base/probes.h"

static void ready_last(struct worker *w, fern_thread *t);

/* t was woken by a timer that w fired (wake_from WAKE_TIMER) or by a
 * descriptor event that w dispatched (WAKE_POLL): onto w's `soon` list,
 * which w serves before its hand-off slot and ring (pick_next), so it does
 * not wait behind the threads queued there. A poll's whole batch goes
 * there, in its order, not just its first thread: the rest would wait
 * behind the ring as before, and the batch cannot starve the ring, as
 * `soon` gives up every SOON_STREAK_MAX+1-th pick to `next` or the ring.
 * Not the hand-off slot: each event would push the previous thread (and
 * what a primitive's wake put there) to the ring's tail. An idle worker,
 * if one is listed and none spins, is woken to share the work (it steals
 * from `soon` too: steal_some); not needed for correctness, w is awake
 * and runs both. Out of line: the hand-off path does not pay for it. */
static __attribute__((noinline)) void ready_from(struct worker *w, fern_thread *t)
{
    tqueue_push(&w->soon, t);
    soon_rearm(w);
    struct fern_cluster *c = w->cluster;
    if (!w->alone && LOAD_RELAXED(&c->nidle) && !LOAD_RELAXED(&c->nspinning))
        cluster_wake(c);
}

static inline __attribute__((always_inline)) void ready_now(struct worker *w, fern_thread *t)
{
    if (w && w->cluster == t->cluster) {
        if (unlikely(w->wake_from)) {
            ready_from(w, t);
            return;
        }
        if (w->alone) {
            /* No thieves, and this worker is awake: nobody to wake. */
            fern_thread *old = LOAD_RELAXED(&w->next);
            STORE_RELAXED(&w->next, t);
            if (old)
                runq_put(w, old);
            return;
        }
        STORE_RELAXED(&w->n_handoffs, w->n_handoffs + 1);
        fern_thread *old = __atomic_exchange_n(&w->next, t, __ATOMIC_SEQ_CST);
        if (old)
            runq_put(w, old);
        /* An idle worker watches for a hand-off that waits too long behind
         * a busy thread (see find_work); one spinner or one napping watcher
         * (WATCH_NAP_NS) is enough. seq_cst loads: ordered after the
         * exchange's store (see the header). */
        struct fern_cluster *c = w->cluster;
        if (__atomic_load_n(&c->nidle, __ATOMIC_SEQ_CST) &&
            !__atomic_load_n(&c->nspinning, __ATOMIC_SEQ_CST) &&
            !__atomic_load_n(&c->watching, __ATOMIC_SEQ_CST))
            cluster_wake(c);
        return;
    }
    inbox_push_wake(t->cluster, t);
}

union fern_slow fern_slow;

/* hib_gate saw hibernation's state set: out of line, so that sched_ready
 * reaches it with a jump and keeps no frame of its own. */
static __attribute__((noinline)) void ready_hib(fern_thread *t)
{
    if (!hib_wake_slow(t))
        ready_now(worker_self(), t);
}

/* sched_ready while a trace records, threads may hibernate or threads wait
 * for a stack (fern_slow; the last needs nothing here):
 * the event, then the gate (run_state = T_RUNNABLE, then is the monitor
 * hibernating t?), then the same body. Apart, so that both cost sched_ready
 * one test and a tail jump, not a stack frame. */
static __attribute__((noinline)) void ready_slow(struct worker *w, fern_thread *t)
{
    if (LOAD_RELAXED(&trace_on))
        trace_wake(w, t, false);
    if (unlikely(hib_gate_hit(t))) {
        ready_hib(t);
        return;
    }
    ready_now(w, t);
}

void sched_ready(fern_thread *t)
{
    struct worker *w = worker_self();
    PROBE1(wake, t->id);
    SLOW({
        ready_slow(w, t);
        return;
    });
    /* No thread hibernates in this runtime: no gate (base/slow.h). */
    STORE_RELAXED(&t->run_state, T_RUNNABLE);
    ready_now(w, t);
}

/* Queue t behind the threads already queued on w (its ring, waking an idle
 * worker to share the work) if w runs t's cluster, else on the cluster's
 * inbox. */
static void ready_last(struct worker *w, fern_thread *t)
{
    struct fern_cluster *c = t->cluster; /* before t is visible: it may migrate */
    if (w && w->cluster == c) {
        runq_put(w, t);
        if (LOAD_RELAXED(&c->nidle))
            cluster_wake(c);
        return;
    }
    inbox_push_wake(c, t);
}

/* t is runnable again, after the threads already queued here (not in the
 * hand-off slot): for a joiner woken by an exit, which would otherwise run
 * next only to wait for the following thread. */
static __attribute__((noinline)) void ready_tail_slow(fern_thread *t)
{
    if (LOAD_RELAXED(&trace_on))
        trace_wake(worker_self(), t, true);
    if (unlikely(hib_gate_hit(t)) && hib_wake_slow(t))
        return;
    ready_last(worker_self(), t);
}

void sched_ready_tail(fern_thread *t)
{
    PROBE1(wake, t->id);
    SLOW({ /* apart: as ready_slow */
        ready_tail_slow(t);
        return;
    });
    STORE_RELAXED(&t->run_state, T_RUNNABLE);
    ready_last(worker_self(), t);
}


/* A new thread, counted and made runnable: spawned by a worker of its
 * cluster, in that worker's counts and onto its ring (or, from the idle
 * context, the inbox); else onto the cluster's inbox, counted in live_ext
 * by the push. */
static inline __attribute__((always_inline)) void spawned(struct worker *w, fern_thread *t)
{
    struct fern_cluster *c = t->cluster;
    if (unlikely(!w || w->cluster != c)) {
        ADD_RELAXED(&rt.spawned_ext, 1);
        inbox_push_gained(c, t);
        return;
    }
    COUNT(&w->n_spawned, 1);
    COUNT(&w->live_delta, 1);
    ready_last(w->cur != &w->g0 ? w : NULL, t);
}

static __attribute__((noinline)) void spawned_traced(struct worker *w, fern_thread *t)
{
    trace_spawn(w, t);
    spawned(w, t);
}

void sched_spawned(fern_thread *t)
{
    struct worker *w = worker_self();
    TRACE({ /* apart: as ready_slow */
        spawned_traced(w, t);
        return;
    });
    spawned(w, t);
}

void sched_spawned_plain(fern_thread *t) { spawned(worker_self(), t); }
