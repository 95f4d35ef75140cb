/* SPDX-License-Identifier: MIT */
/*
 * The worker's ring run queue (runq.c for its slow paths): the owner
 * pushes at the tail with a plain store and release, the owner and
 * thieves take from the head with a CAS; a one-worker cluster's owner
 * takes without one while no one else may (ring_enter). The memory
 * ordering of every field is in sched.h's opening.
 */
#ifndef FERN_SCHED_RUNQ_H
#define FERN_SCHED_RUNQ_H

#include "sched/worker.h"

void runq_spill(struct worker *w, fern_thread *t, uint32_t head);
void ring_share(struct worker *w);
fern_thread *runq_steal(struct worker *w, struct worker *v, uint32_t max, uint32_t *got);


static inline void runq_put(struct worker *w, fern_thread *t)
{
    STORE_RELAXED(&t->run_state, T_RUNNABLE);
    for (;;) {
        uint32_t head = LOAD(&w->rq_head);
        uint32_t tail = w->rq_tail;
        if (likely(tail - head < RUNQ_SIZE)) {
            STORE_RELAXED(&w->rq[tail % RUNQ_SIZE], t);
            STORE(&w->rq_tail, tail + 1);
            return;
        }
        runq_spill(w, t, head);
        return;
    }
}

/* A one-worker cluster's ring has one taker, its owner, except while the
 * monitor rescues it or a spare runs beside it (ring_shared). The owner
 * then needs no locked CAS to take from it, provided it knows that nobody
 * else is taking: an asymmetric Dekker handshake as in sync/bias.c. The owner
 * stores ring_busy = 1, then (a compiler barrier only) loads ring_shared;
 * if clear, it may take with plain stores until it clears ring_busy. The
 * monitor (ring_share) stores ring_shared = 1, runs membarrier_all() and
 * waits for ring_busy == 0: either the owner's load came after that
 * barrier and saw the flag, or its ring_busy = 1 came before it and the
 * monitor waits for the section to end. A section holds no lock and waits
 * for nothing. */
static inline bool ring_enter(struct worker *w)
{
    STORE_RELAXED(&w->ring_busy, 1);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (likely(!LOAD(&w->ring_shared)))
        return true;
    STORE_RELAXED(&w->ring_busy, 0);
    return false;
}

static inline void ring_leave(struct worker *w) { STORE(&w->ring_busy, 0); }


/* A thread queued behind a few others may be cold: it migrated in, was
 * woken from another core, or last ran thousands of switches ago. Its
 * descriptor and the top of its saved stack (the switch frame and the few
 * frames above it, 256 bytes) are what resuming it reads first; on this
 * project's 2-vCPU test VM a line written by the other core takes ~200 ns
 * to arrive. So a pop from the ring prefetches, PREFETCH_STACK threads
 * ahead, the saved stack (its descriptor was prefetched earlier) and,
 * PREFETCH_DESC ahead, the descriptor: the misses overlap with the threads
 * run meanwhile instead of stalling each resume. Slots between head and
 * tail hold threads (a thief may be taking them: a prefetch of a stale
 * address is harmless, and descriptors are never unmapped).
 *
 * Each stack is a page of its own, and a prefetch that misses the TLB
 * holds up retirement until its page walk ends (two-dimensional on a VM):
 * one prefetch per pop took 80% of the samples of a migration's window
 * (bench/fern_migrate, 10,000 threads). So every PREFETCH_BURST pops the
 * first lines of the next PREFETCH_BURST stacks beyond are prefetched back
 * to back, their walks overlapping; the per-pop prefetch then finds its
 * page translated. Migrations, medians of 20-round runs: one worker per
 * cluster 9.8-13.4 -> 14.5-15.2 M/s, two 10.0-11.0 -> 12.0-12.3. */
#define PREFETCH_STACK 3u
#define PREFETCH_BURST 4u
#define PREFETCH_DESC 8u
static inline void runq_prefetch(struct worker *w, uint32_t head, uint32_t tail)
{
    /* PREFETCH_STACK < tail - head <= RUNQ_SIZE (more is a torn read of a
     * thief's view), in one unsigned comparison. */
    uint32_t left = tail - head;
    if (left - (PREFETCH_STACK + 1) >= RUNQ_SIZE - PREFETCH_STACK)
        return;
    fern_thread *a = LOAD_RELAXED(&w->rq[(head + PREFETCH_STACK) % RUNQ_SIZE]);
    char *sp = LOAD_RELAXED(&a->sp);
    /* A thread that never ran has no saved stack; its descriptor was just
     * written by its spawner, most likely on this core: a ring of new
     * threads (a fork-join) is left alone. */
    if (!sp)
        return;
    if (head % PREFETCH_BURST == 0)
        for (uint32_t i = PREFETCH_STACK + 1; i <= PREFETCH_STACK + PREFETCH_BURST && i < left; i++) {
            char *bsp = LOAD_RELAXED(&LOAD_RELAXED(&w->rq[(head + i) % RUNQ_SIZE])->sp);
            if (bsp)
                prefetch_w(bsp);
        }
    prefetch_w(sp);
    prefetch_w(sp + 64);
    prefetch_w(sp + 128);
    prefetch_w(sp + 192);
    if (left > PREFETCH_DESC)
        prefetch_w(LOAD_RELAXED(&w->rq[(head + PREFETCH_DESC) % RUNQ_SIZE]));
}

/* `owned`: the caller is inside a ring section (ring_enter returned true).
 * `prefetch`: look ahead in the ring (runq_prefetch). */
static inline fern_thread *runq_get(struct worker *w, bool owned, bool prefetch)
{
    if (w->alone) {
        /* In the caller's section (a yield), or in one of its own. */
        bool own = !owned;
        if (owned || ring_enter(w)) {
            uint32_t head = LOAD_RELAXED(&w->rq_head);
            fern_thread *t = NULL;
            if (head != w->rq_tail) {
                t = LOAD_RELAXED(&w->rq[head % RUNQ_SIZE]);
                STORE_RELAXED(&w->rq_head, head + 1);
                if (prefetch)
                    runq_prefetch(w, head, w->rq_tail);
            }
            if (own)
                ring_leave(w);
            return t;
        }
    }
    for (;;) {
        uint32_t head = LOAD(&w->rq_head);
        uint32_t tail = w->rq_tail;
        if (head == tail)
            return NULL;
        fern_thread *t = LOAD_RELAXED(&w->rq[head % RUNQ_SIZE]);
        if (CAS(&w->rq_head, &head, head + 1)) {
            if (prefetch)
                runq_prefetch(w, head, tail);
            return t;
        }
    }
}

static inline bool runq_empty(struct worker *w)
{
    return LOAD(&w->rq_head) == LOAD(&w->rq_tail);
}

#endif
