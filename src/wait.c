/*
 * The one waiting mechanism every blocking primitive uses.
 *
 * A waiter is one blocked party: a green thread (parked, resumed through the
 * scheduler) or an OS thread (blocked on a futex on the waiter's state word).
 * It may sit in two places at once, a wait queue and a timer heap; whoever
 * moves its state from W_WAITING first (waiter_wake -> W_WOKEN, the timer ->
 * W_TIMEDOUT) wins, the other does nothing (DESIGN invariant 2).
 *
 * Visibility: the waiter is queued while the caller holds the queue's spin
 * lock; a green thread releases that lock only in the post-switch action,
 * after its registers are saved, so no waker can resume it half-parked.
 */
#include "internal.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void spin_lock_slow(uint32_t *l)
{
    for (unsigned spins = 0;; spins++) {
        while (__atomic_load_n(l, __ATOMIC_RELAXED)) {
            if (spins++ < 128)
                __builtin_ia32_pause();
            else
                sched_yield(); /* holder was preempted: let it run */
        }
        if (!__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
            return;
    }
}

int futex_wait(uint32_t *addr, uint32_t expect, int64_t deadline_ns)
{
    struct timespec ts, *tsp = NULL;
    if (deadline_ns != FERN_FOREVER) {
        ts.tv_sec = deadline_ns / 1000000000;
        ts.tv_nsec = deadline_ns % 1000000000;
        tsp = &ts;
    }
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline. */
    long r = syscall(SYS_futex, addr, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expect, tsp, NULL,
                     FUTEX_BITSET_MATCH_ANY);
    return r == 0 ? 0 : errno;
}

void futex_wake(uint32_t *addr, int n)
{
    syscall(SYS_futex, addr, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n, NULL, NULL, 0);
}

void waiter_init(struct waiter *wt)
{
    memset(wt, 0, sizeof *wt);
    wt->timer.index = -1;
}

static void waiter_timer_fire(struct timer *tm)
{
    struct waiter *wt = (struct waiter *)((char *)tm - __builtin_offsetof(struct waiter, timer));
    uint32_t expect = W_WAITING;
    fern_thread *t = wt->thread;
    if (CAS(&wt->state, &expect, W_TIMEDOUT))
        sched_ready(t);
}

/* Post-switch action of a parking green thread: arm its timer, then publish
 * it by releasing the queue lock. */
static void after_wait(struct worker *w, fern_thread *prev, void *arg)
{
    struct waiter *wt = arg;
    if (wt->timer.deadline != FERN_FOREVER)
        timer_add(w, &wt->timer);
    if (wt->unlock)
        spin_unlock(wt->unlock);
}

int waiter_wait(struct waiter *wt, uint32_t *lock, int64_t deadline)
{
    fern_thread *self = thread_current();
    wt->timer.deadline = deadline;
    if (self) {
        wt->thread = self;
        wt->unlock = lock;
        wt->timer.fire = waiter_timer_fire;
        wt->timer.index = -1;
        sched_park(after_wait, wt);
        uint32_t st = LOAD(&wt->state);
        if (st == W_WOKEN && deadline != FERN_FOREVER)
            timer_cancel(&wt->timer);
        return (int)st;
    }
    wt->thread = NULL;
    if (lock)
        spin_unlock(lock);
    for (;;) {
        uint32_t st = LOAD(&wt->state);
        if (st != W_WAITING)
            return (int)st;
        int r = futex_wait(&wt->state, W_WAITING, deadline);
        if (r == ETIMEDOUT || (deadline != FERN_FOREVER && fern_now_ns() >= deadline)) {
            uint32_t expect = W_WAITING;
            if (CAS(&wt->state, &expect, W_TIMEDOUT))
                return W_TIMEDOUT;
        }
    }
}

bool waiter_wake(struct waiter *wt)
{
    fern_thread *t = wt->thread;
    uint32_t expect = W_WAITING;
    if (!CAS(&wt->state, &expect, W_WOKEN))
        return false;
    if (t)
        sched_ready(t);
    else
        futex_wake(&wt->state, 1); /* wt may be gone already: futex_wake on a stale address is harmless */
    return true;
}

void waitq_push(fern_waitq *q, struct waiter *wt)
{
    wt->next = NULL;
    wt->prev = q->tail;
    wt->q = q;
    if (q->tail)
        ((struct waiter *)q->tail)->next = wt;
    else
        q->head = wt;
    q->tail = wt;
}

void waitq_unlink(struct waiter *wt)
{
    fern_waitq *q = wt->q;
    if (!q)
        return;
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

bool waitq_wake_one(fern_waitq *q)
{
    struct waiter *wt;
    while ((wt = q->head) != NULL) {
        waitq_unlink(wt);
        if (waiter_wake(wt))
            return true;
    }
    return false;
}

int waitq_wake_all(fern_waitq *q)
{
    int n = 0;
    while (!waitq_empty(q))
        n += waitq_wake_one(q);
    return n;
}
