/* SPDX-License-Identifier: MIT */
/*
 * The parker: one blocked party (its waiting mechanism is sync/wait.c).
 * Defined here, below the descriptor, because every green thread carries
 * one of its own, the parker of its cancellable waits (fern_thread.cpark):
 * a canceller reaches a waiting thread through memory that lives as long
 * as the descriptor, never through the waiter's stack (thread/cancel.c).
 */
#ifndef FERN_SCHED_PARKER_H
#define FERN_SCHED_PARKER_H

#include "base/base.h"
#include "sched/timer.h"

/* A parker's states. W_WAITING leaves exactly once per wait: to W_CLAIMED
 * by a waker (which then publishes W_WOKEN), to W_TIMEDOUT by the timer,
 * or to W_CANCELED by a canceller (thread/cancel.c; only a green thread's
 * own parker, fern_thread.cpark, is ever cancelled). */
enum { W_WAITING = 0, W_CLAIMED = 1, W_WOKEN = 2, W_TIMEDOUT = 3, W_CANCELED = 4 };
enum { SOLO_LOCKED = 1, SOLO_CAS = 2 };

/* One blocked party: a green thread (parked) or an OS thread (futex on
 * `state`). Its state leaves W_WAITING exactly once: to W_TIMEDOUT by its
 * timer, to W_CANCELED by a canceller, or to W_CLAIMED by a waker, who then
 * fills in result/index (and the waiter's data) and publishes W_WOKEN. */
struct parker {
    uint32_t state;
    int32_t result;          /* set by the waker: 0 or an errno value */
    int32_t index;           /* which waiter won (select case) */
    uint8_t solo;            /* one waiter, no deadline: SOLO_LOCKED if only a
                              * party holding the queue's lock (or the one
                              * waker of a join or a blocking job) can claim
                              * it, so the claim needs no CAS; SOLO_CAS if a
                              * canceller may claim it too (sync/wait.h);
                              * 0 otherwise (claimed by CAS, on slow paths) */
    fern_thread *thread;     /* NULL: an OS thread blocked on the futex */
    void (*unlock)(void *);  /* run once the thread is parked */
    void *unlock_arg;
    struct timer timer;
};

#endif
