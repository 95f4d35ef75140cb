/* SPDX-License-Identifier: MIT */
/*
 * Waiters and wait queues (wait.c): the one waiting mechanism under every
 * blocking primitive of sync/ and io/, and under fern_join and fern_sleep.
 */
#ifndef FERN_SYNC_WAIT_H
#define FERN_SYNC_WAIT_H

#include "sched/sched.h"
#include "sched/parker.h"

/* One place a parker waits: an entry on one wait queue. A select has one
 * waiter per case, all sharing one parker. */
struct waiter {
    struct parker *p;
    struct waiter *next, *prev;
    fern_waitq *q;           /* queue it is linked in; NULL once unlinked */
    void *data;              /* the element to send / where to receive */
    void *token;             /* the waiting thread's identity (mutex owner) */
    int64_t since;           /* when it first queued (mutex fairness) */
    int32_t index;
    uint8_t heir;            /* a condition waiter moved onto a mutex's queue
                              * by a broadcast and claimed, waiting to be
                              * handed the mutex (a spliced one, see cond.c,
                              * is flagged and claimed when it is taken) */
    struct parker own;       /* the parker, unless one is shared */
};

static inline void parker_init(struct parker *p)
{
    p->state = W_WAITING;
    p->result = 0;
    p->index = 0;
    p->solo = 0;
    p->thread = NULL;
    p->unlock = NULL;
    p->timer.index = -1;
    p->timer.owner = NULL;
}

/* Field by field, not memset: this is on every blocking path. */
static inline void waiter_init(struct waiter *wt)
{
    wt->p = &wt->own;
    wt->next = wt->prev = NULL;
    wt->q = NULL;
    wt->data = NULL;
    wt->token = NULL;
    wt->since = 0;
    wt->index = 0;
    wt->heir = 0;
    parker_init(&wt->own);
}
/* Cancellation's side in a wait (the canceller's is thread/cancel.c).
 *
 * A cancellable wait of a green thread waits on the thread's own parker,
 * t->cpark, which lives in the descriptor: a canceller claims it with the
 * same CAS a waker or a timer uses (W_WAITING -> W_CANCELED: wake exactly
 * once, invariant 2), so its wakers claim by CAS too: an untimed single
 * waiter on it is SOLO_CAS, kept on the wakers' fast paths. The request itself is t->creq, sticky. A canceller
 * sets it, then looks at the parker's state; parker_cancellable starts a
 * wait by exchanging the state to W_WAITING, then looks at creq. Both are
 * sequentially consistent (a store-buffer pattern), so at least one of
 * them sees the other: either the wait sees the request and fails at once,
 * or the canceller sees the wait and claims it (if both, one CAS of
 * W_WAITING to W_CANCELED wins). A parker a waker claimed (W_CLAIMED: a
 * condition waiter may stay claimed while it waits for its mutex) is left
 * to its waker; the request fails the thread's next wait.
 * A canceller that claims the parker readies the thread only once its park
 * is saved (its post-switch action stores T_PARKED: invariant 1), so the
 * wait that follows parker_cancellable must park, whatever happens: the
 * callers take it last, holding the queue locks, right before they park.
 * A cancelled wait unlinks its waiters itself, as a timed-out one does. */

/* Whether green thread t (or NULL) must fail its next wait now: cancelled
 * and not shielded. Read by t itself. */
static inline bool cancel_due(const fern_thread *t)
{
    return t && !t->cshield && LOAD(&t->creq);
}

/* The parker for a wait of green thread t (NULL for a plain thread):
 * t->cpark, set up for a wait, if t may be cancelled now, else `own`
 * (initialised by the caller: a plain or shielded thread's wait, and the
 * waits that are not cancellation points use that). Returns NULL if t is
 * cancelled already: the caller then does not wait and fails with
 * ECANCELED. See above for where it may be called. */
static inline struct parker *parker_cancellable(fern_thread *t, struct parker *own)
{
    if (!t || unlikely(t->cshield))
        return own;
    struct parker *p = &t->cpark;
    __atomic_exchange_n(&p->state, W_WAITING, __ATOMIC_SEQ_CST);
    if (unlikely(__atomic_load_n(&t->creq, __ATOMIC_SEQ_CST))) {
        uint32_t expect = W_WAITING;
        if (CAS(&p->state, &expect, W_CANCELED))
            return NULL;
        /* A second canceller claimed the wait meanwhile: it readies us
         * once we are parked, so we park (and find W_CANCELED). */
    }
    /* The rest is set where it is used: result and index by the waker
     * (read only after W_WOKEN), thread and the deadline by the park,
     * unlock and the timer by a timed park (park_green); the timer is
     * unarmed between waits (index -1). solo by waiter_wait; 0 for
     * parker_wait's shared waits. */
    p->solo = 0;
    return p;
}

