/* SPDX-License-Identifier: MIT */
/*
 * The one waiting mechanism every blocking primitive uses.
 *
 * A parker is one blocked party: a green thread (parked, resumed through the
 * scheduler) or an OS thread (blocked on a futex on the parker's state word).
 * It waits in one or more places at once (a waiter per wait queue: one for a
 * mutex, one per case for a select) and maybe a timer; whoever moves its
 * state from W_WAITING first (a waker -> W_CLAIMED, the timer -> W_TIMEDOUT)
 * wins, the others do nothing (wake exactly once: invariant 2,
 * docs/design.md). A waker that claimed a parker fills in the result and
 * the data, then publishes W_WOKEN, so the woken party never sees a
 * half-delivered value.
 *
 * Visibility: the waiter is queued while the caller holds the queue's spin
 * lock; a green thread releases that lock only in the post-switch action,
 * after its registers are saved, so no waker can resume it half-parked.
 *
 * Destroy rule (every waitable object: mutex, cond, sem, rwlock, barrier,
 * wait group, channel, and so select): an object's *_destroy takes its
 * queue lock and looks at who is still inside. A thread blocked on it (a
 * linked waiter still W_WAITING: no waker has won it, its deadline has not
 * fired) or holding it (a lock) makes it say EBUSY. A thread that is only
 * leaving (a linked waiter whose parker left W_WAITING: it timed out, or
 * its select fired on another case; or one counted in the object, as a
 * mutex's woken locker) makes it wait: it drops the lock, backs off
 * (destroy_backoff: yields, then naps, so that a green destroyer lets the
 * leaving thread run on its own worker) and looks again; once nobody is
 * inside it returns 0, and the memory may be freed at once. The leaving
 * threads never block on anything but the object's spin lock, so the wait
 * is short. A thread holding the queue lock (on a fast path, or unlinking
 * itself) is waited for by taking that lock. None of this touches a fast
 * path: destroy reads what the slow paths already keep. So a thread must
 * stay visible in the object (linked, holding its lock or the object, or
 * counted) until its last access to it. Hence:
 *  - only the waker that wins a waiter's claim unlinks it, under the queue
 *    lock, before it releases the waiter; a claimed waiter never touches the
 *    queue again;
 *  - a waiter whose claim failed (it timed out, or its select fired on
 *    another case) is never unlinked by anyone else: it stays linked until
 *    its own thread takes the queue lock, unlinks itself and drops the lock,
 *    and that unlock is its last access to the object. Wakers walk past it;
 *  - a waker touches the object only under its lock and releases the waiters
 *    it claimed after dropping the lock (the woken may destroy at once);
 *  - a woken thread whose operation goes on to use the object (a mutex
 *    waiter that competes again, a condition waiter re-locking its mutex)
 *    is counted in the object (fern_mutex.users_, or cwait_ for a condition
 *    waiter, which destroy reports as EBUSY: it may stay blocked on its
 *    condition for ever) until its last access;
 *  - a select relocks only the channels where it still has linked waiters:
 *    the case that fired was unlinked by its waker, and that channel may be
 *    gone already.
 * A call that *starts* after or concurrently with *_destroy is the caller's
 * bug, as in POSIX; the rule covers every thread that entered earlier (a
 * thread still spinning for a lock it has not taken, or for a mutex before
 * it queues, is not counted: counting it would cost the contended paths an
 * atomic per attempt, and its call is concurrent with the destroy).
 * waitq_state reads a linked waiter's parker state relaxed: the parker
 * lives as long as the waiter is linked (its thread unlinks it under the
 * lock the destroyer holds), and only the value matters, not what it
 * publishes.
 *
 * Memory ordering. A parker's state is the one word its parties race on. A
 * waker claims it with an acq_rel CAS (a solo parker: a relaxed store, since
 * the queue lock it holds already serialises every claimant), fills in
 * result, index and the data with plain stores, then publishes W_WOKEN with
 * a release store; the waiter reads state with an acquire load before it
 * reads any of them. The timer's CAS to W_TIMEDOUT is acq_rel for the same
 * reason.
 */
#include "sync/sync.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int waitq_state(const fern_waitq *q)
{
    int st = WQ_IDLE;
    for (const struct waiter *wt = q->head; wt; wt = wt->next) {
        /* Linked, so its parker is alive: its thread unlinks it under the
         * lock we hold before it returns. */
        if (LOAD_RELAXED(&wt->p->state) == W_WAITING)
            return WQ_BLOCKED;
        st = WQ_LEAVING;
    }
    return st;
}

void destroy_backoff(unsigned *n)
{
    /* Yield first: a leaving thread is usually ready on this worker (a
     * one-worker cluster) or running elsewhere and done within a yield or
     * two. Then nap (1 us, then 50 us), so that a leaving thread that waits
     * behind a long run queue costs the destroyer no CPU. fern_yield and
     * fern_sleep_ns work from plain threads too. */
    unsigned k = (*n)++;
    if (k < 16)
        fern_yield();
    else
        fern_sleep_ns(k < 64 ? 1000 : 50000);
}

