/* SPDX-License-Identifier: MIT */
/*
 * fern_call_once.
 *
 * Memory ordering: state_ 2 is stored with release after fn() and loaded
 * with acquire, so callers that return see what fn() wrote. runner_ is
 * relaxed: only the runner can find its own token there.
 */
#include "sync/sync.h"

int fern_call_once(fern_once *o, void (*fn)(void))
{
    if (!o || !fn)
        return EINVAL;
    if (LOAD(&o->state_) == 2)
        return 0;
    void *self = self_token();
    uint32_t z = 0;
    if (CAS(&o->state_, &z, 1)) {
        STORE_RELAXED(&o->runner_, self);
        fn();
        spin_lock(&o->lock_);
        STORE(&o->state_, 2);
        struct waiter *all = waitq_claim_all(&o->waiters_);
        spin_unlock(&o->lock_);
        waiters_release(all, 0);
        return 0;
    }
    if (LOAD_RELAXED(&o->runner_) == self)
        return EDEADLK;
    spin_lock(&o->lock_);
    if (LOAD(&o->state_) == 2) {
        spin_unlock(&o->lock_);
        return 0;
    }
    queue_wait(&o->waiters_, &o->lock_, NULL, "once", o, FERN_FOREVER, false);
    return 0;
}
