/* SPDX-License-Identifier: MIT */
/*
 * pthread read-write locks (the design: lock.h).
 *
 * A private read-write lock is fern-hook's own, for green and plain threads
 * alike. Its words, in glibc's 56 bytes:
 *   state  (offset 0)   W (bit 31): a writer holds it; WW (bit 30): a
 *                       writer waits; RW (bit 29): a reader waits; the
 *                       low bits: readers holding it
 *   owner  (offset 24, glibc's __cur_writer) the writer's id (kernel thread
 *                       id, or a green thread's fern__lock_owner_id), for
 *                       EDEADLK
 *   shared (offset 28)  nonzero: process-shared, glibc's object, for everyone
 *   kind   (offset 48)  PTHREAD_RWLOCK_PREFER_*: with the writer-preferring
 *                       kind a waiting writer holds off new readers; the
 *                       default prefers readers (and so allows a reader to
 *                       lock again while a writer waits), as glibc
 * Zeroed memory and both static initialisers are valid.
 *
 * A thread that must wait sets its wait bit and parks in the lot while the
 * lock still excludes it and the bit is still set. The lock is handed over
 * (as glibc's is): the unlock that would leave it free while parties wait
 * chooses, under the lot's lock, who holds it next, stores the word for
 * them and wakes only them; they return holding it. A writer's unlock
 * goes by the oldest party queued: if a writer, it alone gets the lock;
 * if a reader, every waiting reader does (the writer-preferring kind: the
 * oldest waiting writer first, if any, else every reader). The last
 * reader's unlock hands it to the oldest waiting writer. So a writer
 * waiting behind readers gets in when they drain, before readers let in
 * afterwards (the default kind still lets a reader join readers that hold
 * the lock while a writer waits, as glibc's: a thread may take its read
 * lock again, and a reader may wait for another reader), writers queued
 * before any reader follow one another, readers queued behind a writer
 * wait for no writer queued after them, and nobody wakes only to find the
 * lock taken again. The last reader first turns its hold into a writer's
 * (W, no owner) by CAS, so that no reader joins while it chooses.
 *
 * The wait bits stay set while anyone is queued: only a hand-over clears
 * them, under the lot's lock, and it sets again those of parties it left
 * queued. A party that set its bit but had not yet validated when the bit
 * was cleared sees it cleared and looks again (the lot's rule); one that
 * timed out may leave its bit set, which costs one slow unlock.
 */
#include "lock.h"

#include <stddef.h>
#include <string.h>

#define RW_W 0x80000000u
#define RW_WW 0x40000000u
#define RW_RW 0x20000000u
#define RW_READERS 0x1fffffffu

struct lk_rw {
    uint32_t state;
    uint32_t pad[5];
    int32_t owner;
    int32_t shared;
    uint32_t pad2[4];
    uint32_t kind;
    uint32_t tail;
};
_Static_assert(sizeof(struct lk_rw) == sizeof(pthread_rwlock_t), "pthread_rwlock_t's size");
_Static_assert(offsetof(pthread_rwlock_t, __data.__cur_writer) == offsetof(struct lk_rw, owner),
               "glibc's __cur_writer");
_Static_assert(offsetof(pthread_rwlock_t, __data.__shared) == offsetof(struct lk_rw, shared),
               "glibc's __shared");
_Static_assert(offsetof(pthread_rwlock_t, __data.__flags) == offsetof(struct lk_rw, kind),
               "glibc's __flags");

static inline struct lk_rw *rw(pthread_rwlock_t *l) { return (struct lk_rw *)l; }

static inline int theirs(pthread_rwlock_t *l)
{
    lk_ready();
    return !lk_own || __atomic_load_n(&rw(l)->shared, __ATOMIC_RELAXED) != 0;
}

/* The caller's id as a writer: a green thread's, or the kernel thread's. */
static __thread int plain_tid __attribute__((tls_model("initial-exec")));
static int self_id(void)
{
    int id = lk_plain() ? 0 : fern__lock_owner_id();
    if (id)
        return id;
    if (!plain_tid) /* a plain thread never changes kernel thread */
        plain_tid = (int)hk_sys6(SYS_gettid, 0, 0, 0, 0, 0, 0);
    return plain_tid;
}

