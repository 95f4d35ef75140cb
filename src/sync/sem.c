/* SPDX-License-Identifier: MIT */
/*
 * fern_sem, a counting semaphore for green and plain threads.
 *
 * Memory ordering: value_ changes under lock_ (relaxed stores, for the
 * lock-free read of fern_sem_value).
 */
#include "sync/sync.h"

/* A post hands its unit straight to a waiter it wins, so a woken waiter owns
 * a unit and a timed-out one took none (exactly once, whatever the race). */

int fern_sem_init(fern_sem *s, unsigned value)
{
    if (!s || value > FERN_SEM_VALUE_MAX)
        return EINVAL;
    memset(s, 0, sizeof *s);
    s->value_ = value;
    return 0;
}

int fern_sem_destroy(fern_sem *s)
{
    if (!s)
        return EINVAL;
    return queue_destroy(&s->lock_, &s->waiters_, NULL);
}

static int sem_take(fern_sem *s, int64_t deadline, bool try_only)
{
    if (!s || deadline < 0)
        return EINVAL;
    spin_lock(&s->lock_);
    if (s->value_ > 0) {
        STORE_RELAXED(&s->value_, s->value_ - 1);
        spin_unlock(&s->lock_);
        return 0;
    }
    if (try_only || (deadline != FERN_FOREVER && fern_now_ns() >= deadline)) {
        spin_unlock(&s->lock_);
        return try_only ? EAGAIN : ETIMEDOUT;
    }
    int st = queue_wait(&s->waiters_, &s->lock_, NULL, "sem", s, deadline, true);
    return st == W_WOKEN ? 0 : st == W_CANCELED ? ECANCELED : ETIMEDOUT;
}

int fern_sem_wait(fern_sem *s) { return sem_take(s, FERN_FOREVER, false); }
int fern_sem_trywait(fern_sem *s) { return sem_take(s, FERN_FOREVER, true); }
int fern_sem_timedwait(fern_sem *s, int64_t deadline_ns) { return sem_take(s, deadline_ns, false); }

int fern_sem_post(fern_sem *s)
{
    if (!s)
        return EINVAL;
    spin_lock(&s->lock_);
    struct waiter *wt = waitq_claim_one(&s->waiters_);
    if (!wt) {
        if (s->value_ >= FERN_SEM_VALUE_MAX) {
            spin_unlock(&s->lock_);
            return EOVERFLOW;
        }
        STORE_RELAXED(&s->value_, s->value_ + 1);
    }
    spin_unlock(&s->lock_);
    if (wt)
        waiter_release(wt, 0);
    return 0;
}

unsigned fern_sem_value(fern_sem *s) { return s ? LOAD_RELAXED(&s->value_) : 0; }
