/* SPDX-License-Identifier: MIT */
/*
 * Timers (timer.c): a min-heap per worker, fired by its owner at ticks and
 * in the idle loop. Used by every timed wait (sync/wait.c) and by fern_sleep.
 */
#ifndef FERN_SCHED_TIMER_H
#define FERN_SCHED_TIMER_H

#include "base/base.h"

struct worker;

struct timer {
    int64_t deadline;
    int32_t index;           /* in the heap, -1 when not queued */
    struct worker *owner;    /* heap it sits in */
    void (*fire)(struct timer *);
};
struct timer_heap {
    uint32_t lock;
    uint32_t n, cap;
    struct timer **v;
    int64_t due;    /* the earliest deadline, 0 if none: stored under the
                     * lock, read relaxed by other workers (timers_help) */
};
void timer_add(struct worker *w, struct timer *t);
void timer_cancel(struct timer *t);
/* Fire expired timers; returns how many fired. */
int timers_run(struct worker *w, int64_t now);
/* Earliest deadline, FERN_FOREVER if none. */
int64_t timers_next(struct worker *w);
void timers_free(struct worker *w);
/* Set while a kernel thread that is not a worker (the monitor) fires
 * timers: the sleepers go to the front of their cluster's inbox
 * (inbox.c: inbox_push_wake). */
extern __thread bool fern_tls_firing_ __attribute__((tls_model("initial-exec"), visibility("hidden")));
/* Fire the due timers of another worker of w's cluster, `now` the caller's
 * clock reading or 0 (timer.c). */
void timers_help(struct worker *w, int64_t now);
/* pick_next's every-61-ticks look at w's timers and another worker's. */
void timers_tick(struct worker *w);


/* Move every timer of `from` into `to`'s heap. */
void timers_move(struct worker *from, struct worker *to);

#endif
