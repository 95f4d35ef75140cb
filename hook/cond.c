/* SPDX-License-Identifier: MIT */
/*
 * pthread condition variables and C11 cnd_* (the design: lock.h).
 *
 * A private condition variable is fern-hook's own, for green and plain
 * threads alike (glibc's is a protocol of seven words that a second
 * implementation could not join). Its words, in glibc's 48 bytes:
 *   seq   (offset 0)  bumped by every signal and broadcast that finds waiters
 *   nwait (offset 4)  threads inside a wait, from before they release the
 *                     mutex to after they leave the lot
 *   flags (offset 36, glibc's __wrefs) bit 0: process-shared (then the
 *                     object is glibc's, for everyone), bit 1: the clock is
 *                     CLOCK_MONOTONIC; where glibc's init puts them
 * Zeroed memory and PTHREAD_COND_INITIALIZER are a valid private object on
 * CLOCK_REALTIME.
 *
 * Wait: read seq, count in, release the mutex, park in the lot on the
 * object while seq is unchanged, count out, take the mutex again. Signal:
 * if nobody is counted in, nothing; else bump seq, then wake one (broadcast:
 * all). A waiter counts in while it holds the mutex, so a signaller that
 * changed the predicate under the mutex after it sees the count; one whose
 * bump came before the waiter's park makes the park's validation fail (the
 * lot's rule), which is a wake-up. Spurious wake-ups are possible, as POSIX
 * allows. Destroy waits until no thread is inside a wait (glibc's waits
 * for its waiters the same way), so a woken waiter never touches freed
 * memory.
 */
#include "lock.h"

#include <stddef.h>
#include <string.h>
#include <threads.h>

struct lk_cond {
    uint32_t seq;
    uint32_t nwait;
    uint32_t pad[7];
    uint32_t flags;
    uint32_t tail[2];
};
_Static_assert(sizeof(struct lk_cond) == sizeof(pthread_cond_t), "pthread_cond_t's size");
_Static_assert(offsetof(pthread_cond_t, __data.__wrefs) == offsetof(struct lk_cond, flags),
               "glibc's __wrefs");

#define CF_SHARED 1u
#define CF_MONO 2u

static inline struct lk_cond *cv(pthread_cond_t *c) { return (struct lk_cond *)c; }

/* glibc's object (process-shared), or hooking is off for this process. */
static inline int theirs(pthread_cond_t *c)
{
    lk_ready();
    return !lk_own_cond || (__atomic_load_n(&cv(c)->flags, __ATOMIC_RELAXED) & CF_SHARED);
}

int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
    lk_ready();
    int shared = 0;
    clockid_t clk = CLOCK_REALTIME;
    if (a) {
        pthread_condattr_getpshared(a, &shared);
        pthread_condattr_getclock(a, &clk);
    }
    if (!lk_own_cond || shared == PTHREAD_PROCESS_SHARED)
        return lk_real.cond_init(c, a);
    memset(c, 0, sizeof *c);
    cv(c)->flags = clk == CLOCK_MONOTONIC ? CF_MONO : 0;
    return 0;
}

int pthread_cond_destroy(pthread_cond_t *c)
{
    if (theirs(c))
        return lk_real.cond_destroy(c);
    while (__atomic_load_n(&cv(c)->nwait, __ATOMIC_ACQUIRE) != 0)
        lk_yield();
    return 0;
}

static int wake(pthread_cond_t *c, int n)
{
    struct lk_cond *k = cv(c);
    if (__atomic_load_n(&k->nwait, __ATOMIC_SEQ_CST) == 0)
        return 0;
    __atomic_fetch_add(&k->seq, 1, __ATOMIC_SEQ_CST);
    fern__lot_unpark(k, n);
    return 0;
}

int pthread_cond_signal(pthread_cond_t *c)
{
    if (theirs(c))
        return lk_real.cond_signal(c);
    return wake(c, 1);
}

int pthread_cond_broadcast(pthread_cond_t *c)
{
    if (theirs(c))
        return lk_real.cond_broadcast(c);
    return wake(c, INT32_MAX);
}

static int seq_same(const void *addr, void *arg)
{
    return __atomic_load_n(&((const struct lk_cond *)addr)->seq, __ATOMIC_RELAXED) ==
           *(uint32_t *)arg;
}

static int cond_wait(pthread_cond_t *c, pthread_mutex_t *m, int64_t dl)
{
    struct lk_cond *k = cv(c);
    uint32_t s = __atomic_load_n(&k->seq, __ATOMIC_RELAXED);
    __atomic_fetch_add(&k->nwait, 1, __ATOMIC_SEQ_CST);
    int r = lk_mutex_unlock(m);
    if (r != 0) {
        __atomic_fetch_sub(&k->nwait, 1, __ATOMIC_RELEASE);
        return r; /* EPERM: an error-checking mutex the caller does not hold */
    }
    HK_TSAN_ENTER();
    int p = fern__lot_park(k, seq_same, &s, "pthread_cond (fern-hook)", dl);
    HK_TSAN_LEAVE();
    __atomic_fetch_sub(&k->nwait, 1, __ATOMIC_RELEASE); /* the last touch of *c */
    r = lk_mutex_lock(m);
    if (r != 0)
        return r;
    return p == FERN__LOT_TIMEDOUT ? ETIMEDOUT : 0;
}

int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    if (theirs(c))
        return lk_real.cond_wait(c, m);
    return cond_wait(c, m, FERN_FOREVER);
}

int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk,
                           const struct timespec *abs)
{
    if (theirs(c))
        return lk_real.cond_clockwait(c, m, clk, abs);
    int64_t dl;
    int r = lk_deadline(clk, abs, &dl);
    if (r != 0)
        return r;
    return cond_wait(c, m, dl);
}

int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abs)
{
    if (theirs(c))
        return lk_real.cond_timedwait(c, m, abs);
    clockid_t clk = __atomic_load_n(&cv(c)->flags, __ATOMIC_RELAXED) & CF_MONO ? CLOCK_MONOTONIC
                                                                              : CLOCK_REALTIME;
    return pthread_cond_clockwait(c, m, clk, abs);
}

/* ---- C11: glibc's cnd_* call its internal pthread_cond_* ---- */

int cnd_init(cnd_t *c) { return lk_thrd(pthread_cond_init((pthread_cond_t *)c, NULL)); }
void cnd_destroy(cnd_t *c) { pthread_cond_destroy((pthread_cond_t *)c); }
int cnd_signal(cnd_t *c) { return lk_thrd(pthread_cond_signal((pthread_cond_t *)c)); }
int cnd_broadcast(cnd_t *c) { return lk_thrd(pthread_cond_broadcast((pthread_cond_t *)c)); }
int cnd_wait(cnd_t *c, mtx_t *m)
{
    return lk_thrd(pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}
int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts)
{
    return lk_thrd(pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, ts));
}
