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
 * lock still excludes it and the bit is still set. An unlock that leaves
 * the lock free of writers (and, for a writer, of readers) clears both
 * wait bits and wakes everyone parked on it; those that cannot get in set
 * their bit again. The bit is cleared before the wake-up (the lot's rule),
 * so a waiter that validated before it is found, and one after sees the
 * cleared bit and looks again.
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
    uint32_t excl; /* the bits that keep the caller out */
    uint32_t bit;  /* its wait bit */
};

static int still_excluded(const void *addr, void *arg)
{
    uint32_t s = __atomic_load_n(&((const struct lk_rw *)addr)->state, __ATOMIC_RELAXED);
    const struct rw_need *n = arg;
    return (s & n->excl) && (s & n->bit);
}

/* Park until the bits in `excl` may be clear, having set `bit`: 0, or
 * ETIMEDOUT. */
static int wait_for(struct lk_rw *k, uint32_t excl, uint32_t bit, int64_t dl)
{
    uint32_t s = __atomic_load_n(&k->state, __ATOMIC_RELAXED);
    for (;;) {
        if (!(s & excl))
            return 0; /* look again */
        if (__atomic_compare_exchange_n(&k->state, &s, s | bit, false, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED))
            break;
    }
    struct rw_need need = {excl, bit};
    HK_TSAN_ENTER();
    int r = fern__lot_park(k, still_excluded, &need, "pthread_rwlock (fern-hook)", dl);
    HK_TSAN_LEAVE();
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
        if (wait_for(k, excl, RW_RW, dl) == ETIMEDOUT)
            return ETIMEDOUT;
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
        if (wait_for(k, RW_W | RW_READERS, RW_WW, dl) == ETIMEDOUT)
            return ETIMEDOUT;
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

int pthread_rwlock_unlock(pthread_rwlock_t *l)
{
    if (theirs(l))
        return lk_real.rw_unlock(l);
    struct lk_rw *k = rw(l);
    uint32_t s = __atomic_load_n(&k->state, __ATOMIC_RELAXED), n;
    if (s & RW_W) {
        if (__atomic_load_n(&k->owner, __ATOMIC_RELAXED) != self_id())
            return EPERM;
        __atomic_store_n(&k->owner, 0, __ATOMIC_RELAXED);
        s = __atomic_exchange_n(&k->state, 0, __ATOMIC_SEQ_CST);
    } else {
        do {
            if (!(s & RW_READERS))
                return EPERM; /* not locked */
            n = s - 1;
            if (!(n & RW_READERS))
                n &= ~(RW_WW | RW_RW); /* the last reader: wake whoever waits */
        } while (!__atomic_compare_exchange_n(&k->state, &s, n, false, __ATOMIC_SEQ_CST,
                                              __ATOMIC_RELAXED));
        if (n & RW_READERS)
            return 0;
    }
    if (s & (RW_WW | RW_RW))
        fern__lot_unpark(k, INT32_MAX);
    return 0;
}