int pthread_rwlock_init(pthread_rwlock_t *l, const pthread_rwlockattr_t *a)
{
    lk_ready();
    int shared = 0, kind = PTHREAD_RWLOCK_DEFAULT_NP;
    if (a) {
        pthread_rwlockattr_getpshared(a, &shared);
        pthread_rwlockattr_getkind_np(a, &kind);
    }
    if (!lk_own || shared == PTHREAD_PROCESS_SHARED)
        return lk_real.rw_init(l, a);
    memset(l, 0, sizeof *l);
    rw(l)->kind = (uint32_t)kind;
    return 0;
}

int pthread_rwlock_destroy(pthread_rwlock_t *l)
{
    if (theirs(l))
        return lk_real.rw_destroy(l);
    return 0; /* as glibc: nothing to release */
}

struct rw_need {
    uint32_t excl;   /* the bits that keep the caller out */
    uint32_t bit;    /* its wait bit: RW_RW a reader, RW_WW a writer */
    int id;          /* a writer's id, for the owner word */
    int granted;     /* set by the unlock that handed the lock over */
};

static int still_excluded(const void *addr, void *arg)
{
    uint32_t s = __atomic_load_n(&((const struct lk_rw *)addr)->state, __ATOMIC_RELAXED);
    const struct rw_need *n = arg;
    return (s & n->excl) && (s & n->bit);
}

static void release_to_next(struct lk_rw *k, int first);

/* A party that gave up may leave its wait bit set: harmless while someone
 * holds the lock (the unlock hands it over and recomputes the bits), but
 * on a free lock a writer's stale bit would keep out the readers of the
 * writer-preferring kind. So if the lock is free and bits are set, take it
 * as a writer and hand it over to whoever is queued (or to nobody). */
static void settle(struct lk_rw *k)
{
    uint32_t s = __atomic_load_n(&k->state, __ATOMIC_RELAXED);
    while (!(s & (RW_W | RW_READERS)) && (s & (RW_WW | RW_RW)))
        if (__atomic_compare_exchange_n(&k->state, &s, s | RW_W, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED)) {
            release_to_next(k, RW_WW);
            return;
        }
}

/* Park until the bits in `excl` may be clear, having set `bit`: 1 if the
 * lock was handed to the caller, 0 to look again, or ETIMEDOUT. */
static int wait_for(struct lk_rw *k, uint32_t excl, uint32_t bit, int id, int64_t dl)
{
    uint32_t s = __atomic_load_n(&k->state, __ATOMIC_RELAXED);
    for (;;) {
        if (!(s & excl))
            return 0; /* look again */
        if (__atomic_compare_exchange_n(&k->state, &s, s | bit, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED))
            break;
    }
    struct rw_need need = {excl, bit, id, 0};
    HK_TSAN_ENTER();
    int r = fern__lot_park(k, still_excluded, &need, "pthread_rwlock (fern-hook)", dl);
    HK_TSAN_LEAVE();
    int granted = __atomic_load_n(&need.granted, __ATOMIC_ACQUIRE);
    if (r == FERN__LOT_TIMEDOUT)
        settle(k);
    if (r == FERN__LOT_WOKEN && granted) {
        /* Pairs with the hand-over's exchange: what the last holder did
         * happens before what the caller does now. */
        (void)__atomic_load_n(&k->state, __ATOMIC_ACQUIRE);
        return 1;
    }
    return r == FERN__LOT_TIMEDOUT ? ETIMEDOUT : 0;
}

static int rdlock(pthread_rwlock_t *l, int try, int64_t dl)
{
    struct lk_rw *k = rw(l);
    int pw = __atomic_load_n(&k->kind, __ATOMIC_RELAXED) == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP;
    uint32_t excl = RW_W | (pw ? RW_WW : 0);
    for (;;) {
        uint32_t s = __atomic_load_n(&k->state, __ATOMIC_RELAXED);
        if (!(s & excl)) {
            if ((s & RW_READERS) == RW_READERS)
                return EAGAIN;
            if (__atomic_compare_exchange_n(&k->state, &s, s + 1, false, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED))
                return 0;
            continue;
        }
        if ((s & RW_W) && __atomic_load_n(&k->owner, __ATOMIC_RELAXED) == self_id())
            return EDEADLK;
        if (try)
            return EBUSY;
        int r = wait_for(k, excl, RW_RW, 0, dl);
        if (r)
            return r == 1 ? 0 : r;
    }
}

