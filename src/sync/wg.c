/* SPDX-License-Identifier: MIT */
/*
 * fern_wg, a wait group for green and plain threads.
 *
 * Memory ordering: count_ changes under lock_.
 */
#include "sync/sync.h"

int fern_wg_init(fern_wg *wg)
{
    if (!wg)
        return EINVAL;
    memset(wg, 0, sizeof *wg);
    return 0;
}

int fern_wg_destroy(fern_wg *wg)
{
    if (!wg)
        return EINVAL;
    return queue_destroy(&wg->lock_, &wg->waiters_, &wg->count_);
}

int fern_wg_add(fern_wg *wg, int64_t delta)
{
    if (!wg)
        return EINVAL;
    spin_lock(&wg->lock_);
    int64_t n;
    if (__builtin_add_overflow(wg->count_, delta, &n) || n < 0) {
        spin_unlock(&wg->lock_);
        return EINVAL;
    }
    STORE_RELAXED(&wg->count_, n);
    struct waiter *all = n == 0 ? waitq_claim_all(&wg->waiters_) : NULL;
    spin_unlock(&wg->lock_);
    waiters_release(all, 0);
    return 0;
}

int fern_wg_done(fern_wg *wg) { return fern_wg_add(wg, -1); }

int fern_wg_timedwait(fern_wg *wg, int64_t deadline_ns)
{
    if (!wg || deadline_ns < 0)
        return EINVAL;
    spin_lock(&wg->lock_);
    if (wg->count_ == 0) {
        spin_unlock(&wg->lock_);
        return 0;
    }
    if (deadline_ns != FERN_FOREVER && fern_now_ns() >= deadline_ns) {
        spin_unlock(&wg->lock_);
        return ETIMEDOUT;
    }
    int st = queue_wait(&wg->waiters_, &wg->lock_, NULL, "wait group", wg, deadline_ns, true);
    return st == W_WOKEN ? 0 : st == W_CANCELED ? ECANCELED : ETIMEDOUT;
}

int fern_wg_wait(fern_wg *wg) { return fern_wg_timedwait(wg, FERN_FOREVER); }