int queue_destroy(uint32_t *lock, const fern_waitq *q, const int64_t *count)
{
    for (unsigned n = 0;; destroy_backoff(&n)) {
        spin_lock(lock);
        int st = waitq_state(q);
        bool busy = st == WQ_BLOCKED || (count && *count != 0);
        spin_unlock(lock);
        if (busy)
            return EBUSY;
        if (st == WQ_IDLE)
            return 0;
    }
}

static void parker_timer_fire(struct timer *tm)
{
    struct parker *p = (struct parker *)((char *)tm - __builtin_offsetof(struct parker, timer));
    uint32_t expect = W_WAITING;
    fern_thread *t = p->thread;
    if (CAS(&p->state, &expect, W_TIMEDOUT))
        sched_ready(t);
}

/* Post-switch action of a parking green thread: arm its timer, then publish
 * it by releasing the queue locks. */
static void after_wait(struct worker *w, fern_thread *prev, void *arg)
{
    struct parker *p = arg;
    /* Read p before arming the timer: once armed, the monitor may fire it
     * (watch/monitor.c) and the thread run elsewhere and reuse p's memory. */
    void (*unlock)(void *) = p->unlock;
    void *unlock_arg = p->unlock_arg;
    /* Saved now: a canceller may ready it (see cancel_wake) and it is a
     * candidate for hibernation (sched/hibernate.c). Before the timer and
     * the unlock, after which a wake-up may store T_RUNNABLE. */
    STORE(&prev->run_state, T_PARKED);
    if (p->timer.deadline != FERN_FOREVER)
        timer_add(w, &p->timer);
    if (unlock)
        unlock(unlock_arg);
    bias_idle(w);
}

static void unlock_spin(void *l) { spin_unlock(l); }

/* Post-switch action of a green thread parking without a deadline under one
 * spin lock or none (a biased object's queue): the common case, without
 * after_wait's indirections (parker_park_untimed, wait.h). Both end
 * the parking thread's operation on biased objects (bias.c). */
void after_wait_spin(struct worker *w, fern_thread *prev, void *arg)
{
    STORE(&prev->run_state, T_PARKED); /* as in after_wait */
    if (arg)
        spin_unlock(arg);
    bias_idle(w);
}

/* A green thread parks: the common untimed wait under one spin lock goes
 * straight to sched_park; otherwise after_wait arms the timer and runs the
 * unlock function. */
static __attribute__((noinline)) int park_green(struct parker *p, fern_thread *self, void (*unlock)(void *), void *arg,
                      int64_t deadline)
{
    p->thread = self;
    p->unlock = unlock;
    p->unlock_arg = arg;
    p->timer.fire = parker_timer_fire;
    p->timer.index = -1;
    p->timer.owner = NULL;
    if (deadline != FERN_FOREVER)
        STORE_RELAXED(&self->wait_timed, 1);
    sched_park(after_wait, p);
    if (deadline != FERN_FOREVER)
        STORE_RELAXED(&self->wait_timed, 0);
    uint32_t st = LOAD(&p->state);
    if (st != W_TIMEDOUT && deadline != FERN_FOREVER)
        timer_cancel(&p->timer); /* woken or cancelled: the timer may be armed */
    return (int)st;
}

/* An OS thread blocks on the futex of the parker's state. */
static __attribute__((noinline)) int park_plain(struct parker *p, void (*unlock)(void *), void *arg, int64_t deadline)
{
    p->thread = NULL;
    if (unlock)
        unlock(arg);
    for (;;) {
        uint32_t st = LOAD(&p->state);
        if (st == W_WOKEN || st == W_TIMEDOUT) {
            TSAN_ACQUIRE(&p->state);
            return (int)st;
        }
        if (st == W_CLAIMED) {
            sched_yield(); /* the waker is filling in the result */
            continue;
        }
        int r = futex_wait(&p->state, W_WAITING, deadline);
        if (r == ETIMEDOUT || (deadline != FERN_FOREVER && fern_now_ns() >= deadline)) {
            uint32_t expect = W_WAITING;
            if (CAS(&p->state, &expect, W_TIMEDOUT))
                return W_TIMEDOUT;
        }
    }
}

/* parker_wait's body, inlined into waiter_wait (every blocking primitive
 * comes through there), with the untimed spin-lock case kept short. */
static inline __attribute__((always_inline)) int park(struct parker *p, void (*unlock)(void *),
                                                     void *arg, int64_t deadline)
{
    fern_thread *self = thread_current();
    if (self && deadline == FERN_FOREVER && (unlock == unlock_spin || !unlock))
        return parker_park_untimed(p, self, arg);
    p->timer.deadline = deadline;
    if (!self)
        return park_plain(p, unlock, arg, deadline);
    return park_green(p, self, unlock, arg, deadline);
}

