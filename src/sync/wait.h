/* SPDX-License-Identifier: MIT */
/*
 * Waiters and wait queues (wait.c): the one waiting mechanism under every
 * blocking primitive of sync/ and io/, and under fern_join and fern_sleep.
 */
#ifndef FERN_SYNC_WAIT_H
#define FERN_SYNC_WAIT_H

#include "sched/sched.h"

enum { W_WAITING = 0, W_CLAIMED = 1, W_WOKEN = 2, W_TIMEDOUT = 3 };

/* One blocked party: a green thread (parked) or an OS thread (futex on
 * `state`). Its state leaves W_WAITING exactly once: to W_TIMEDOUT by its
 * timer, or to W_CLAIMED by a waker, who then fills in result/index (and the
 * waiter's data) and publishes W_WOKEN. */
struct parker {
    uint32_t state;
    int32_t result;          /* set by the waker: 0 or an errno value */
    int32_t index;           /* which waiter won (select case) */
    uint8_t solo;            /* one waiter, no deadline: only a waiter holding
                              * the queue's lock (or the one waker of a join
                              * or a blocking job) can claim it, so the claim
                              * needs no CAS */
    fern_thread *thread;     /* NULL: an OS thread blocked on the futex */
    void (*unlock)(void *);  /* run once the thread is parked */
    void *unlock_arg;
    struct timer timer;
};

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
    if (p->solo) {
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
 * outright. */
static inline struct waiter *waitq_claim_solo(fern_waitq *q, struct waiter *wt)
{
    struct waiter *n = wt->next;
    q->head = n;
    if (n)
        n->prev = NULL;
    else
        q->tail = NULL;
    wt->q = NULL;
    wt->next = NULL;
    STORE_RELAXED(&wt->p->state, W_CLAIMED);
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
    wt->p->solo = wt->p == &wt->own;
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
 * and on a timeout unlink the waiter again. Returns W_WOKEN or W_TIMEDOUT. */
int queue_wait(fern_waitq *q, uint32_t *lock, void *token, const char *what, const void *obj,
               int64_t deadline);

#endif
