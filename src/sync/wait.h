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
 * once, invariant 2), so its wakers claim by CAS too (waitq_claim_one
 * claims every kind of waiter so, inline and without a call; an untimed
 * single waiter on it is SOLO_CAS). The request itself is t->creq,
 * sticky. A canceller sets it, then looks at the parker's state; a wait
 * starts by storing W_WAITING, then looks at creq: a store-buffer pattern,
 * in which at least one must see the other: either the wait sees the
 * request and fails at once, or the canceller sees the wait and claims it
 * (if both, one CAS of W_WAITING to W_CANCELED wins). The pattern is
 * asymmetric, as a biased object's (sync/bias.c): the wait, on every fast
 * path, orders its store before its load with a compiler barrier only; the
 * canceller, rare, runs membarrier(PRIVATE_EXPEDITED) between its request
 * and its look (cancel_barrier: one for a batch, as a group's cancel or
 * shutdown's), a full barrier on every thread of the process in place of
 * the fence the wait left out. Where membarrier is missing (and under
 * TSan, which does not model it) a descriptor's cfence is set when its
 * chunk is made: its waits start out of line, with a SEQ_CST exchange and
 * load against the canceller's SEQ_CST exchange of creq. cshield and
 * cfence share one test (cslow) on the fast path. A start that finds the
 * request has stored W_WAITING already, so it claims its own wait by CAS
 * too (a canceller may have won it: then it parks and is readied).
 * A parker a waker claimed (W_CLAIMED: a
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

/* parker_cancellable and waiter_init_cancellable out of line (wait.c):
 * `started` false for a thread whose cslow is set (shielded, or on the
 * fence side: see above), which starts here; true for a start that stored
 * W_WAITING and then found the request (a canceller may have claimed the
 * wait since: the state must not be stored again). */
struct parker *parker_cancellable_slow(fern_thread *t, struct parker *own, bool started);
bool waiter_init_cancellable_slow(struct waiter *wt, fern_thread *t, bool started);

/* The parker for a wait of green thread t (NULL for a plain thread):
 * t->cpark, set up for a wait, if t may be cancelled now, else `own`
 * (initialised by the caller: a plain or shielded thread's wait, and the
 * waits that are not cancellation points use that). Returns NULL if t is
 * cancelled already: the caller then does not wait and fails with
 * ECANCELED. See above for where it may be called. */
static inline struct parker *parker_cancellable(fern_thread *t, struct parker *own)
{
    if (!t)
        return own;
    if (unlikely(t->cslow))
        return parker_cancellable_slow(t, own, false);
    struct parker *p = &t->cpark;
    /* The light side of the handshake: the store, a compiler barrier, the
     * load; the canceller's membarrier stands in for the fence. */
    STORE_RELAXED(&p->state, W_WAITING);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (unlikely(LOAD_RELAXED(&t->creq)))
        return parker_cancellable_slow(t, own, true);
    /* The rest is set where it is used: result and index by the waker
     * (read only after W_WOKEN), thread and the deadline by the park,
     * unlock and the timer by a timed park (park_green); the timer is
     * unarmed between waits (index -1). solo by waiter_wait; 0 for
     * parker_wait's shared waits. */
    p->solo = 0;
    return p;
}

/* waiter_init for a cancellable wait of t: wt's parker is
 * parker_cancellable's, its solo set for an untimed wait (SOLO_CAS on the
 * thread's parker, SOLO_LOCKED on wt's own: waiter_wait_as relies on it;
 * waiter_wait sets it again). False if t is cancelled (wt then uses its
 * own parker, and the caller must not wait on it). */
static inline bool waiter_init_cancellable(struct waiter *wt, fern_thread *t)
{
    wt->next = wt->prev = NULL;
    wt->q = NULL;
    wt->data = NULL;
    wt->token = NULL;
    wt->since = 0;
    wt->index = 0;
    wt->heir = 0;
    if (!t) {
        parker_init(&wt->own);
        wt->own.solo = SOLO_LOCKED;
        wt->p = &wt->own;
        return true;
    }
    if (unlikely(t->cslow))
        return waiter_init_cancellable_slow(wt, t, false);
    struct parker *p = &t->cpark;
    STORE_RELAXED(&p->state, W_WAITING); /* as parker_cancellable */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (unlikely(LOAD_RELAXED(&t->creq)))
        return waiter_init_cancellable_slow(wt, t, true);
    p->solo = SOLO_CAS;
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
/* Under ThreadSanitizer, a wait that reaches fern through one of TSan's
 * blocking interceptors (sem_wait, for fern-hook) runs with TSan ignoring
 * atomic operations, so the hand-overs that atomics make (a parker's state,
 * a wait queue's spin lock) are also announced explicitly. */
#ifdef FERN_TSAN
#include <sanitizer/tsan_interface.h>
#define TSAN_RELEASE(a) __tsan_release((void *)(a))
#define TSAN_ACQUIRE(a) __tsan_acquire((void *)(a))
#else
#define TSAN_RELEASE(a) ((void)0)
#define TSAN_ACQUIRE(a) ((void)0)
#endif

static inline __attribute__((always_inline)) void waiter_release_inline(struct waiter *wt, int result,
                                                                       bool tail)
{
    struct parker *p = wt->p;
    fern_thread *t = p->thread;
    p->result = result;
    TSAN_RELEASE(&p->state);
    STORE(&p->state, W_WOKEN);
    if (!t)
        futex_wake(&p->state, 1); /* p may be gone already: futex_wake on a stale address is harmless */
    else if (tail)
        sched_ready_tail(t);
    else
        sched_ready(t);
}
static inline void parker_release(struct parker *p, int result)
{
    fern_thread *t = p->thread;
    p->result = result;
    TSAN_RELEASE(&p->state);
    STORE(&p->state, W_WOKEN);
    if (!t)
        futex_wake(&p->state, 1); /* p may be gone already, as in waiter_release */
    else
        sched_ready(t);
}
/* A parker waited on with no waiter record (io/io.c: an fd entry holds the
 * parker of its waiting reader and writer itself, so a wake-up reads
 * nothing on the parked stack). parker_claim: the CAS a waker, a timer and
 * a canceller race on (any solo), storing `index` for the winner;
 * parker_release (below waiter_release_inline): as waiter_release. */
static inline bool parker_claim(struct parker *p, int32_t index)
{
    uint32_t expect = W_WAITING;
    if (!CAS(&p->state, &expect, W_CLAIMED))
        return false;
    p->index = index;
    return true;
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
 * won are left linked for their own threads to unlink (see wait.c). Inline and without a call, whatever the waiters' kinds (every
 * claim is one CAS: a canceller may race for a cancellable wait, and the
 * test that would spare the others the CAS costs as much), so that a waiter
 * a canceller won (rare: a loop over the rest) costs the fast path no
 * registers. The head's prev is NULL: its unlink tests nothing more. */
static inline struct waiter *waitq_claim_one(fern_waitq *q)
{
    struct waiter *wt = q->head;
    if (!wt)
        return NULL;
    uint32_t expect = W_WAITING;
    if (likely(CAS(&wt->p->state, &expect, W_CLAIMED))) {
        struct waiter *n = wt->next;
        q->head = n;
        if (n)
            n->prev = NULL;
        else
            q->tail = NULL;
    } else {
        for (;;) {
            if (!(wt = wt->next))
                return NULL;
            expect = W_WAITING;
            if (CAS(&wt->p->state, &expect, W_CLAIMED))
                break;
        }
        struct waiter *n = wt->next, *pv = wt->prev;
        pv->next = n;
        if (n)
            n->prev = pv;
        else
            q->tail = pv;
        wt->prev = NULL;
    }
    wt->q = NULL;
    wt->next = NULL;
    wt->p->index = wt->index;
    return wt;
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
 * for a plain thread) and set wt up with waiter_init_cancellable: the
 * common untimed park of a green thread inline,
 * without waiter_wait's call and its second read of the current thread;
 * everything else through waiter_wait. */
static inline __attribute__((always_inline)) int waiter_wait_as(struct waiter *wt, fern_thread *t,
                                                               uint32_t *lock, int64_t deadline)
{
    if (!t || deadline != FERN_FOREVER)
        return waiter_wait(wt, lock, deadline);
    /* solo as waiter_init_cancellable set it (every caller's init). */
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
