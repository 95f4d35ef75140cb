/* SPDX-License-Identifier: MIT */
/*
 * fern_barrier, for green and plain threads.
 */
#include "sync/sync.h"

int fern_barrier_init(fern_barrier *b, unsigned count)
{
    if (!b || count == 0)
        return EINVAL;
    memset(b, 0, sizeof *b);
    b->count_ = count;
    return 0;
}

int fern_barrier_destroy(fern_barrier *b)
{
    if (!b)
        return EINVAL;
    return queue_destroy(&b->lock_, &b->waiters_, NULL);
}

int fern_barrier_wait(fern_barrier *b)
{
    if (!b)
        return EINVAL;
    spin_lock(&b->lock_);
    if (b->count_ == 0) {
        spin_unlock(&b->lock_);
        return EINVAL;
    }
    if (++b->arrived_ == b->count_) {
        b->arrived_ = 0;
        b->round_++;
        struct waiter *all = waitq_claim_all(&b->waiters_);
        spin_unlock(&b->lock_);
        waiters_release(all, 0);
        return FERN_BARRIER_SERIAL_THREAD;
    }
    queue_wait(&b->waiters_, &b->lock_, NULL, "barrier", b, FERN_FOREVER, false);
    return 0;
}
