/* SPDX-License-Identifier: MIT */
/*
 * Cancellation: fern_cancel, fern_cancel_shield, fern_cancelled.
 *
 * A cancel is a request, never a forced unwind: fern_cancel sets the
 * target's sticky flag (creq) and, if the target waits in a cancellable
 * wait, claims that wait the way a timer would and readies the thread,
 * whose call then unlinks itself and fails with ECANCELED. Every
 * cancellable wait after that fails at once. The waiting side (which waits
 * are cancellation points, how a wait starts without missing a request) is
 * sync/wait.h's; this is the canceller's.
 *
 * The canceller reaches the wait through t->cpark, the parker every
 * cancellable wait of t uses, which lives in t's descriptor: claiming it is
 * a CAS on memory that outlives the wait (a waiter on t's stack could be
 * gone). The CAS of W_WAITING to W_CANCELED races with the waiters' wakers
 * and the timer like any claim: one wins (wake exactly once, invariant 2).
 * The winner readies t only once t is saved: t may still be on its way to
 * the switch, holding its queue's lock; its post-switch action stores
 * run_state T_PARKED with release (sync/wait.c), and the canceller waits
 * for that with an acquire load (park after save, invariant 1). That wait
 * is short and bounded: t does nothing but queue itself and switch. The
 * canceller takes no lock, so it adds nothing to the lock order; it may
 * run on a plain thread, a green thread or a timer-less context alike.
 */
#include "thread/thread.h"

#include <sched.h>

/* t's wait, claimed by this canceller: ready t once it is parked. */
static void cancel_wake(fern_thread *t)
{
    for (unsigned n = 0; LOAD(&t->run_state) != T_PARKED; n++) {
        if (n < 256)
            cpu_relax();
        else
            sched_yield(); /* t's worker was descheduled mid-park */
    }
    sched_ready(t);
}

int fern_cancel(fern_thread *t)
{
    if (!t)
        return EINVAL;
    if (LOAD(&t->alloc) != A_LIVE)
        return ESRCH;
    /* The request first, then the look at the wait: sequentially
     * consistent against parker_cancellable's pair (sync/wait.h). */
    if (__atomic_exchange_n(&t->creq, 1, __ATOMIC_SEQ_CST))
        return 0; /* cancelled before: its wait, if any, was claimed then */
    struct parker *p = &t->cpark;
    uint32_t expect = W_WAITING;
    while (__atomic_load_n(&p->state, __ATOMIC_SEQ_CST) == W_WAITING) {
        if (CAS(&p->state, &expect, W_CANCELED)) {
            cancel_wake(t);
            break;
        }
        expect = W_WAITING;
    }
    return 0;
}

int fern_cancel_shield(int on)
{
    fern_thread *self = thread_current();
    if (!self)
        return 0;
    int was = self->cshield;
    self->cshield = on != 0;
    return was;
}

int fern_cancelled(void)
{
    fern_thread *self = thread_current();
    return self && LOAD(&self->creq);
}
