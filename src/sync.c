/* SPDX-License-Identifier: MIT */
/*
 * Mutex and condition variable, for green and plain threads alike.
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
 * Condition variable: a waiter queues itself under the cond's lock_, then
 * releases the mutex, then parks (lock_ released after the switch). A signal
 * takes lock_ and wakes the first waiter it wins; a waiter that timed out
 * loses that race and the signal goes to the next one.
 *
 * Broadcast with the mutex held (wait morphing): waking every waiter only
 * for all of them to fight over the mutex the caller holds is a thundering
 * herd. Instead the broadcast claims the waiters and moves those that wait
 * with the caller's mutex onto that mutex's queue as "heirs" (heirs_ counts
 * them, handoff_ stays set while any is queued): each unlock then hands the
 * mutex, still locked, to the next one, which returns from its wait owning
 * it. Nothing is woken until it can run. A signal does not do this: the
 * signaller usually locks the mutex again at once, and a hand-off would make
 * it wait for the woken thread (a convoy).
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
 * it holds on any CPU. owner_, writer_ and runner_ are relaxed: only the
 * thread that stored its own token can compare equal to it, so a stale
 * value only ever means "not you". handoff_ is a relaxed hint, re-read
 * under lock_ before it is acted on; heirs_ and the queues are under lock_.
 * Semaphore value_ and wait-group count_ change under lock_ (relaxed stores
 * for the lock-free fern_sem_value read). Once: state_ 2 is stored with
 * release after fn() and loaded with acquire, so callers that return see
 * what fn() wrote.
 */
#include "internal.h"

static inline void wait_note_t(fern_thread *t, const char *what, const void *obj)
{
    if (t) {
        STORE_RELAXED(&t->wait_what, what);
        STORE_RELAXED(&t->wait_obj, obj);
    }
}

static void wait_note(const char *what, const void *obj) { wait_note_t(thread_current(), what, obj); }

/* The common wait: queue the caller on q (the caller holds *lock), park or
 * block until woken or the deadline (the lock is released once parked),
 * and on a timeout unlink the waiter again. Returns W_WOKEN or W_TIMEDOUT. */
static int queue_wait(fern_waitq *q, uint32_t *lock, void *token, const char *what,
                      const void *obj, int64_t deadline)
{
    struct waiter wt;
    waiter_init(&wt);
    wt.token = token;
    waitq_push(q, &wt);
    wait_note(what, obj);
    int st = waiter_wait(&wt, lock, deadline);
    wait_note(NULL, NULL);
    if (st == W_TIMEDOUT) {
        spin_lock(lock);
        waitq_unlink(&wt);
        spin_unlock(lock);
    }
    return st;
}

/* Mutex and condition variable fields are read and written either plainly
 * (the object is biased to the caller's worker, see bias.c) or atomically;
 * these take the mode. */
static inline uint32_t xchg_p(bool plain, uint32_t *p, uint32_t v)
{
    if (plain) {
        uint32_t old = LOAD_RELAXED(p);
        STORE_RELAXED(p, v);
        return old;
    }
    return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL);
}

static inline bool cas_p(bool plain, uint32_t *p, uint32_t expect, uint32_t v)
{
    if (plain) {
        if (LOAD_RELAXED(p) != expect)
            return false;
        STORE_RELAXED(p, v);
        return true;
    }
    return CAS(p, &expect, v);
}

/* m->users_ and m->cwait_ change, and destroy reads them, under m's queue
 * lock. users_ counts a locker from its first queueing until its last
 * access to m: a waiter woken to compete again is in no queue and does not
 * hold m, and one that timed out still unlinks itself and tries state_ once
 * more. cwait_ counts a condition waiter from before it releases m until
 * after it holds m again. A thread counted in either hands over to state_
 * and back, so one of them always shows it; reading all under the lock, a
 * destroyer cannot see the one before a hand-over and the other after it.
 * Destroy (the destroy rule, wait.c) waits while users_ is not 0 (such a
 * thread either gets m, and destroy then says EBUSY, or leaves) but says
 * EBUSY for cwait_: a condition waiter may stay blocked on its condition
 * for ever, and once woken it is about to hold m anyway. `cw` picks the
 * count: a constant, or mutex_lock_slow's record of where it is counted. */
static inline void users_add(bool plain, fern_mutex *m, int32_t d, bool cw)
{
    qlock(plain, &m->lock_);
    if (cw)
        m->cwait_ += (uint32_t)d;
    else
        m->users_ += (uint32_t)d;
    qunlock(plain, &m->lock_);
}

/* The destroy of an object whose only inhabitants are waiters on q
 * (guarded by *lock) and, if count is not NULL, the users a nonzero *count
 * stands for (a wait group's; read under the lock): EBUSY while a thread is
 * blocked on it or *count is not 0, a wait while threads are only leaving q
 * (the destroy rule, wait.c), 0 once it is idle. */
