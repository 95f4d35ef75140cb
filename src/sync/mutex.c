/* SPDX-License-Identifier: MIT */
/*
 * fern_mutex, for green and plain threads alike (the condition variable,
 * which hands a mutex to its waiters, is cond.c; the inline parts the two
 * share are mutex.h).
 *
 * Mutex state_: 0 free, 1 locked, 2 locked and maybe waiters. The
 * uncontended lock is one CAS 0 -> 1 (plus a relaxed store of the owner for
 * EPERM checks and fern_dump); unlock is one CAS 1 -> 0, and only when that
 * fails (state 2) does it take the queue lock, free the mutex under it and
 * look at the wait queue.
 *
 * No lost wake-up: a locker that fails sets state_ = 2 by exchange, then
 * takes lock_ (the queue lock) and exchanges 2 in again *under lock_*. If the
 * holder released in between, that exchange returns 0 and the locker owns the
 * mutex. Otherwise the locker is queued before lock_ is released (after its
 * park), and any later unlock sees 2 and must take lock_ to wake, so it finds
 * the waiter. A woken waiter competes again (it may lose to a barging
 * locker and queue again).
 *
 * Fairness (as Go's sync.Mutex): barging is fast but can starve a waiter. A
 * waiter that has been queued for more than STARVE_NS re-queues at the front
 * and sets handoff_; while it is set, unlock does not release the mutex but
 * hands it, still locked, to the first waiter it wins (owner_ set on its
 * behalf, result 1), so bargers cannot overtake. Hand-off ends when the queue
 * empties or a waiter that has not waited long gets the mutex.
 *
 * Fast paths. fern_mutex_lock, fern_mutex_unlock and fern_cond_signal keep
 * their common case (the object's mode settled, no contention, no hand-off,
 * at most a solo waiter to wake) free of calls but tail calls and the final
 * wake-up, so that it saves no callee-saved registers; every other case
 * jumps to a noinline function that finishes the operation the same way as
 * before (*_settle, *_slow). A condition wait of a green thread without a
 * deadline is a copy of its own (cond_wait), parking inline.
 *
 * Memory ordering. state_ (mutex) moves by acq_rel CAS and exchange: a lock
 * acquires the previous holder's critical section, an unlock releases its
 * own (in plain mode the object is one worker's and needs none, bias.c).
 * The lost-wake-up argument above is about state_ alone, one location, so
 * it holds on any CPU. owner_ is relaxed: only the thread that stored its
 * own token can compare equal to it, so a stale value only ever means "not
 * you". handoff_ is a relaxed hint, re-read under lock_ before it is acted
 * on; heirs_ and the queues are under lock_.
 */
#include "sync/mutex.h"

/* A plain thread's identity for mutex ownership (see self_token). */
__thread char fern_plain_token_ __attribute__((tls_model("initial-exec")));

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
    /* EBUSY if held (state_ is 0 only while m is free: a locker's exchange
     * of 2 that returns 0 makes it the owner), if a locker is blocked in
     * the queue, or if a condition waiter uses m (cwait_). Wait while a
     * locker is leaving or competing again (users_, or a timed-out waiter
     * still linked). A thread's last access is a CAS of state_ (a fast
     * unlock) or the release of lock_. */
    for (unsigned n = 0;; destroy_backoff(&n)) {
        struct caller me;
        caller_get(&me);
        bool plain = bias_enter(&m->bias_, &me);
        qlock(plain, &m->lock_);
        int st = waitq_state(&m->waiters_);
        bool busy = LOAD(&m->state_) != 0 || m->cwait_ != 0 || st == WQ_BLOCKED;
        bool leaving = m->users_ != 0 || st == WQ_LEAVING;
        qunlock(plain, &m->lock_);
        bias_end(&me);
        if (busy)
            return EBUSY;
        if (!leaving)
            return 0;
    }
}

/* The lock after a failed first attempt, as an operation of its own. It
 * reads the caller and enters the bias again although mutex_lock just did:
 * handing it mutex_lock's open operation instead measured slower on the
 * contended 2-worker benchmark (64.9 -> 60.3 M ops/s, 8 A/B pairs), the
 * shorter path from the failed CAS to the spin below hammering the lock's
 * line sooner.
 *
 * users_ (the destroy rule, wait.c): a locker counts itself from its first
 * queueing until its last access to m, since a waiter woken to compete again
 * is in no queue and does not hold m. `counted` says it is counted already,
 * in cwait_ (a condition waiter re-locking its mutex, see
 * fern_cond_timedwait); cw remembers which count it leaves. */