static int wrlock(pthread_rwlock_t *l, int try, int64_t dl)
{
    struct lk_rw *k = rw(l);
    int id = self_id();
    for (;;) {
        uint32_t s = __atomic_load_n(&k->state, __ATOMIC_RELAXED);
        if (!(s & (RW_W | RW_READERS))) {
            /* Keeps WW: other writers may wait; the unlock wakes them. */
            if (__atomic_compare_exchange_n(&k->state, &s, s | RW_W, false, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED)) {
                __atomic_store_n(&k->owner, id, __ATOMIC_RELAXED);
                return 0;
            }
            continue;
        }
        if ((s & RW_W) && __atomic_load_n(&k->owner, __ATOMIC_RELAXED) == id)
            return EDEADLK;
        if (try)
            return EBUSY;
        int r = wait_for(k, RW_W | RW_READERS, RW_WW, id, dl);
        if (r)
            return r == 1 ? 0 : r; /* handed over: the owner word is the caller's */
    }
}

int pthread_rwlock_rdlock(pthread_rwlock_t *l)
{
    if (theirs(l))
        return lk_real.rw_rdlock(l);
    return rdlock(l, 0, FERN_FOREVER);
}

int pthread_rwlock_tryrdlock(pthread_rwlock_t *l)
{
    if (theirs(l))
        return lk_real.rw_tryrdlock(l);
    return rdlock(l, 1, FERN_FOREVER);
}

int pthread_rwlock_clockrdlock(pthread_rwlock_t *l, clockid_t clk, const struct timespec *abs)
{
    if (theirs(l))
        return lk_real.rw_clockrdlock(l, clk, abs);
    int r = rdlock(l, 1, FERN_FOREVER);
    if (r != EBUSY)
        return r;
    int64_t dl;
    if ((r = lk_deadline(clk, abs, &dl)) != 0)
        return r;
    return rdlock(l, 0, dl);
}

int pthread_rwlock_timedrdlock(pthread_rwlock_t *l, const struct timespec *abs)
{
    if (theirs(l))
        return lk_real.rw_timedrdlock(l, abs);
    return pthread_rwlock_clockrdlock(l, CLOCK_REALTIME, abs);
}

int pthread_rwlock_wrlock(pthread_rwlock_t *l)
{
    if (theirs(l))
        return lk_real.rw_wrlock(l);
    return wrlock(l, 0, FERN_FOREVER);
}

int pthread_rwlock_trywrlock(pthread_rwlock_t *l)
{
    if (theirs(l))
        return lk_real.rw_trywrlock(l);
    return wrlock(l, 1, FERN_FOREVER);
}

int pthread_rwlock_clockwrlock(pthread_rwlock_t *l, clockid_t clk, const struct timespec *abs)
{
    if (theirs(l))
        return lk_real.rw_clockwrlock(l, clk, abs);
    int r = wrlock(l, 1, FERN_FOREVER);
    if (r != EBUSY)
        return r;
    int64_t dl;
    if ((r = lk_deadline(clk, abs, &dl)) != 0)
        return r;
    return wrlock(l, 0, dl);
}

int pthread_rwlock_timedwrlock(pthread_rwlock_t *l, const struct timespec *abs)
{
    if (theirs(l))
        return lk_real.rw_timedwrlock(l, abs);
    return pthread_rwlock_clockwrlock(l, CLOCK_REALTIME, abs);
}

/* The hand-over (lot_unpark_filter's chooser, under the lot's lock): the
 * caller holds the lock as a writer (W set; a last reader turned its hold
 * into that), and leaves it to whoever this chooses. */