/* waiter_init for a cancellable wait of t: wt's parker is
 * parker_cancellable's. False if t is cancelled (wt then uses its own
 * parker, and the caller must not wait on it). */
static inline bool waiter_init_cancellable(struct waiter *wt, fern_thread *t)
{
    wt->next = wt->prev = NULL;
    wt->q = NULL;
    wt->data = NULL;
    wt->token = NULL;
    wt->since = 0;
    wt->index = 0;
    wt->heir = 0;
    struct parker *p = parker_cancellable(t, &wt->own);
    if (p == &wt->own || !p) {
        parker_init(&wt->own);
        wt->p = &wt->own;
        return p != NULL;
    }
    wt->p = p;
    return true;
}

/* Wait: the caller holds the queue locks and has queued its waiters; they are
 * released by unlock(arg) once the caller is parked. Returns W_WOKEN or
 * W_TIMEDOUT. A timed-out waiter is still linked (nobody but its own thread
 * unlinks a waiter it did not win): the caller unlinks it under the queue's
 * lock. A woken one was unlinked by its waker. */
int parker_wait(struct parker *p, void (*unlock)(void *), void *arg, int64_t deadline);
/* parker_wait for a single waiter under one spin lock (or NULL). */
int waiter_wait(struct waiter *wt, uint32_t *lock, int64_t deadline);
/* Take the waiter's parker: true if this call won it (it is then W_CLAIMED
 * and must be finished with waiter_release). */
static inline bool waiter_claim(struct waiter *wt)
{
    struct parker *p = wt->p;
    if (p->solo == SOLO_LOCKED) {
        STORE_RELAXED(&p->state, W_CLAIMED);
    } else {
        uint32_t expect = W_WAITING;
        if (!CAS(&p->state, &expect, W_CLAIMED))
            return false;
    }
    p->index = wt->index;
    return true;
}
void waiter_release(struct waiter *wt, int result);
/* waiter_release's body, inlined where a wake-up is on the fast path;
 * `tail` as in waiter_wake_tail. */
static inline __attribute__((always_inline)) void waiter_release_inline(struct waiter *wt, int result,
                                                                       bool tail)
{
    struct parker *p = wt->p;
    fern_thread *t = p->thread;
    p->result = result;
    STORE(&p->state, W_WOKEN);
    if (!t)
        futex_wake(&p->state, 1); /* p may be gone already: futex_wake on a stale address is harmless */
    else if (tail)
        sched_ready_tail(t);
    else
        sched_ready(t);
}
/* claim + release(0). */
bool waiter_wake(struct waiter *wt);
/* waiter_wake, but a green thread goes behind the threads already queued on
 * the waking worker, not into its hand-off slot (sched_ready_tail). */
bool waiter_wake_tail(struct waiter *wt);

static inline void waitq_push(fern_waitq *q, struct waiter *wt)
{
    struct waiter *tail = q->tail;
    wt->next = NULL;
    wt->prev = tail;
    wt->q = q;
    if (tail)
        tail->next = wt;
    else
        q->head = wt;
    q->tail = wt;
}
void waitq_push_front(fern_waitq *q, struct waiter *wt);
void waitq_unlink(struct waiter *wt);
/* waitq_unlink for a waiter linked in q whatever its q field says (one a
 * broadcast spliced onto a mutex's queue, cond.c). */
void waitq_unlink_in(fern_waitq *q, struct waiter *wt);
/* Claim and unlink the first waiter that can still be won; returns it
 * (W_CLAIMED, to be released by the caller) or NULL. Waiters that cannot be
 * won are left linked for their own threads to unlink (see wait.c). */
struct waiter *waitq_claim_one_slow(fern_waitq *q);
/* waitq_claim_one when q's head is wt, a solo waiter: unlink it and win it
 * (outright if SOLO_LOCKED; a SOLO_CAS one a canceller may have won: then
 * the first waiter after it that can be won, or NULL). */
