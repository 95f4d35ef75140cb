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
#include <stdio.h>
#include <stdlib.h>

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

/* The side of the handshake a descriptor's waits take (its cfence): 0,
 * the light one, if membarrier(PRIVATE_EXPEDITED) works here, else 1, a
 * fence on every start (sync/wait.h). Decided once, before the first
 * chunk of descriptors is made, so every descriptor agrees with
 * cancel_barrier. Under TSan always the fence: it does not model
 * membarrier (sync/bias.c leaves biasing off there for the same reason). */
static int fence_mode = -1;

uint8_t cancel_fence_mode(void)
{
    int m = LOAD(&fence_mode);
    if (m < 0) {
#ifdef FERN_TSAN
        m = 1;
#else
        m = !membarrier_ready();
#endif
        STORE(&fence_mode, m);
    }
    return (uint8_t)m;
}

/* Between setting requests and looking at the waits: the heavy side of the
 * handshake. membarrier runs a full barrier on every thread of the
 * process, standing in for the fence each light start left out; on the
 * fence side the request's SEQ_CST exchange is the barrier already. */
void cancel_barrier(void)
{
    if (LOAD(&fence_mode) == 0)
        membarrier_all();
}

/* The request: true if this call set it (the first cancel of t). */
bool cancel_request(fern_thread *t)
{
    if (LOAD(&t->alloc) != A_LIVE)
        return false;
    return !__atomic_exchange_n(&t->creq, 1, __ATOMIC_SEQ_CST);
}

/* After the barrier: claim t's wait if it waits in a cancellable one (and
 * is cancelled: a descriptor reused meanwhile by a new thread is not). */
void cancel_claim(fern_thread *t)
{
    struct parker *p = &t->cpark;
    if (!LOAD(&t->creq))
        return;
    uint32_t expect = W_WAITING;
    while (__atomic_load_n(&p->state, __ATOMIC_SEQ_CST) == W_WAITING) {
        if (CAS(&p->state, &expect, W_CANCELED)) {
            cancel_wake(t);
            break;
        }
        expect = W_WAITING;
    }
}

int fern_cancel(fern_thread *t)
{
    if (!t)
        return EINVAL;
    if (LOAD(&t->alloc) != A_LIVE)
        return ESRCH;
    /* The request first, then the barrier, then the look at the wait
     * (sync/wait.h). */
    if (!cancel_request(t))
        return 0; /* cancelled before: its wait, if any, was claimed then */
    cancel_barrier();
    cancel_claim(t);
    return 0;
}

void cancel_many(fern_thread *const *v, size_t n)
{
    /* Every request, one barrier for the batch, then the waits. */
    bool any = false;
    for (size_t i = 0; i < n; i++)
        any |= cancel_request(v[i]);
    if (!any)
        return;
    cancel_barrier();
    for (size_t i = 0; i < n; i++)
        cancel_claim(v[i]);
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

/* Shutdown's walks (runtime/runtime.c). A thread that has not finished is
 * a live descriptor whose thread has not begun to exit (run_state is
 * relaxed, as fern_dump reads it). The descriptors are collected under
 * rt.chunk_lock, a leaf, and cancelled after it is dropped (fern_cancel
 * takes the scheduler's locks); one freed or reused meanwhile is either
 * skipped (ESRCH) or a new thread that shutdown cancels too. */
static bool unfinished(const fern_thread *t)
{
    return LOAD(&t->alloc) == A_LIVE && LOAD_RELAXED(&t->run_state) != T_EXITING;
}

unsigned threads_cancel_all(void)
{
    /* Count under the lock, allocate outside it, collect in a second walk
     * (no allocation under a spin lock). */
    unsigned n = 0, todo = 0, m = 0;
    spin_lock(&rt.chunk_lock);
    for (struct thread_chunk *c = rt.chunks; c; c = c->next)
        for (unsigned i = 0; i < THREAD_CHUNK; i++) {
            fern_thread *t = &c->t[i];
            if (unfinished(t)) {
                n++;
                todo += !LOAD(&t->creq);
            }
        }
    spin_unlock(&rt.chunk_lock);
    fern_thread **v = todo ? malloc(todo * sizeof *v) : NULL;
    if (v) {
        spin_lock(&rt.chunk_lock);
        for (struct thread_chunk *c = rt.chunks; c && m < todo; c = c->next)
            for (unsigned i = 0; i < THREAD_CHUNK && m < todo; i++) {
                fern_thread *t = &c->t[i];
                if (unfinished(t) && !LOAD(&t->creq))
                    v[m++] = t;
            }
        spin_unlock(&rt.chunk_lock);
    }
    cancel_many(v, m);
    free(v);
    return n;
}

unsigned threads_report_unfinished(FILE *f, unsigned max)
{
    unsigned n = 0;
    spin_lock(&rt.chunk_lock);
    for (struct thread_chunk *c = rt.chunks; c; c = c->next)
        for (unsigned i = 0; i < THREAD_CHUNK; i++) {
            fern_thread *t = &c->t[i];
            if (!unfinished(t))
                continue;
            if (n++ < max && f) {
                char name[32];
                for (int k = 0; k < 31; k++)
                    name[k] = LOAD_RELAXED(&t->name[k]);
                name[31] = 0;
                const char *what = LOAD_RELAXED(&t->wait_what);
                uint8_t st = LOAD_RELAXED(&t->run_state);
                fprintf(f, "fern:   thread %llu%s%s%s, %s%s%s\n",
                        (unsigned long long)LOAD_RELAXED(&t->id), name[0] ? " \"" : "", name,
                        name[0] ? "\"" : "",
                        st == T_PARKED ? "parked" : st == T_NEW ? "never run" : "runnable",
                        st == T_PARKED && what ? " in " : "", st == T_PARKED && what ? what : "");
            }
        }
    spin_unlock(&rt.chunk_lock);
    if (n > max && f)
        fprintf(f, "fern:   and %u more\n", n - max);
    return n;
}
