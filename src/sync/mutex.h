/* SPDX-License-Identifier: MIT */
/*
 * What mutex.c and cond.c share: the mode-taking accessors, the lock and
 * release paths inline (a condition wait releases and retakes its mutex on
 * its own fast path), heirs (a broadcast's waiters moved onto the mutex),
 * and the prefetching of a hand-off chain. The slow halves are in mutex.c.
 */
#ifndef FERN_SYNC_MUTEX_H
#define FERN_SYNC_MUTEX_H

#include "sync/sync.h"

#define STARVE_NS 1000000 /* a waiter queued this long turns on hand-off */

int mutex_lock_slow(fern_mutex *m, int64_t deadline, bool counted);
int mutex_lock_settle(fern_mutex *m, int64_t deadline, bool counted);
void mutex_wake(fern_mutex *m, bool plain);
int mutex_release_slow(fern_mutex *m, bool plain, void *self);

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

/* Whether wt, queued on m, is an heir: one a broadcast's walk flagged, or
 * one it spliced over with its whole condition queue, whose q field still
 * names that queue (fern_cond_broadcast). */
static inline bool waiter_is_heir(const fern_mutex *m, const struct waiter *wt)
{
    return wt->heir || wt->q != &m->waiters_;
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

/* Free m, held by the caller (no hand-off): the CAS 1 -> 0, else the
 * queue's turn. */
static inline __attribute__((always_inline)) void mutex_free(fern_mutex *m, bool plain)
{
    STORE_RELAXED(&m->owner_, NULL);
    if (unlikely(!cas_p(plain, &m->state_, 1, 0)))
        mutex_wake(m, plain);
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

#endif