struct rw_pass {
    struct lk_rw *k;
    int first;        /* RW_RW: readers first; RW_WW: the oldest writer first;
                       * 0: the kind of the oldest party queued */
    int oldest;       /* that kind (SEE), 0: nobody seen yet */
    int mode;         /* what the PICK pass takes: RW_RW, RW_WW, 0 (not yet chosen) */
    int tried;        /* the modes a PICK pass has run with */
    unsigned nr, nw;  /* queued readers and writers (SEE) */
    unsigned gr;      /* readers handed the lock */
    int gw;           /* the writer handed it (its id), 0: none */
};

static int hand_over(void *arg, int phase, void *token)
{
    struct rw_pass *p = arg;
    struct rw_need *n = token;
    switch (phase) {
    case FERN__LOT_SEE:
        if (!p->oldest)
            p->oldest = (int)n->bit;
        if (n->bit == RW_RW)
            p->nr++;
        else
            p->nw++;
        return 0;
    case FERN__LOT_PICK:
        if (!p->mode) {
            if (!p->first)
                p->first = p->oldest;
            int other = p->first == RW_RW ? RW_WW : RW_RW;
            p->mode = (p->first == RW_RW ? p->nr : p->nw) ? p->first : other;
            p->tried |= p->mode;
        }
        if (n->bit != (uint32_t)p->mode)
            return 0;
        return p->mode == RW_RW || !p->gw;
    case FERN__LOT_TAKEN:
        __atomic_store_n(&n->granted, 1, __ATOMIC_RELEASE);
        if (n->bit == RW_RW)
            p->gr++;
        else
            p->gw = n->id;
        return 0;
    }
    /* DONE. Nobody of the chosen kind could be claimed (their waits had
     * just timed out): try the other kind. */
    if (!p->gr && !p->gw) {
        int other = p->mode == RW_RW ? RW_WW : RW_RW;
        if (!(p->tried & other) && (other == RW_RW ? p->nr : p->nw)) {
            p->mode = other;
            p->tried |= other;
            return 1;
        }
    }
    /* The parties left queued keep their bits (a timed-out one counted
     * among them leaves a stale bit: one more slow unlock). */
    uint32_t bits = (p->nr > p->gr ? RW_RW : 0) | (p->nw > (p->gw ? 1u : 0u) ? RW_WW : 0);
    struct lk_rw *k = p->k;
    __atomic_store_n(&k->owner, p->gw, __ATOMIC_RELAXED);
    /* The caller holds W: nobody else changes the word but to add a wait
     * bit, and one who does looks again (it is not queued yet). */
    __atomic_exchange_n(&k->state, (p->gw ? RW_W : p->gr) | bits, __ATOMIC_SEQ_CST);
    return 0;
}

static void release_to_next(struct lk_rw *k, int first)
{
    struct rw_pass p = {.k = k, .first = first};
    fern__lot_unpark_filter(k, hand_over, &p);
}

int pthread_rwlock_unlock(pthread_rwlock_t *l)
{
    if (theirs(l))
        return lk_real.rw_unlock(l);
    struct lk_rw *k = rw(l);
    uint32_t s = __atomic_load_n(&k->state, __ATOMIC_RELAXED);
    int pw = __atomic_load_n(&k->kind, __ATOMIC_RELAXED) == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP;
    if (s & RW_W) {
        if (__atomic_load_n(&k->owner, __ATOMIC_RELAXED) != self_id())
            return EPERM;
        if (s == RW_W) {
            __atomic_store_n(&k->owner, 0, __ATOMIC_RELAXED);
            if (__atomic_compare_exchange_n(&k->state, &s, 0, false, __ATOMIC_SEQ_CST,
                                            __ATOMIC_RELAXED))
                return 0;
        }
        /* Parties wait: hand the lock over (the owner word with it). */
        release_to_next(k, pw ? RW_WW : 0);
        return 0;
    }
    for (;;) {
        if (!(s & RW_READERS))
            return EPERM; /* not locked */
        uint32_t n;
        if ((s & RW_READERS) > 1 || !(s & (RW_WW | RW_RW)))
            n = s - 1; /* not the last, or nobody waits */
        else
            n = RW_W | (s & (RW_WW | RW_RW)); /* the last: hold it while choosing */
        if (__atomic_compare_exchange_n(&k->state, &s, n, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED)) {
            if (n & RW_W)
                release_to_next(k, RW_WW);
            return 0;
        }
    }
}