static inline struct waiter *waitq_claim_solo(fern_waitq *q, struct waiter *wt)
{
    if (wt->p->solo == SOLO_CAS) {
        uint32_t expect = W_WAITING;
        if (unlikely(!CAS(&wt->p->state, &expect, W_CLAIMED)))
            return waitq_claim_one_slow(q);
    } else {
        STORE_RELAXED(&wt->p->state, W_CLAIMED);
    }
    struct waiter *n = wt->next;
    q->head = n;
    if (n)
        n->prev = NULL;
    else
        q->tail = NULL;
    wt->q = NULL;
    wt->next = NULL;
    wt->p->index = wt->index;
    return wt;
}
static inline struct waiter *waitq_claim_one(fern_waitq *q)
{
    struct waiter *wt = q->head;
    if (!wt)
        return NULL;
    if (!wt->p->solo)
        return waitq_claim_one_slow(q);
    return waitq_claim_solo(q, wt);
}
/* Claim (and unlink) every waiter that can still be won, chained through
 * ->next; the others stay linked. Wakers
 * claim under the queue's lock and release after dropping it: a woken
 * thread may destroy the object holding the queue (and its lock) as soon as
 * it runs, so nothing may touch the object after the first release. */
struct waiter *waitq_claim_all(fern_waitq *q);
/* Release a chain from waitq_claim_all (or built by hand) with `result`;
 * returns how many. */
int waiters_release(struct waiter *chain, int result);
static inline bool waitq_empty(const fern_waitq *q) { return q->head == NULL; }
/* Under q's lock, for *_destroy (the destroy rule, wait.c): WQ_BLOCKED if a
 * linked waiter still waits, else WQ_LEAVING if waiters that are leaving
 * (timed out, or their select fired elsewhere) are linked, else WQ_IDLE. */
enum { WQ_IDLE, WQ_LEAVING, WQ_BLOCKED };
int waitq_state(const fern_waitq *q);
/* One round of a destroy's wait for leaving threads; *n counts the rounds
 * (start at 0). The caller holds no lock and has ended its operation. */
void destroy_backoff(unsigned *n);


/* The post-switch action of an untimed park under one spin lock or none
 * (wait.c). */
void after_wait_spin(struct worker *w, fern_thread *prev, void *arg);
/* The common park: green thread t on p, untimed, under one spin lock or
 * none, straight to sched_park (after_wait_spin releases the lock). Also
 * parker_wait's (wait.c). */
static inline __attribute__((always_inline)) int parker_park_untimed(struct parker *p, fern_thread *t,
                                                                    uint32_t *lock)
{
    p->timer.deadline = FERN_FOREVER;
    p->thread = t;
    sched_park(after_wait_spin, lock);
    return (int)LOAD(&p->state);
}
/* waiter_wait for a caller that has read its green thread t already (NULL
 * for a plain thread): the common untimed park of a green thread inline,
 * without waiter_wait's call and its second read of the current thread;
 * everything else through waiter_wait. */
static inline __attribute__((always_inline)) int waiter_wait_as(struct waiter *wt, fern_thread *t,
                                                               uint32_t *lock, int64_t deadline)
{
    if (!t || deadline != FERN_FOREVER)
        return waiter_wait(wt, lock, deadline);
    wt->p->solo = wt->p == &wt->own ? SOLO_LOCKED : SOLO_CAS;
    return parker_park_untimed(wt->p, t, lock);
}

/* What t is parked on, for fern_dump (relaxed: diagnostics). */
static inline void wait_note_t(fern_thread *t, const char *what, const void *obj)
{
    if (t) {
        STORE_RELAXED(&t->wait_what, what);
        STORE_RELAXED(&t->wait_obj, obj);
    }
}

/* wait_note for the calling thread (nothing for a plain thread). */
void wait_note(const char *what, const void *obj);
/* The common wait: queue the caller on q (the caller holds *lock), park or
 * block until woken or the deadline (the lock is released once parked),
 * and on a timeout unlink the waiter again. `cancellable`: the wait is a
 * cancellation point (it then returns W_CANCELED, its lock released, if
 * the caller is or gets cancelled). Returns W_WOKEN, W_TIMEDOUT or
 * W_CANCELED. */
int queue_wait(fern_waitq *q, uint32_t *lock, void *token, const char *what, const void *obj,
               int64_t deadline, bool cancellable);

#endif
