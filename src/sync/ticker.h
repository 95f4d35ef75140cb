/* SPDX-License-Identifier: MIT */
/*
 * What ticker.c shares with fern_select (io/select.c): the ticker's layout
 * and taking a tick under its lock.
 */
#ifndef FERN_SYNC_TICKER_H
#define FERN_SYNC_TICKER_H

#include "sync/sync.h"

struct fern_ticker {
    uint32_t lock;
    uint32_t inside;    /* selects running with a case on it (ticker_enter) */
    int64_t period;     /* 0: stopped */
    int64_t next;       /* when the pending tick comes (or came); FERN_FOREVER
                         * when stopped or beyond the clock's range */
    fern_waitq waiters; /* selects blocked on it (fern_ticker_wait is one) */
};

/* A select with a case on t, from its first round to its return: counted
 * in t, so that destroy waits for it between rounds (ticker.c). */
static inline void ticker_enter(struct fern_ticker *t)
{
    spin_lock(&t->lock);
    t->inside++;
    spin_unlock(&t->lock);
}
/* Its last access to t. */
static inline void ticker_leave(struct fern_ticker *t)
{
    spin_lock(&t->lock);
    t->inside--;
    spin_unlock(&t->lock);
}

/* A waiter on a ticker released with this result was not given a tick: the
 * ticker was reset or stopped, and the select looks at it again. Never seen
 * by callers. */
#define TICKER_CHANGED EAGAIN

/* `from` + `d`, saturated at FERN_FOREVER (a deadline past the clock's
 * range never comes). */
static inline int64_t ticker_add(int64_t from, int64_t d)
{
    int64_t r;
    return __builtin_add_overflow(from, d, &r) ? FERN_FOREVER : r;
}

/* Under t's lock: take the pending tick if it has come by `now`. Ticks that
 * came while nobody took them are not kept: the next one is the first
 * period boundary after `now` (boundaries stay where the ticker's start put
 * them), and *ticks (if not NULL) says how many boundaries passed since the
 * tick taken last: 1 when the taker keeps up. */
static inline bool ticker_take_locked(struct fern_ticker *t, int64_t now, uint64_t *ticks)
{
    if (!t->period || now < t->next)
        return false;
    uint64_t k = (uint64_t)((now - t->next) / t->period) + 1;
    int64_t adv;
    if (__builtin_mul_overflow((int64_t)k, t->period, &adv))
        t->next = FERN_FOREVER;
    else
        t->next = ticker_add(t->next, adv);
    if (ticks)
        *ticks = k;
    return true;
}

#endif
