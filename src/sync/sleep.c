/* SPDX-License-Identifier: MIT */
/*
 * fern_sleep_until and fern_sleep_ns: a green thread parks on a waiter with
 * a deadline and nothing else (its timer wakes it, sched/timer.c, or a
 * canceller: a cancellation point); a plain thread sleeps in the kernel.
 */
#include "sync/sync.h"
#include "base/sys.h"

#include <time.h>

int fern_sleep_until(int64_t deadline_ns)
{
    if (deadline_ns < 0)
        return EINVAL;
    fern_thread *self = thread_current();
    if (!self) {
        struct timespec ts = {deadline_ns / 1000000000, deadline_ns % 1000000000};
        while (sys_clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == -EINTR)
            ;
        return 0;
    }
    if (deadline_ns <= fern_now_ns())
        return 0;
    struct waiter wt;
    if (!waiter_init_cancellable(&wt, self))
        return ECANCELED;
    STORE_RELAXED(&self->wait_what, "sleep");
    STORE_RELAXED(&self->wait_obj, NULL);
    int st = waiter_wait(&wt, NULL, deadline_ns);
    STORE_RELAXED(&self->wait_what, NULL);
    return st == W_CANCELED ? ECANCELED : 0;
}

int fern_sleep_ns(int64_t ns)
{
    if (ns <= 0)
        return 0;
    int64_t now = fern_now_ns();
    return fern_sleep_until(ns > FERN_FOREVER - now ? FERN_FOREVER : now + ns);
}