static int queue_destroy(uint32_t *lock, const fern_waitq *q, const int64_t *count)
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

#define STARVE_NS 1000000 /* a waiter queued this long turns on hand-off */

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
static __attribute__((noinline)) int mutex_lock_slow(fern_mutex *m, int64_t deadline, bool counted)
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
         * may wait for each other (deadlock.c). */
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

/* The lock once the caller's operation on m is open in the given mode:
 * the uncontended CAS, else the slow path. */
static inline __attribute__((always_inline)) int mutex_lock_open(fern_mutex *m, int64_t deadline,
                                                                bool counted, struct caller *me,
                                                                bool plain)
{
    if (likely(cas_p(plain, &m->state_, 0, 1))) {
        STORE_RELAXED(&m->owner_, caller_self(me));
        if (counted)
            users_add(plain, m, -1, true);
        bias_end(me);
        return 0;
    }
    bias_end(me);
    return mutex_lock_slow(m, deadline, counted);
}

/* The lock when m's mode is not known yet: its first use, or a bias being
 * revoked. Kept out of mutex_lock, whose fast path then makes no call but
 * tail calls and saves no registers. */
static __attribute__((noinline, cold)) int mutex_lock_settle(fern_mutex *m, int64_t deadline,
                                                             bool counted)
{
    struct caller me;
    caller_get(&me);
    bool plain = bias_enter(&m->bias_, &me);
    return mutex_lock_open(m, deadline, counted, &me, plain);
}

/* counted: the caller is counted in users_ and leaves it once it holds m
 * (a constant at each call site). */
