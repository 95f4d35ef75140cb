/* SPDX-License-Identifier: MIT */
/*
 * fern_cond, for green and plain threads alike (its mutex side: mutex.c,
 * mutex.h).
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
 * Fast paths: fern_cond_signal keeps its common case (the object's mode
 * settled, at most a solo waiter to wake) free of calls but tail calls and
 * the final wake-up; a condition wait of a green thread without a deadline
 * is a copy of its own (cond_wait), parking inline.
 *
 * Memory ordering: the cond's queue and heirs_ are under lock_, as the
 * mutex's (mutex.c).
 */
#include "sync/mutex.h"
#include "sched/hibernate.h"

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
 * condition waiter is solo unless timed or cancellable (waiter_wait; a
 * green thread's wait is cancellable unless shielded: sync/wait.h). */
static inline void cond_left(fern_cond *c, const struct waiter *wt)
{
    c->waiting_--;
    c->timed_ -= wt->p->solo != SOLO_LOCKED;
}

/* The thread is no broadcast's heir any more (HN_HEIR: cond_mark_heir). */
static inline void cond_heir_done(fern_thread *t)
{
    if (unlikely(LOAD_RELAXED(&t->hib_no) & HN_HEIR))
        __atomic_fetch_and(&t->hib_no, (uint8_t)~HN_HEIR, __ATOMIC_RELAXED);
}

/* fern_cond_timedwait after its argument checks, for the caller me, whose
 * green thread is t (NULL for a plain thread). Inlined three times: for
 * the common wait, a green thread's without a deadline and without
 * hibernation, with all known (no test of t, of the deadline or of `heap`
 * is left in it), for the others, and for a green thread's under
 * hibernation, whose waiter record is `hw`, on the heap (`heap` true; it
 * is freed here), not on its stack: a broadcast reads every waiter and a
 * mutex's hand-off each heir's, and a read of a hibernated stack faults
 * and restores it in the reader, serially. With the record off the stack
 * nobody but the thread touches its stack, which its own resume restores
 * (hib_resume, in batches with its parked neighbours). fern__io_park keeps
 * its records off the stack so too (io/iohook.c). */
static inline __attribute__((always_inline)) int cond_wait(fern_cond *c, fern_mutex *m,
                                                           int64_t deadline_ns, struct caller me,
                                                           fern_thread *t, bool heap,
                                                           struct waiter *hw)
{
    void *self = token_of(t); /* the same after the park */
    bool pc, pm;
    bias_enter2(&c->bias_, &pc, &m->bias_, &pm, &me);
    if (LOAD_RELAXED(&m->owner_) != self) {
        bias_end(&me);
        if (heap)
            free(hw);
        return EPERM;
    }
    struct waiter local, *wt = heap ? hw : &local;
    qlock(pc, &c->lock_);
    /* Unlock m only once queued (under c's lock): a signal after the
     * unlock must find us. m's lock and c's lock are never nested the
     * other way round. */
    if (unlikely(!waiter_init_cancellable(wt, t))) {
        /* Cancelled: m was never released. */
        qunlock(pc, &c->lock_);
        bias_end(&me);
        if (heap)
            free(wt);
        return ECANCELED;
    }
    wt->token = self;
    wt->data = m; /* a broadcast may move us onto m's queue */
    /* A cancellable waiter (SOLO_CAS when untimed, wait.h) is counted as
     * timed: it may leave c's queue by itself too. */
    cond_push(c, wt, m, deadline_ns != FERN_FOREVER || wt->p != &wt->own);
    /* Count ourselves in m until we hold it again (the destroy rule). */
    users_add(pm, m, 1, true);
    mutex_release_owned(m, pm, self);
    wait_note_t(t, "cond", c);
    /* Ends the operation. */
    int st = waiter_wait_as(wt, t, pc ? NULL : &c->lock_, deadline_ns);
    wait_note_t(t, NULL, NULL);
    if (heap)
        cond_heir_done(t);
    /* W_WOKEN, W_TIMEDOUT or W_CANCELED: one compare for the last two. */
    _Static_assert(W_TIMEDOUT > W_WOKEN && W_CANCELED > W_WOKEN, "the wait's failures");
    if (unlikely(st > W_WOKEN)) {
        caller_get(&me);
        pc = bias_enter(&c->bias_, &me);
        qlock(pc, &c->lock_);
        waitq_unlink(wt);
        cond_left(c, wt);
        qunlock(pc, &c->lock_);
        bias_end(&me);
        if (heap)
            free(wt);
        /* Not a cancellation point: a cancelled waiter takes m back first. */
        mutex_lock(m, FERN_FOREVER, true);
        return st == W_TIMEDOUT ? ETIMEDOUT : ECANCELED;
    }
    bool handed = wt->p->result == 1;
    if (heap)
        free(wt);
    if (unlikely(handed)) {
        /* Moved to m by a broadcast and handed m: we own it. */
        caller_get(&me);
        pm = bias_enter(&m->bias_, &me);
        users_add(pm, m, -1, true);
        bias_end(&me);
        return 0;
    }
    mutex_lock(m, FERN_FOREVER, true);
    return 0;
}

static __attribute__((noinline)) int cond_wait_stack(fern_cond *c, fern_mutex *m,
                                                     int64_t deadline_ns, struct caller me)
{
    return cond_wait(c, m, deadline_ns, me, caller_thread(&me), false, NULL);
}

/* A green thread's wait under hibernation: its record on the heap. If the
 * allocation fails the record goes on the stack as usual (a touch
 * restores it). */
static __attribute__((noinline)) int cond_wait_heap(fern_cond *c, fern_mutex *m,
                                                    int64_t deadline_ns, struct caller me)
{
    struct waiter *hw = malloc(sizeof *hw);
    if (unlikely(!hw))
        return cond_wait_stack(c, m, deadline_ns, me);
    return cond_wait(c, m, deadline_ns, me, caller_thread(&me), true, hw);
}

/* The waits but the common one, each by a tail call, so that a hibernated
 * stack holds one frame of cond_wait's. */
static __attribute__((noinline)) int cond_wait_other(fern_cond *c, fern_mutex *m,
                                                     int64_t deadline_ns, struct caller me)
{
    if (caller_thread(&me) && LOAD_RELAXED(&hib_on))
        return cond_wait_heap(c, m, deadline_ns, me);
    return cond_wait_stack(c, m, deadline_ns, me);
}

int fern_cond_timedwait(fern_cond *c, fern_mutex *m, int64_t deadline_ns)
{
    if (!c || !m || deadline_ns < 0)
        return EINVAL;
    struct caller me;
    caller_get(&me);
    fern_thread *t = caller_thread(&me);
    if (likely(t != NULL) && deadline_ns == FERN_FOREVER && likely(!LOAD_RELAXED(&hib_on)))
        return cond_wait(c, m, FERN_FOREVER, me, t, false, NULL);
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
    /* The common case, whatever the first waiter's kind: waitq_claim_one
     * claims without a call. */
    struct waiter *wt = waitq_claim_one(&c->waiters_);
    if (wt)
        cond_left(c, wt);
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

/* Under c's lock, with hibernation on: wt's thread is about to be queued
 * on its mutex as an heir, to run once the heirs before it have (a million
 * of them drain over seconds). The monitor leaves it alone meanwhile
 * (HN_HEIR; the thread clears it when its wait returns): hibernated behind
 * the broadcast, it would be restored again at its hand-off. A thread
 * hibernated already stays so, to be restored by its own resume. */
static inline void cond_mark_heir(const struct waiter *wt)
{
    fern_thread *t = wt->p->thread;
    if (t)
        __atomic_fetch_or(&t->hib_no, HN_HEIR, __ATOMIC_RELAXED);
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
    /* Under hibernation the walk the splice spares is made after all, to
     * mark the heirs (their records are on the heap then: cond_wait). */
    if (LOAD_RELAXED(&hib_on))
        for (const struct waiter *wt = first; wt; wt = wt->next)
            cond_mark_heir(wt);
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
    bool hib = LOAD_RELAXED(&hib_on);
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
            if (hib)
                cond_mark_heir(wt);
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
     * woken to lock theirs. When every waiter is untimed, cannot be
     * cancelled (a plain thread's, or a shielded green one's: a cancelled
     * waiter leaves the queue by itself, as a timed one does) and uses that
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

#if !ARCH_JUMP_RETURN
/* Where switch.S has no jump_return trampolines (arch.h: ARCH_JUMP_RETURN),
 * the public call is a plain call of its body. */
int fern_cond_wait(fern_cond *c, fern_mutex *m) { return fern_cond_wait_body(c, m); }
#endif