__attribute__((noinline)) int mutex_lock_slow(fern_mutex *m, int64_t deadline, bool counted)
{
    const bool cw = counted;
    struct caller mine, *me = &mine;
    caller_get(me);
    void *self = caller_self(me); /* the same after a park */
    fern_thread *t = caller_thread(me);
    if (LOAD_RELAXED(&m->owner_) == self)
        return EDEADLK;
    bool plain = bias_enter(&m->bias_, me);
    /* Spin briefly before parking (as Go's mutex does) when the holder can
     * be running elsewhere: a critical section is often shorter than a park
     * and a wake-up. Not in hand-off mode (no barging then), and not when
     * this worker is its cluster's only one: the holder would need it (a
     * biased mutex is only used by one such worker). */
    if (!plain && !LOAD_RELAXED(&m->handoff_) && (!me->w || LOAD_RELAXED(&me->w->cluster->nworkers) > 1)) {
        for (int round = 0; round < 4; round++) {
            for (int k = 0; k < 30; k++)
                cpu_relax();
            uint32_t z = 0;
            if (LOAD_RELAXED(&m->state_) == 0 && CAS(&m->state_, &z, 1)) {
                STORE_RELAXED(&m->owner_, self);
                if (counted)
                    users_add(plain, m, -1, cw);
                bias_end(me);
                return 0;
            }
        }
    }
    int64_t since = 0;
    for (;;) {
        if (xchg_p(plain, &m->state_, 2) == 0)
            break;
        int64_t now = fern_now_ns();
        if (deadline != FERN_FOREVER && now >= deadline) {
            if (counted)
                users_add(plain, m, -1, cw);
            bias_end(me);
            return ETIMEDOUT;
        }
        if (!since)
            since = now;
        struct waiter wt;
        waiter_init(&wt);
        wt.token = self;
        wt.since = since;
        qlock(plain, &m->lock_);
        if (xchg_p(plain, &m->state_, 2) == 0) {
            qunlock(plain, &m->lock_);
            break;
        }
        if (!counted) {
            m->users_++; /* under lock_ */
            counted = true;
        }
        if (now - since > STARVE_NS) {
            /* Starving: go first and make unlock hand the mutex over. */
            STORE_RELAXED(&m->handoff_, 1);
            waitq_push_front(&m->waiters_, &wt);
        } else {
            waitq_push(&m->waiters_, &wt);
        }
        wait_note_t(t, "mutex", m);
        /* The deadlock watch walks the threads only while two or more
         * may wait for each other (watch/deadlock.c). */
        bool note = t && deadline == FERN_FOREVER;
        if (note)
            COUNT(&me->w->mutex_parked_delta, 1);
        /* Ends the operation: lock_ and the bias busy flag are released
         * once this thread is off its stack. */
        int st = waiter_wait(&wt, plain ? NULL : &m->lock_, deadline);
        wait_note_t(t, NULL, NULL);
        caller_get(me);                   /* maybe on another worker now */
        /* A green thread always resumes on a worker; the test on me->w
         * only tells GCC 12 (aarch64, -O3), which otherwise sees a NULL
         * worker from caller_get and fails the build with
         * -Wstringop-overflow. */
        if (note && me->w)
            COUNT(&me->w->mutex_parked_delta, -1);
        plain = bias_enter(&m->bias_, me); /* and the bias maybe revoked */
        if (st == W_TIMEDOUT) {
            qlock(plain, &m->lock_);
            waitq_unlink(&wt);
            qunlock(plain, &m->lock_);
            /* The deadline passed, but the mutex may be free right now. */
            if (xchg_p(plain, &m->state_, 2) == 0)
                break;
            users_add(plain, m, -1, cw);
            bias_end(me);
            return ETIMEDOUT;
        }
        if (wt.p->result == 1) {
            users_add(plain, m, -1, cw);
            bias_end(me);
            return 0; /* handed over: unlock made us the owner */
        }
    }
    STORE_RELAXED(&m->owner_, self);
    if (counted)
        users_add(plain, m, -1, cw);
    bias_end(me);
    return 0;
}

/* The lock when m's mode is not known yet: its first use, or a bias being
 * revoked. Kept out of mutex_lock, whose fast path then makes no call but
 * tail calls and saves no registers. */
__attribute__((noinline, cold)) int mutex_lock_settle(fern_mutex *m, int64_t deadline,
                                                             bool counted)
{
    struct caller me;
    caller_get(&me);
    bool plain = bias_enter(&m->bias_, &me);
    return mutex_lock_open(m, deadline, counted, &me, plain);
}

int fern_mutex_lock(fern_mutex *m)
{
    preempt_point();
    if (!m)
        return EINVAL;
    return mutex_lock(m, FERN_FOREVER, false);
}

int fern_mutex_timedlock(fern_mutex *m, int64_t deadline_ns)
{
    if (!m || deadline_ns < 0)
        return EINVAL;
    return mutex_lock(m, deadline_ns, false);
}

int fern_mutex_trylock(fern_mutex *m)
{
    if (!m)
        return EINVAL;
    struct caller me;
    caller_get(&me);
    bool plain = bias_enter(&m->bias_, &me);
    int r = EBUSY;
    if (cas_p(plain, &m->state_, 0, 1)) {
        STORE_RELAXED(&m->owner_, caller_self(&me));
        r = 0;
    }
    bias_end(&me);
    return r;
}

