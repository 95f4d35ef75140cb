/*
 * Mutex and condition variable, for green and plain threads alike.
 *
 * Mutex state_: 0 free, 1 locked, 2 locked and maybe waiters. The
 * uncontended lock is one CAS 0 -> 1 (plus a relaxed store of the owner for
 * EPERM checks and fern_dump); unlock is one exchange to 0, and only when it
 * returns 2 does it look at the wait queue.
 *
 * No lost wake-up: a locker that fails sets state_ = 2 by exchange, then
 * takes lock_ (the queue lock) and exchanges 2 in again *under lock_*. If the
 * holder released in between, that exchange returns 0 and the locker owns the
 * mutex. Otherwise the locker is queued before lock_ is released (after its
 * park), and any later unlock sees 2 and must take lock_ to wake, so it finds
 * the waiter. A woken waiter competes again (it may lose to a barging
 * locker and queue again).
 *
 * Condition variable: a waiter queues itself under the cond's lock_, then
 * releases the mutex, then parks (lock_ released after the switch). A signal
 * takes lock_ and wakes the first waiter it wins; a waiter that timed out
 * loses that race and the signal goes to the next one.
 */
#include "internal.h"

static void wait_note(const char *what, const void *obj)
{
    fern_thread *t = thread_current();
    if (t) {
        STORE_RELAXED(&t->wait_what, what);
        STORE_RELAXED(&t->wait_obj, obj);
    }
}

int fern_mutex_init(fern_mutex *m)
{
    if (!m)
        return EINVAL;
    memset(m, 0, sizeof *m);
    return 0;
}

int fern_mutex_destroy(fern_mutex *m)
{
    if (!m)
        return EINVAL;
    if (LOAD(&m->state_) != 0)
        return EBUSY;
    spin_lock(&m->lock_);
    bool waiters = !waitq_empty(&m->waiters_);
    spin_unlock(&m->lock_);
    return waiters ? EBUSY : 0;
}

static int mutex_lock_slow(fern_mutex *m, int64_t deadline, void *self)
{
    if (LOAD_RELAXED(&m->owner_) == self)
        return EDEADLK;
    for (;;) {
        if (__atomic_exchange_n(&m->state_, 2, __ATOMIC_ACQUIRE) == 0)
            break;
        if (deadline != FERN_FOREVER && fern_now_ns() >= deadline)
            return ETIMEDOUT;
        struct waiter wt;
        waiter_init(&wt);
        spin_lock(&m->lock_);
        if (__atomic_exchange_n(&m->state_, 2, __ATOMIC_ACQUIRE) == 0) {
            spin_unlock(&m->lock_);
            break;
        }
        waitq_push(&m->waiters_, &wt);
        wait_note("mutex", m);
        if (waiter_wait(&wt, &m->lock_, deadline) == W_TIMEDOUT) {
            spin_lock(&m->lock_);
            waitq_unlink(&wt);
            spin_unlock(&m->lock_);
            wait_note(NULL, NULL);
            /* The deadline passed, but the mutex may be free right now. */
            if (__atomic_exchange_n(&m->state_, 2, __ATOMIC_ACQUIRE) == 0)
                break;
            return ETIMEDOUT;
        }
        wait_note(NULL, NULL);
    }
    STORE_RELAXED(&m->owner_, self);
    return 0;
}

int fern_mutex_lock(fern_mutex *m)
{
    if (!m)
        return EINVAL;
    uint32_t z = 0;
    void *self = self_token();
    if (likely(CAS(&m->state_, &z, 1))) {
        STORE_RELAXED(&m->owner_, self);
        return 0;
    }
    return mutex_lock_slow(m, FERN_FOREVER, self);
}

int fern_mutex_timedlock(fern_mutex *m, int64_t deadline_ns)
{
    if (!m || deadline_ns < 0)
        return EINVAL;
    uint32_t z = 0;
    void *self = self_token();
    if (CAS(&m->state_, &z, 1)) {
        STORE_RELAXED(&m->owner_, self);
        return 0;
    }
    return mutex_lock_slow(m, deadline_ns, self);
}

int fern_mutex_trylock(fern_mutex *m)
{
    if (!m)
        return EINVAL;
    uint32_t z = 0;
    if (!CAS(&m->state_, &z, 1))
        return EBUSY;
    STORE_RELAXED(&m->owner_, self_token());
    return 0;
}

int fern_mutex_unlock(fern_mutex *m)
{
    if (!m)
        return EINVAL;
    if (LOAD_RELAXED(&m->owner_) != self_token())
        return EPERM;
    STORE_RELAXED(&m->owner_, NULL);
    if (likely(__atomic_exchange_n(&m->state_, 0, __ATOMIC_RELEASE) == 1))
        return 0;
    spin_lock(&m->lock_);
    waitq_wake_one(&m->waiters_);
    spin_unlock(&m->lock_);
    return 0;
}

int fern_cond_init(fern_cond *c)
{
    if (!c)
        return EINVAL;
    memset(c, 0, sizeof *c);
    return 0;
}

int fern_cond_destroy(fern_cond *c)
{
    if (!c)
        return EINVAL;
    spin_lock(&c->lock_);
    bool waiters = !waitq_empty(&c->waiters_);
    spin_unlock(&c->lock_);
    return waiters ? EBUSY : 0;
}

int fern_cond_timedwait(fern_cond *c, fern_mutex *m, int64_t deadline_ns)
{
    if (!c || !m || deadline_ns < 0)
        return EINVAL;
    void *self = self_token();
    if (LOAD_RELAXED(&m->owner_) != self)
        return EPERM;
    struct waiter wt;
    waiter_init(&wt);
    spin_lock(&c->lock_);
    waitq_push(&c->waiters_, &wt);
    fern_mutex_unlock(m);
    wait_note("cond", c);
    int st = waiter_wait(&wt, &c->lock_, deadline_ns);
    wait_note(NULL, NULL);
    if (st == W_TIMEDOUT) {
        spin_lock(&c->lock_);
        waitq_unlink(&wt);
        spin_unlock(&c->lock_);
    }
    fern_mutex_lock(m);
    return st == W_TIMEDOUT ? ETIMEDOUT : 0;
}

int fern_cond_wait(fern_cond *c, fern_mutex *m)
{
    return fern_cond_timedwait(c, m, FERN_FOREVER);
}

int fern_cond_signal(fern_cond *c)
{
    if (!c)
        return EINVAL;
    spin_lock(&c->lock_);
    waitq_wake_one(&c->waiters_);
    spin_unlock(&c->lock_);
    return 0;
}

int fern_cond_broadcast(fern_cond *c)
{
    if (!c)
        return EINVAL;
    spin_lock(&c->lock_);
    waitq_wake_all(&c->waiters_);
    spin_unlock(&c->lock_);
    return 0;
}