int parker_wait(struct parker *p, void (*unlock)(void *), void *arg, int64_t deadline)
{
    return park(p, unlock, arg, deadline);
}

int waiter_wait(struct waiter *wt, uint32_t *lock, int64_t deadline)
{
    wt->p->solo = deadline != FERN_FOREVER ? 0 : wt->p == &wt->own ? SOLO_LOCKED : SOLO_CAS;
    return park(wt->p, lock ? unlock_spin : NULL, lock, deadline);
}

void waiter_release(struct waiter *wt, int result) { waiter_release_inline(wt, result, false); }

bool waiter_wake(struct waiter *wt)
{
    if (!waiter_claim(wt))
        return false;
    waiter_release_inline(wt, 0, false);
    return true;
}

bool waiter_wake_tail(struct waiter *wt)
{
    if (!waiter_claim(wt))
        return false;
    waiter_release_inline(wt, 0, true);
    return true;
}

void waitq_push_front(fern_waitq *q, struct waiter *wt)
{
    wt->prev = NULL;
    wt->next = q->head;
    wt->q = q;
    if (q->head)
        ((struct waiter *)q->head)->prev = wt;
    else
        q->tail = wt;
    q->head = wt;
}

void waitq_unlink(struct waiter *wt)
{
    if (wt->q)
        waitq_unlink_in(wt->q, wt);
}

void waitq_unlink_in(fern_waitq *q, struct waiter *wt)
{
    if (wt->prev)
        wt->prev->next = wt->next;
    else
        q->head = wt->next;
    if (wt->next)
        wt->next->prev = wt->prev;
    else
        q->tail = wt->prev;
    wt->q = NULL;
    wt->next = wt->prev = NULL;
}

struct waiter *waitq_claim_all(fern_waitq *q)
{
    struct waiter *head = NULL, **tail = &head, *wt, *next;
    for (wt = q->head; wt; wt = next) {
        next = wt->next;
        if (!waiter_claim(wt))
            continue;
        waitq_unlink(wt);
        *tail = wt;
        tail = &wt->next;
    }
    *tail = NULL;
    return head;
}

int waiters_release(struct waiter *chain, int result)
{
    int n = 0;
    while (chain) {
        struct waiter *next = chain->next; /* read before the waiter may leave */
        waiter_release(chain, result);
        chain = next;
        n++;
    }
    return n;
}

/* The out-of-line starts of a cancellable wait (wait.h). */
struct parker *parker_cancellable_slow(fern_thread *t, struct parker *own, bool started)
{
    struct parker *p = &t->cpark;
    if (!started) {
        if (t->cshield)
            return own;
        /* The fence side (cfence): both halves sequentially consistent, a
         * store-buffer pattern against fern_cancel's. */
        __atomic_exchange_n(&p->state, W_WAITING, __ATOMIC_SEQ_CST);
        started = __atomic_load_n(&t->creq, __ATOMIC_SEQ_CST) != 0;
    }
    if (started) {
        uint32_t expect = W_WAITING;
        if (CAS(&p->state, &expect, W_CANCELED))
            return NULL;
        /* A canceller claimed the wait meanwhile: it readies us once we
         * are parked, so we park (and find W_CANCELED). */
    }
    p->solo = 0;
    return p;
}

bool waiter_init_cancellable_slow(struct waiter *wt, fern_thread *t, bool started)
{
    struct parker *p = t ? parker_cancellable_slow(t, &wt->own, started) : &wt->own;
    if (p == &wt->own || !p) {
        parker_init(&wt->own);
        wt->own.solo = SOLO_LOCKED;
        wt->p = &wt->own;
        return p != NULL;
    }
    p->solo = SOLO_CAS;
    wt->p = p;
    return true;
}

void wait_note(const char *what, const void *obj) { wait_note_t(thread_current(), what, obj); }

/* The common wait: queue the caller on q (the caller holds *lock), park or
 * block until woken or the deadline (the lock is released once parked),
 * and on a timeout or a cancel unlink the waiter again (wait.h). */
int queue_wait(fern_waitq *q, uint32_t *lock, void *token, const char *what,
                      const void *obj, int64_t deadline, bool cancellable)
{
    struct waiter wt;
    if (!cancellable) {
        waiter_init(&wt);
    } else if (!waiter_init_cancellable(&wt, thread_current())) {
        spin_unlock(lock);
        return W_CANCELED;
    }
    wt.token = token;
    waitq_push(q, &wt);
    wait_note(what, obj);
    int st = waiter_wait(&wt, lock, deadline);
    wait_note(NULL, NULL);
    if (st != W_WOKEN) {
        spin_lock(lock);
        waitq_unlink(&wt);
        spin_unlock(lock);
    }
    return st;
}