/* Under m's queue lock: unlink and return the first waiter to give the
 * mutex to (heirs too) or to wake (heirs left queued), or NULL. Flagged heirs
 * are won already, so a claim would fail on them; a spliced one is solo and
 * won here (nobody else can: its cond's waiters were all untimed); other
 * waiters must be won, and one whose timed lock expired is left linked: it
 * unlinks itself (wait.c). */
static struct waiter *mutex_next_waiter(fern_mutex *m, bool heirs_too)
{
    struct waiter *wt, *next;
    for (wt = m->waiters_.head; wt; wt = next) {
        next = wt->next;
        if (waiter_is_heir(m, wt)) {
            if (!heirs_too)
                continue;
            if (!wt->heir) {
                waiter_claim(wt);
                wt->heir = 1;
            }
            waitq_unlink_in(&m->waiters_, wt);
            m->heirs_--;
            return wt;
        }
        if (waiter_claim(wt)) {
            waitq_unlink(wt);
            return wt;
        }
    }
    return NULL;
}

/* Hand-off mode: pass the mutex, still locked, to the first waiter we win
 * or the first heir. Hand-off continues while heirs are queued. */
static bool mutex_handoff(fern_mutex *m, bool plain)
{
    qlock(plain, &m->lock_);
    struct waiter *wt = mutex_next_waiter(m, true);
    if (!wt) {
        STORE_RELAXED(&m->handoff_, 0);
        qunlock(plain, &m->lock_);
        return false;
    }
    if (wt->heir)
        heir_prefetch(m, wt);
    STORE_RELAXED(&m->owner_, wt->token);
    if (!m->heirs_ && (waitq_empty(&m->waiters_) || (!wt->heir && fern_now_ns() - wt->since < STARVE_NS)))
        STORE_RELAXED(&m->handoff_, 0);
    qunlock(plain, &m->lock_);
    waiter_release(wt, 1);
    return true;
}

/* The rest of an unlock whose CAS 1 -> 0 failed (state 2: waiters maybe),
 * inside the operation, owner_ already cleared. */
__attribute__((noinline)) void mutex_wake(fern_mutex *m, bool plain)
{
    /* Free m only under the queue lock. Once state_ is 0 a destroyer may
     * find m idle, and it takes this lock to look at the queue, so our
     * unlock of it is our last access (the destroy rule). A locker that set
     * 2 meanwhile takes the lock after us and finds m free. */
    qlock(plain, &m->lock_);
    STORE(&m->state_, 0);
    /* A waiter still asleep in the queue can be starving too: then the next
     * unlock hands over, whoever barges in now. */
    struct waiter *head = m->waiters_.head;
    if (head && !waiter_is_heir(m, head) && fern_now_ns() - head->since > STARVE_NS)
        STORE_RELAXED(&m->handoff_, 1);
    /* Wake the first waiter that can still be won, to compete again. Not an
     * heir: the mutex was free from our exchange until here, and whoever
     * took it may have broadcast and queued heirs, which its own unlock
     * hands the mutex to. */
    struct waiter *wt = mutex_next_waiter(m, false);
    qunlock(plain, &m->lock_);
    if (wt)
        waiter_release(wt, 0);
}

/* Unlock for the caller self, inside an operation on m in the given mode:
 * the whole of it. */
__attribute__((noinline)) int mutex_release_slow(fern_mutex *m, bool plain, void *self)
{
    if (LOAD_RELAXED(&m->owner_) != self)
        return EPERM;
    if (LOAD_RELAXED(&m->handoff_) && mutex_handoff(m, plain))
        return 0;
    mutex_free(m, plain);
    return 0;
}

/* fern_mutex_unlock's cases other than the common one, each ending the
 * operation (fern_mutex_unlock jumps here, so its own path saves no
 * registers): mode < 0, the bias to be settled first; otherwise the
 * operation is open in that mode and `freed` says whether the fast path
 * cleared owner_ and failed its CAS (waiters maybe), or stopped before
 * (not the owner, or hand-off mode). */
static __attribute__((noinline)) int mutex_unlock_slow(fern_mutex *m, struct caller me, int mode,
                                                       bool freed)
{
    int r = 0;
    if (freed) {
        mutex_wake(m, mode);
    } else {
        bool plain = mode >= 0 ? mode : bias_enter(&m->bias_, &me);
        r = mutex_release_slow(m, plain, caller_self(&me));
    }
    bias_end(&me);
    return r;
}

int fern_mutex_unlock(fern_mutex *m)
{
    if (!m)
        return EINVAL;
    struct caller me;
    caller_get(&me);
    int mode = bias_try(&m->bias_, &me);
    if (unlikely(mode < 0) || unlikely(LOAD_RELAXED(&m->owner_) != caller_self(&me)) ||
        unlikely(LOAD_RELAXED(&m->handoff_)))
        return mutex_unlock_slow(m, me, mode, false);
    STORE_RELAXED(&m->owner_, NULL);
    if (unlikely(!cas_p(mode, &m->state_, 1, 0)))
        return mutex_unlock_slow(m, me, mode, true);
    bias_end(&me);
    return 0;
}