static inline __attribute__((always_inline)) int mutex_lock(fern_mutex *m, int64_t deadline, bool counted)
{
    struct caller me;
    caller_get(&me);
    int mode = bias_try(&m->bias_, &me);
    if (unlikely(mode < 0))
        return mutex_lock_settle(m, deadline, counted);
    return mutex_lock_open(m, deadline, counted, &me, mode);
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

/* Whether wt, queued on m, is an heir: one a broadcast's walk flagged, or
 * one it spliced over with its whole condition queue, whose q field still
 * names that queue (fern_cond_broadcast). */
static inline bool waiter_is_heir(const fern_mutex *m, const struct waiter *wt)
{
    return wt->heir || wt->q != &m->waiters_;
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

/* Where the element k places on is likely to be in a walk of objects that
 * usually sit at equal distances (waiters or stacks of threads that parked
 * one after the other in the same wait, one stack apart): cur plus k times
 * the last step. Integers: the guess may lie outside any object, and is
 * only ever prefetched (a prefetch never faults). */
static inline uintptr_t guess_ahead(uintptr_t cur, uintptr_t prev, uintptr_t k)
{
    return cur + (cur - prev) * k;
}

/* The first line of each of the n - 1 guesses after the k-th (guess_ahead),
 * back to back so that their page walks overlap (HEIR_BURST). */
static inline void prefetch_burst(uintptr_t cur, uintptr_t prev, uintptr_t k, unsigned n, bool write)
{
    for (unsigned i = 1; i < n; i++) {
        const void *g = (const void *)guess_ahead(cur, prev, k + i);
        if (write)
            prefetch_w(g);
        else
            prefetch(g);
    }
}

static inline void prefetch_lines(const void *lo, const void *hi)
{
    for (const char *a = lo; a < (const char *)hi; a += 64)
        prefetch(a);
}

/* Under m's queue lock, handing m to the heir wt: start loading what the
 * next steps of a broadcast's hand-off chain will touch, so that their cache
 * and TLB misses overlap with the rest of this thread's run instead of
 * stalling each step in turn. Each heir sits on a cold stack of its own (a
 * million heirs: gigabytes apart; a TLB miss costs ~115 ns on our test VM).
 *  - wt's thread: its used stack, from the saved context (where the switch
 *    to it resumes) up to the stack header at the top (where it exits);
 *  - the next heir n (its waiter was loaded by the previous step): its
 *    descriptor and the waiter after it;
 *  - the heir HEIR_AHEAD places on: its used stack, guessed. Heirs that
 *    parked one after the other in the same wait usually sit one stack
 *    apart, at the same depth: the guess is n plus (n - wt) times
 *    HEIR_AHEAD - 1, with wt's shape around the waiter. So the page walk
 *    to each heir's stack (one new page per heir; two-dimensional on a
 *    VM) starts several steps before it runs; by the time the heir is n,
 *    its stack is in. A wrong guess only loads useless lines: a prefetch
 *    never faults.
 * On bench/fern_million this took the wake-all phase from 0.41 s to 0.18 s
 * on an EPYC VM (the next heir's stack only); looking 8 heirs ahead instead
 * took it from 0.77-0.80 s to 0.56-0.63 s on a Sapphire Rapids VM (the
 * broadcast's own walk prefetched, see fern_cond_broadcast, in both).
 * Heirs only: a heir is parked and its fields settled (written before its
 * condition wait released the condition's lock, which the broadcast then
 * took, before taking m's lock that we hold). */
#define HEIR_AHEAD 8
/* And every HEIR_BURST heirs, the first line of each of the next
 * HEIR_BURST - 1 guesses beyond that one. A prefetch whose address misses
 * the TLB holds up retirement until its page walk ends (~300 ns each on a
 * Sapphire Rapids VM, where 80% of the hand-off's samples sat on the one
 * look-ahead prefetch per heir); prefetches issued back to back walk in
 * parallel, so a burst pays about one walk for HEIR_BURST heirs, whose own
 * look-ahead later finds its page translated. Wake-all of a million
 * (bench/fern_million, interleaved): 0.38-0.39 s without bursts, 0.30-0.31
 * with bursts of 4, 0.29-0.30 with 8 or 16. */
#define HEIR_BURST 8
static inline void heir_prefetch(fern_mutex *m, const struct waiter *wt)
{
    const fern_thread *t = wt->p->thread;
    const char *w = (const char *)wt, *sp = NULL, *top = NULL;
    if (t && t->stack) {
        sp = t->sp;
        top = (const char *)(t->stack + 1);
        if (sp && sp < w && top - sp <= 2048)
            prefetch_lines(sp, top);
        else
            sp = NULL;
    }
    const struct waiter *n = m->waiters_.head;
    if (n && waiter_is_heir(m, n)) {
        if (n->p->thread)
            prefetch(n->p->thread);
        if (n->next)
            prefetch_lines(n->next, n->next + 1);
        if (sp) {
            uintptr_t g = guess_ahead((uintptr_t)n, (uintptr_t)w, HEIR_AHEAD - 1);
            prefetch_lines((const void *)(g - (uintptr_t)(w - sp)), (const void *)(g + (uintptr_t)(top - w)));
            if (m->heirs_ % HEIR_BURST == 0)
                prefetch_burst((uintptr_t)n, (uintptr_t)w, HEIR_AHEAD - 1, HEIR_BURST, false);
        }
    }
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
static __attribute__((noinline)) void mutex_wake(fern_mutex *m, bool plain)
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

/* Free m, held by the caller (no hand-off): the CAS 1 -> 0, else the
 * queue's turn. */
static inline __attribute__((always_inline)) void mutex_free(fern_mutex *m, bool plain)
{
    STORE_RELAXED(&m->owner_, NULL);
    if (unlikely(!cas_p(plain, &m->state_, 1, 0)))
        mutex_wake(m, plain);
}

/* Unlock for the caller self, inside an operation on m in the given mode:
 * the whole of it. */
static __attribute__((noinline)) int mutex_release_slow(fern_mutex *m, bool plain, void *self)
{
    if (LOAD_RELAXED(&m->owner_) != self)
        return EPERM;
    if (LOAD_RELAXED(&m->handoff_) && mutex_handoff(m, plain))
        return 0;
    mutex_free(m, plain);
    return 0;
}

/* mutex_release_slow for a caller that has seen that it owns m, with the
 * common case inline: no hand-off, nobody queued. */
static inline __attribute__((always_inline)) void mutex_release_owned(fern_mutex *m, bool plain,
                                                                     void *self)
{
    if (unlikely(LOAD_RELAXED(&m->handoff_))) {
        mutex_release_slow(m, plain, self);
        return;
    }
    mutex_free(m, plain);
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
    /* EBUSY while a waiter is blocked on c; wait while one that timed out
     * is still linked (it relocks c to unlink itself: its last access to
     * c). A woken waiter was unlinked by its waker and only uses its mutex
     * from then on, so destroy may follow the last signal or broadcast. */
    for (unsigned n = 0;; destroy_backoff(&n)) {
        struct caller me;
        caller_get(&me);
        bool plain = bias_enter(&c->bias_, &me);
        qlock(plain, &c->lock_);
        int st = waitq_state(&c->waiters_);
        qunlock(plain, &c->lock_);
        bias_end(&me);
        if (st != WQ_LEAVING)
            return st == WQ_BLOCKED ? EBUSY : 0;
    }
}

/* Under c's lock: queue wt, a waiter using m, timed or not, keeping what a
 * broadcast needs to know to move the queue over to its mutex whole
 * (fern_cond_broadcast): that no waiter is timed (one may time out and
 * unlink itself from c: timed_ counts them) and that all use one mutex
 * (mutex_, set whenever the queue was empty, NULL once two were seen until
 * it is empty again). */
static inline void cond_push(fern_cond *c, struct waiter *wt, fern_mutex *m, bool timed)
{
    if (!c->waiters_.tail)
        c->mutex_ = m;
    else if (c->mutex_ != m)
        c->mutex_ = NULL;
    c->waiting_++;
    if (timed)
        c->timed_++;
    waitq_push(&c->waiters_, wt);
}

/* Under c's lock: wt, which cond_push queued, is no longer in c's queue. A
 * condition waiter is solo unless timed (waiter_wait). */
static inline void cond_left(fern_cond *c, const struct waiter *wt)
{
    c->waiting_--;
    c->timed_ -= !wt->p->solo;
}

/* fern_cond_timedwait after its argument checks, for the caller me, whose
 * green thread is t (NULL for a plain thread). Inlined twice: for the
 * common wait, a green thread's without a deadline, with both known (no
 * test of t or of the deadline is left in it), and for the others. */
static inline __attribute__((always_inline)) int cond_wait(fern_cond *c, fern_mutex *m,
                                                           int64_t deadline_ns, struct caller me,
                                                           fern_thread *t)
{
    void *self = token_of(t); /* the same after the park */
    bool pc, pm;
    bias_enter2(&c->bias_, &pc, &m->bias_, &pm, &me);
    if (LOAD_RELAXED(&m->owner_) != self) {
        bias_end(&me);
        return EPERM;
    }
    qlock(pc, &c->lock_);
    /* Unlock m only once queued (under c's lock): a signal after the
     * unlock must find us. m's lock and c's lock are never nested the
     * other way round. */
    struct waiter wt;
    waiter_init(&wt);
    wt.token = self;
    wt.data = m; /* a broadcast may move us onto m's queue */
    cond_push(c, &wt, m, deadline_ns != FERN_FOREVER);
    /* Count ourselves in m until we hold it again (the destroy rule). */
    users_add(pm, m, 1, true);
    mutex_release_owned(m, pm, self);
    wait_note_t(t, "cond", c);
    /* Ends the operation. */
    int st = waiter_wait_as(&wt, t, pc ? NULL : &c->lock_, deadline_ns);
    wait_note_t(t, NULL, NULL);
    if (unlikely(st == W_TIMEDOUT)) {
        caller_get(&me);
        pc = bias_enter(&c->bias_, &me);
        qlock(pc, &c->lock_);
        waitq_unlink(&wt);
        cond_left(c, &wt);
        qunlock(pc, &c->lock_);
        bias_end(&me);
    } else if (unlikely(wt.p->result == 1)) {
        /* Moved to m by a broadcast and handed m: we own it. */
        caller_get(&me);
        pm = bias_enter(&m->bias_, &me);
        users_add(pm, m, -1, true);
        bias_end(&me);
        return 0;
    }
    mutex_lock(m, FERN_FOREVER, true);
    return st == W_TIMEDOUT ? ETIMEDOUT : 0;
}

static __attribute__((noinline)) int cond_wait_other(fern_cond *c, fern_mutex *m,
                                                     int64_t deadline_ns, struct caller me)
{
    return cond_wait(c, m, deadline_ns, me, caller_thread(&me));
}

int fern_cond_timedwait(fern_cond *c, fern_mutex *m, int64_t deadline_ns)
{
    if (!c || !m || deadline_ns < 0)
        return EINVAL;
    struct caller me;
    caller_get(&me);
    fern_thread *t = caller_thread(&me);
    if (likely(t != NULL) && deadline_ns == FERN_FOREVER)
        return cond_wait(c, m, FERN_FOREVER, me, t);
    return cond_wait_other(c, m, deadline_ns, me);
}

int fern_cond_wait_body(fern_cond *c, fern_mutex *m)
{
    return fern_cond_timedwait(c, m, FERN_FOREVER);
}

/* fern_cond_signal's cases other than the common one, each ending the
 * operation (fern_cond_signal jumps here, so its own path saves no
 * registers): mode < 0, the bias to be settled first; otherwise the
 * operation is open in that mode, and `locked` says whether c's lock is
 * held (in shared mode) already. */
static __attribute__((noinline)) int cond_signal_slow(fern_cond *c, struct caller me, int mode,
                                                      bool locked)
{
    bool plain = mode >= 0 ? mode : bias_enter(&c->bias_, &me);
    if (!locked)
        qlock(plain, &c->lock_);
    struct waiter *wt = waitq_claim_one(&c->waiters_);
    if (wt)
        cond_left(c, wt);
    qunlock(plain, &c->lock_);
    bias_end(&me);
    if (wt)
        waiter_release(wt, 0);
    return 0;
}

int fern_cond_signal(fern_cond *c)
{
    if (!c)
        return EINVAL;
    struct caller me;
    caller_get(&me);
    int mode = bias_try(&c->bias_, &me);
    if (unlikely(mode < 0) || (!mode && unlikely(!spin_trylock(&c->lock_))))
        return cond_signal_slow(c, me, mode, false);
    /* The common case: no waiter, or a solo one (untimed) first. */
    struct waiter *wt = c->waiters_.head;
    if (wt) {
        if (unlikely(!wt->p->solo))
            return cond_signal_slow(c, me, mode, true);
        waitq_claim_solo(&c->waiters_, wt);
        c->waiting_--; /* cond_left: solo, so untimed */
    }
    qunlock(mode, &c->lock_);
    bias_end(&me);
    if (wt)
        waiter_release_inline(wt, 0, false);
    return 0;
}

/* A broadcast walks its waiters, each on a cold stack of its own: one
 * dependent cache miss, and with many waiters a TLB miss too, per waiter
 * (a million of them took 0.33-0.58 s on a Sapphire Rapids VM; 0.11-0.26 s
 * with the prefetch below, in interleaved runs). So the walk prefetches the
 * waiter BROADCAST_AHEAD places on, guessed from the last two (guess_ahead),
 * which overlaps those misses; a wrong guess loads a useless line. */
#define BROADCAST_AHEAD 8
/* Every BROADCAST_BURST waiters, the next BROADCAST_BURST - 1 guesses are
 * prefetched too, so their page walks overlap (as HEIR_BURST). */
#define BROADCAST_BURST 8
static inline void broadcast_prefetch(uintptr_t wt, uintptr_t last, uint32_t i)
{
    if (last) {
        uintptr_t g = guess_ahead(wt, last, BROADCAST_AHEAD);
        prefetch_w((const void *)g);
        prefetch_w((const void *)(g + 64));
        if (i % BROADCAST_BURST == 0)
            prefetch_burst(wt, last, BROADCAST_AHEAD, BROADCAST_BURST, true);
    }
}

/* Under c's lock, with m's nested: move c's whole queue, every waiter of
 * which is solo and uses m, onto the tail of m's as heirs, without touching
 * a waiter but the first. Each keeps its q field naming c's queue: that tags
 * it as a spliced heir (waiter_is_heir), flagged and claimed by the unlock
 * that hands it m, whose own step touches it anyway, with its stack
 * prefetched (heir_prefetch). c may even be destroyed meanwhile: the tag is
 * only compared, never followed. */
static void cond_splice(fern_cond *c, fern_mutex *m)
{
    struct waiter *first = c->waiters_.head, *tail = m->waiters_.tail;
    first->prev = tail;
    if (tail)
        tail->next = first;
    else
        m->waiters_.head = first;
    m->waiters_.tail = c->waiters_.tail;
    m->heirs_ += c->waiting_;
    c->waiters_.head = c->waiters_.tail = NULL;
    c->waiting_ = 0;
}

/* Under c's lock: claim c's waiters one by one; those using the mutex the
 * caller (self) holds are queued on it as heirs, with its lock taken and
 * left held (*mp, its mode *pmp), unless its bias would need settling; the
 * others are returned chained, to be woken. */
static struct waiter *cond_walk_heirs(fern_cond *c, void *self, uint32_t tag, fern_mutex **mp,
                                      bool *pmp)
{
    fern_mutex *m = NULL;
    bool looked = false;
    struct waiter *rest = NULL, **rt = &rest, *wt;
    uint32_t nheirs = 0, nseen = 0;
    uintptr_t last = 0;
    while ((wt = waitq_claim_one(&c->waiters_)) != NULL) {
        cond_left(c, wt);
        broadcast_prefetch((uintptr_t)wt, last, nseen++);
        last = (uintptr_t)wt;
        fern_mutex *wm = wt->data;
        if (!looked && LOAD_RELAXED(&wm->owner_) == self) {
            looked = true;
            int mode = bias_mode(&wm->bias_, tag);
            if (mode >= 0) {
                m = wm;
                *pmp = mode;
                qlock(mode, &m->lock_);
            }
        }
        if (wm == m) {
            wt->heir = 1;
            waitq_push(&m->waiters_, wt);
            nheirs++;
        } else {
            *rt = wt;
            rt = &wt->next;
        }
    }
    *rt = NULL;
    if (m)
        m->heirs_ += nheirs;
    *mp = m;
    return rest;
}

int fern_cond_broadcast(fern_cond *c)
{
    if (!c)
        return EINVAL;
    /* Waiters on the mutex the caller holds become its heirs (see the
     * header); the others (none, unless waits used several mutexes) are
     * woken to lock theirs. When every waiter is untimed and uses that
     * mutex (cond_push) the queue moves over whole (cond_splice): a million
     * waiters, each on a cold stack of its own, took 0.06-0.07 s to walk
     * (0.15 s on stacks reused in no address order), all of it before the
     * first heir could run. Otherwise one pass, with m's lock nested in c's
     * (the order a wait takes them in). The mutex must be usable in this
     * operation without settling its bias (that cannot happen
     * mid-operation); if it is not, its waiters are simply woken. */
    struct caller me;
    caller_get(&me);
    void *self = caller_self(&me);
    bool plain = bias_enter(&c->bias_, &me);
    fern_mutex *m;
    bool pm = false;
    struct waiter *rest = NULL;
    int mode;
    qlock(plain, &c->lock_);
    m = c->mutex_;
    if (c->waiters_.head && m && !c->timed_ && LOAD_RELAXED(&m->owner_) == self &&
        (mode = bias_mode(&m->bias_, me.tag)) >= 0) {
        pm = mode;
        qlock(pm, &m->lock_);
        cond_splice(c, m);
    } else {
        rest = cond_walk_heirs(c, self, me.tag, &m, &pm);
    }
    if (m) {
        STORE_RELAXED(&m->handoff_, 1);
        /* We hold m (state 1 or 2); 2 sends our unlock down the slow path. */
        STORE(&m->state_, 2);
        qunlock(pm, &m->lock_);
    }
    qunlock(plain, &c->lock_);
    bias_end(&me);
    waiters_release(rest, 0);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Semaphore                                                                 */
/* ------------------------------------------------------------------------ */

/* A post hands its unit straight to a waiter it wins, so a woken waiter owns
 * a unit and a timed-out one took none (exactly once, whatever the race). */

int fern_sem_init(fern_sem *s, unsigned value)
{
    if (!s || value > FERN_SEM_VALUE_MAX)
        return EINVAL;
    memset(s, 0, sizeof *s);
    s->value_ = value;
    return 0;
}

int fern_sem_destroy(fern_sem *s)
{
    if (!s)
        return EINVAL;
    return queue_destroy(&s->lock_, &s->waiters_, NULL);
}

static int sem_take(fern_sem *s, int64_t deadline, bool try_only)
{
    if (!s || deadline < 0)
        return EINVAL;
    spin_lock(&s->lock_);
    if (s->value_ > 0) {
        STORE_RELAXED(&s->value_, s->value_ - 1);
        spin_unlock(&s->lock_);
        return 0;
    }
    if (try_only || (deadline != FERN_FOREVER && fern_now_ns() >= deadline)) {
        spin_unlock(&s->lock_);
        return try_only ? EAGAIN : ETIMEDOUT;
    }
    int st = queue_wait(&s->waiters_, &s->lock_, NULL, "sem", s, deadline);
    return st == W_WOKEN ? 0 : ETIMEDOUT;
}

int fern_sem_wait(fern_sem *s) { return sem_take(s, FERN_FOREVER, false); }
int fern_sem_trywait(fern_sem *s) { return sem_take(s, FERN_FOREVER, true); }
int fern_sem_timedwait(fern_sem *s, int64_t deadline_ns) { return sem_take(s, deadline_ns, false); }

int fern_sem_post(fern_sem *s)
{
    if (!s)
        return EINVAL;
    spin_lock(&s->lock_);
    struct waiter *wt = waitq_claim_one(&s->waiters_);
    if (!wt) {
        if (s->value_ >= FERN_SEM_VALUE_MAX) {
            spin_unlock(&s->lock_);
            return EOVERFLOW;
        }
        STORE_RELAXED(&s->value_, s->value_ + 1);
    }
    spin_unlock(&s->lock_);
    if (wt)
        waiter_release(wt, 0);
    return 0;
}

unsigned fern_sem_value(fern_sem *s) { return s ? LOAD_RELAXED(&s->value_) : 0; }

/* ------------------------------------------------------------------------ */
/* Reader-writer lock                                                        */
/* ------------------------------------------------------------------------ */

/* Phases alternate so that neither side starves: while a writer waits, new
 * readers queue; a writer's unlock admits every queued reader at once; the
 * last reader out admits one writer. A waker grants the lock on the waiter's
 * behalf (readers_++ or writer_ = its token) before waking it. Each thread
 * remembers which read locks it holds, so unlocking one it does not hold is
 * EPERM rather than silent corruption. */

struct rdheld {
    const void *lock[FERN_RWLOCK_READS_MAX];
    uint32_t n;
};

static __thread struct rdheld plain_rdheld;

static struct rdheld *rdheld_get(bool create)
{
    fern_thread *t = thread_current();
    if (!t)
        return &plain_rdheld;
    if (!t->rdheld && create)
        t->rdheld = calloc(1, sizeof *t->rdheld);
    return t->rdheld;
}

static bool rdheld_has(struct rdheld *h, const void *rw)
{
    for (uint32_t i = 0; h && i < h->n; i++)
        if (h->lock[i] == rw)
            return true;
    return false;
}

static bool rdheld_remove(struct rdheld *h, const void *rw)
{
    for (uint32_t i = 0; h && i < h->n; i++)
        if (h->lock[i] == rw) {
            h->lock[i] = h->lock[--h->n];
            return true;
        }
    return false;
}

int fern_rwlock_init(fern_rwlock *rw)
{
    if (!rw)
        return EINVAL;
    memset(rw, 0, sizeof *rw);
    return 0;
}

int fern_rwlock_destroy(fern_rwlock *rw)
{
    if (!rw)
        return EINVAL;
    /* Held, or a thread blocked: EBUSY. A writer that timed out is still
     * linked until it relocks rw to unlink itself (and maybe admit the
     * readers it held back, who then hold rw): wait for it. A woken waiter
     * was granted the lock before its wake-up, so it shows as a holder. */
    for (unsigned n = 0;; destroy_backoff(&n)) {
        spin_lock(&rw->lock_);
        int rs = waitq_state(&rw->readq_), ws = waitq_state(&rw->writeq_);
        bool held = rw->readers_ || rw->writer_;
        spin_unlock(&rw->lock_);
        if (held || rs == WQ_BLOCKED || ws == WQ_BLOCKED)
            return EBUSY;
        if (rs == WQ_IDLE && ws == WQ_IDLE)
            return 0;
    }
}

/* Under lock_, with no writer: admit every queued reader. Returns the
 * claimed waiters, to release after unlocking. */
static struct waiter *rw_admit_readers(fern_rwlock *rw)
{
    struct waiter *all = waitq_claim_all(&rw->readq_);
    for (struct waiter *wt = all; wt; wt = wt->next)
        rw->readers_++;
    return all;
}

/* Under lock_, with no writer and no readers: admit one writer. */
static struct waiter *rw_admit_writer(fern_rwlock *rw)
{
    struct waiter *wt = waitq_claim_one(&rw->writeq_);
    if (!wt)
        return NULL;
    rw->writers_waiting_--;
    STORE_RELAXED(&rw->writer_, wt->token);
    wt->next = NULL;
    return wt;
}

static int rw_rdlock(fern_rwlock *rw, int64_t deadline, bool try_only)
{
    if (!rw || deadline < 0)
        return EINVAL;
    void *self = self_token();
    if (LOAD_RELAXED(&rw->writer_) == self)
        return try_only ? EBUSY : EDEADLK; /* a try never waits, so cannot deadlock */
    struct rdheld *h = rdheld_get(true);
    if (!h)
        return ENOMEM;
    if (h->n == FERN_RWLOCK_READS_MAX)
        return EAGAIN;
    spin_lock(&rw->lock_);
    if (!rw->writer_ && rw->writers_waiting_ == 0) {
        rw->readers_++;
        spin_unlock(&rw->lock_);
        h->lock[h->n++] = rw;
        return 0;
    }
    if (try_only || (deadline != FERN_FOREVER && fern_now_ns() >= deadline)) {
        spin_unlock(&rw->lock_);
        return try_only ? EBUSY : ETIMEDOUT;
    }
    if (queue_wait(&rw->readq_, &rw->lock_, self, "rwlock (read)", rw, deadline) == W_TIMEDOUT)
        return ETIMEDOUT;
    h = rdheld_get(true); /* the thread may have resumed elsewhere: same table */
    h->lock[h->n++] = rw;
    return 0;
}

static int rw_wrlock(fern_rwlock *rw, int64_t deadline, bool try_only)
{
    if (!rw || deadline < 0)
        return EINVAL;
    void *self = self_token();
    if (LOAD_RELAXED(&rw->writer_) == self || rdheld_has(rdheld_get(false), rw))
        return try_only ? EBUSY : EDEADLK;
    spin_lock(&rw->lock_);
    if (!rw->writer_ && rw->readers_ == 0) {
        STORE_RELAXED(&rw->writer_, self);
        spin_unlock(&rw->lock_);
        return 0;
    }
    if (try_only || (deadline != FERN_FOREVER && fern_now_ns() >= deadline)) {
        spin_unlock(&rw->lock_);
        return try_only ? EBUSY : ETIMEDOUT;
    }
    struct waiter wt;
    waiter_init(&wt);
    wt.token = self;
    rw->writers_waiting_++;
    waitq_push(&rw->writeq_, &wt);
    wait_note("rwlock (write)", rw);
    int st = waiter_wait(&wt, &rw->lock_, deadline);
    wait_note(NULL, NULL);
    if (st == W_WOKEN)
        return 0;
    spin_lock(&rw->lock_);
    waitq_unlink(&wt);
    rw->writers_waiting_--;
    /* Readers may have queued only because this writer waited. */
    struct waiter *admitted = NULL;
    if (!rw->writer_ && rw->writers_waiting_ == 0)
        admitted = rw_admit_readers(rw);
    spin_unlock(&rw->lock_);
    waiters_release(admitted, 0);
    return ETIMEDOUT;
}

int fern_rwlock_rdlock(fern_rwlock *rw) { return rw_rdlock(rw, FERN_FOREVER, false); }
int fern_rwlock_tryrdlock(fern_rwlock *rw) { return rw_rdlock(rw, FERN_FOREVER, true); }
int fern_rwlock_timedrdlock(fern_rwlock *rw, int64_t d) { return rw_rdlock(rw, d, false); }
int fern_rwlock_wrlock(fern_rwlock *rw) { return rw_wrlock(rw, FERN_FOREVER, false); }
int fern_rwlock_trywrlock(fern_rwlock *rw) { return rw_wrlock(rw, FERN_FOREVER, true); }
int fern_rwlock_timedwrlock(fern_rwlock *rw, int64_t d) { return rw_wrlock(rw, d, false); }

int fern_rwlock_unlock(fern_rwlock *rw)
{
    if (!rw)
        return EINVAL;
    void *self = self_token();
    spin_lock(&rw->lock_);
    struct waiter *admitted = NULL;
    if (rw->writer_ == self) {
        STORE_RELAXED(&rw->writer_, NULL);
        if (!waitq_empty(&rw->readq_))
            admitted = rw_admit_readers(rw);
        if (rw->readers_ == 0)
            admitted = rw_admit_writer(rw);
        spin_unlock(&rw->lock_);
        waiters_release(admitted, 0);
        return 0;
    }
    if (rw->readers_ > 0 && rdheld_remove(rdheld_get(false), rw)) {
        if (--rw->readers_ == 0 && !(admitted = rw_admit_writer(rw)))
            admitted = rw_admit_readers(rw);
        spin_unlock(&rw->lock_);
        waiters_release(admitted, 0);
        return 0;
    }
    spin_unlock(&rw->lock_);
    return EPERM;
}

/* ------------------------------------------------------------------------ */
/* Barrier                                                                   */
/* ------------------------------------------------------------------------ */

int fern_barrier_init(fern_barrier *b, unsigned count)
{
    if (!b || count == 0)
        return EINVAL;
    memset(b, 0, sizeof *b);
    b->count_ = count;
    return 0;
}

int fern_barrier_destroy(fern_barrier *b)
{
    if (!b)
        return EINVAL;
    return queue_destroy(&b->lock_, &b->waiters_, NULL);
}

int fern_barrier_wait(fern_barrier *b)
{
    if (!b)
        return EINVAL;
    spin_lock(&b->lock_);
    if (b->count_ == 0) {
        spin_unlock(&b->lock_);
        return EINVAL;
    }
    if (++b->arrived_ == b->count_) {
        b->arrived_ = 0;
        b->round_++;
        struct waiter *all = waitq_claim_all(&b->waiters_);
        spin_unlock(&b->lock_);
        waiters_release(all, 0);
        return FERN_BARRIER_SERIAL_THREAD;
    }
    queue_wait(&b->waiters_, &b->lock_, NULL, "barrier", b, FERN_FOREVER);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Wait group                                                                */
/* ------------------------------------------------------------------------ */

int fern_wg_init(fern_wg *wg)
{
    if (!wg)
        return EINVAL;
    memset(wg, 0, sizeof *wg);
    return 0;
}

int fern_wg_destroy(fern_wg *wg)
{
    if (!wg)
        return EINVAL;
    return queue_destroy(&wg->lock_, &wg->waiters_, &wg->count_);
}

int fern_wg_add(fern_wg *wg, int64_t delta)
{
    if (!wg)
        return EINVAL;
    spin_lock(&wg->lock_);
    int64_t n;
    if (__builtin_add_overflow(wg->count_, delta, &n) || n < 0) {
        spin_unlock(&wg->lock_);
        return EINVAL;
    }
    STORE_RELAXED(&wg->count_, n);
    struct waiter *all = n == 0 ? waitq_claim_all(&wg->waiters_) : NULL;
    spin_unlock(&wg->lock_);
    waiters_release(all, 0);
    return 0;
}

int fern_wg_done(fern_wg *wg) { return fern_wg_add(wg, -1); }

int fern_wg_timedwait(fern_wg *wg, int64_t deadline_ns)
{
    if (!wg || deadline_ns < 0)
        return EINVAL;
    spin_lock(&wg->lock_);
    if (wg->count_ == 0) {
        spin_unlock(&wg->lock_);
        return 0;
    }
    if (deadline_ns != FERN_FOREVER && fern_now_ns() >= deadline_ns) {
        spin_unlock(&wg->lock_);
        return ETIMEDOUT;
    }
    int st = queue_wait(&wg->waiters_, &wg->lock_, NULL, "wait group", wg, deadline_ns);
    return st == W_WOKEN ? 0 : ETIMEDOUT;
}

int fern_wg_wait(fern_wg *wg) { return fern_wg_timedwait(wg, FERN_FOREVER); }

/* ------------------------------------------------------------------------ */
/* Once                                                                      */
/* ------------------------------------------------------------------------ */

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
    queue_wait(&o->waiters_, &o->lock_, NULL, "once", o, FERN_FOREVER);
    return 0;
}
