/* SPDX-License-Identifier: MIT */
/*
 * fern_ticker: a periodic timer that fern_select waits on (Go's
 * time.Ticker); fern_ticker_wait, a select of one tick case, is in
 * io/select.c with fern_select.
 *
 * A ticker is a period and the time of its pending tick, nothing more: no
 * timer sits in a heap and no thread delivers ticks. A tick is there when
 * the clock has reached `next`; taking one (ticker_take_locked, ticker.h)
 * moves `next` to the first period boundary after now, so a slow taker
 * gets one tick and a count of the boundaries that passed, never a backlog
 * (Go's ticker drops ticks the same way; its one-slot channel keeps the
 * tick, ours keeps its time). A select that waits on a ticker queues a
 * waiter on it and sleeps with `next` among its timer's deadlines (io/select.c);
 * waking, it takes the tick under the lock, so each tick goes to exactly one
 * taker and the others sleep again.
 *
 * Reset and stop move `next`: later (stop) or maybe earlier (reset) than
 * what the blocked selects sleep for. So they claim every waiter and wake
 * it with TICKER_CHANGED: it looks again, with the new `next`. The waker
 * unlinks what it claimed, so between that wake-up and its next round a
 * select has no waiter here; it is counted in `inside` for its whole call
 * instead, and destroy follows the destroy rule (sync/wait.c) with that
 * count: EBUSY while a select is blocked on the ticker, a wait while one
 * is inside without a blocked waiter, 0 once none is.
 *
 * Memory ordering: every field is read and written under the ticker's spin
 * lock.
 */
#include "sync/ticker.h"

int fern_ticker_create(fern_ticker **out, int64_t period_ns)
{
    if (!out || period_ns <= 0)
        return EINVAL;
    fern_ticker *t = calloc(1, sizeof *t);
    if (!t)
        return ENOMEM;
    t->period = period_ns;
    t->next = ticker_add(fern_now_ns(), period_ns);
    *out = t;
    return 0;
}

int fern_ticker_destroy(fern_ticker *t)
{
    if (!t)
        return EINVAL;
    /* The destroy rule (sync/wait.c), with one more kind of inhabitant: a
     * select counted in `inside` with no waiter blocked here is between
     * two rounds (a reset woke it) or leaving; wait for it to block again
     * (then EBUSY) or to return. */
    for (unsigned n = 0;; destroy_backoff(&n)) {
        spin_lock(&t->lock);
        int st = waitq_state(&t->waiters);
        uint32_t inside = t->inside;
        spin_unlock(&t->lock);
        if (st == WQ_BLOCKED)
            return EBUSY;
        if (st == WQ_IDLE && inside == 0)
            break;
    }
    free(t);
    return 0;
}

/* Set the period (0: stop) and wake the blocked selects to look again. */
static int ticker_set(fern_ticker *t, int64_t period)
{
    int64_t now = period ? fern_now_ns() : 0;
    spin_lock(&t->lock);
    t->period = period;
    t->next = period ? ticker_add(now, period) : FERN_FOREVER;
    struct waiter *w = waitq_claim_all(&t->waiters);
    spin_unlock(&t->lock);
    waiters_release(w, TICKER_CHANGED);
    return 0;
}

int fern_ticker_reset(fern_ticker *t, int64_t period_ns)
{
    if (!t || period_ns <= 0)
        return EINVAL;
    return ticker_set(t, period_ns);
}

int fern_ticker_stop(fern_ticker *t)
{
    if (!t)
        return EINVAL;
    return ticker_set(t, 0);
}
