/* SPDX-License-Identifier: MIT */
/*
 * What switch.c shares with the idle loop (steal.c, worker.c): picking the
 * next thread, the switch itself and the post-switch action. pick_next and
 * run_after are inline: they are on every park and yield.
 */
#ifndef FERN_SCHED_SWITCH_H
#define FERN_SCHED_SWITCH_H

#include "sched/inbox.h"
#include "sched/runq.h"
#include "sched/tqueue.h"
#include "sched/worker.h"

/* The C++ runtime keeps the stack of caught exceptions (what `throw;` and
 * std::current_exception see) per kernel thread. A green thread that blocks
 * inside a catch handler would otherwise find another green thread's
 * exception there when it resumes, so each switch swaps those two words in
 * and out of the thread descriptors. Weak: C programs have no C++ runtime. */
extern uintptr_t *__cxa_get_globals(void) __attribute__((weak));

/* Switch from w's idle context g0 to t; returns once g0 is resumed. */
void switch_from_g0(struct worker *w, fern_thread *t);

/* Run the action the previous context left in w->after (park after save,
 * invariant 1: that context was saved before the action makes it visible). */
static inline void run_after(struct worker *w)
{
    after_fn fn = w->after;
    if (fn) {
        w->after = NULL;
        fn(w, w->after_prev, w->after_arg);
    }
    /* A yielder queued before its switch (sched_yield_green) is saved now. */
    if (LOAD_RELAXED(&w->ring_busy))
        ring_leave(w);
}

/* Make w's next pick_next look at its `soon` list: that look is part of
 * the every-61-ticks block, so the switch paths pay nothing for it while
 * the list is empty; a push moves the tick to just before the block. */
static inline void soon_rearm(struct worker *w)
{
    w->tick += 60 - w->tick % 61;
}

/* Pick the next thread to run without blocking; NULL if none. Inlined into
 * the switch paths: it is on every park and yield. `owned` as in runq_get.
 * `batch`: the caller holds no lock, so an empty ring may be refilled from
 * the inbox (inbox_take: a copy of up to INBOX_BATCH pointers, perhaps a
 * free and a futex wake). A thread parking on a wait queue still holds the
 * queue's spin lock (released by its after-switch function): it takes one
 * thread from the inbox, as before. `prefetch` as in runq_get: not on
 * the exit path, where the ring is most often a fork-join's new threads,
 * written on this core (12 instructions per spawn+join for nothing). */
static inline __attribute__((always_inline)) fern_thread *pick_next(struct worker *w, bool owned,
                                                                     bool batch, bool prefetch)
{
    fern_thread *t;
    uint32_t tick = ++w->tick;
    if (unlikely(tick % 61 == 0)) {
        /* A stopping cluster (fern_shutdown after its grace period, or
         * fern_cluster_destroy): the worker goes back to its idle context,
         * which ends it, even while threads stay runnable (yielders,
         * migrating threads): those are destroyed. The caller's thread
         * stays where its switch puts it (queued, or parked). Never asked
         * by g0 itself (find_work looks at `stopping` first). */
        if (unlikely(LOAD_RELAXED(&w->cluster->stopping)) && w->cur != &w->g0)
            return &w->g0;
        timers_tick(w);
        if (tqueue_len(&w->soon)) {
            if (w->soon_streak < SOON_STREAK_MAX && (t = tqueue_pop(&w->soon)) != NULL) {
                /* A burst ends when `soon` empties: the next one gets its
                 * own SOON_STREAK_MAX. */
                if (tqueue_len(&w->soon)) {
                    w->soon_streak++;
                    soon_rearm(w);
                } else {
                    w->soon_streak = 0;
                }
                return t;
            }
            /* This pick is the hand-off slot's or the ring's; the next one
             * is `soon`'s again. */
            w->soon_streak = 0;
            soon_rearm(w);
        }
        if ((t = tqueue_pop(&w->pinned)) != NULL)
            return t;
        if ((t = inbox_pop(&w->cluster->inbox)) != NULL)
            return t;
    }
    if ((t = LOAD_RELAXED(&w->next)) != NULL && w->next_streak < NEXT_STREAK_MAX) {
        if (w->alone) /* no thief can take it meanwhile */
            STORE_RELAXED(&w->next, NULL);
        else
            t = __atomic_exchange_n(&w->next, NULL, __ATOMIC_ACQ_REL);
        if (t) {
            w->next_streak++;
            return t;
        }
    }
    w->next_streak = 0;
    if ((t = runq_get(w, owned, prefetch)) != NULL)
        return t;
    if ((t = tqueue_pop(&w->pinned)) != NULL)
        return t;
    if ((t = tqueue_pop(&w->soon)) != NULL) { /* its streak was over */
        if (!tqueue_len(&w->soon))
            w->soon_streak = 0;
        return t;
    }
    if (LOAD_RELAXED(&w->next) && (t = __atomic_exchange_n(&w->next, NULL, __ATOMIC_ACQ_REL)))
        return t;
    return batch ? inbox_take(w) : inbox_pop(&w->cluster->inbox);
}

#endif
