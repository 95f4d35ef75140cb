/* SPDX-License-Identifier: MIT */
/*
 * POSIX semaphores (the design: lock.h).
 *
 * A private semaphore is fern-hook's own, for green and plain threads
 * alike, in glibc's own layout of sem_t on 64-bit targets: one 64-bit word
 * at offset 0, the value in its low half and the count of waiters in its
 * high half, and at offset 8 glibc's `private` (0 for a private semaphore,
 * 128 for a process-shared one: sem_init(s, 1, v) and sem_open). A
 * process-shared semaphore stays glibc's, for everyone: another process
 * may use it without fern-hook. sem_getvalue reads the same word as
 * glibc's; sem_destroy, as glibc's, has nothing to release.
 *
 * Wait: take a unit if the value is positive; else count in as a waiter
 * and park in the lot while the value is 0, then try again. Post: add a
 * unit; if the word counted waiters, wake one. The unit is added before
 * the wake-up (the lot's rule). Errors come back in errno, as from glibc:
 * EINVAL, EAGAIN (trywait), ETIMEDOUT, EOVERFLOW.
 */
#include "lock.h"

#include <limits.h>

struct lk_sem {
    uint64_t data;
    int32_t private_;
    int32_t pad;
};
_Static_assert(sizeof(struct lk_sem) <= sizeof(sem_t), "sem_t's size");

#define SEM_VALUE 0xffffffffull
#define SEM_WAITER (1ull << 32)

static inline struct lk_sem *sm(sem_t *s) { return (struct lk_sem *)s; }

static inline int theirs(sem_t *s)
{
    lk_ready();
    return !lk_own || __atomic_load_n(&sm(s)->private_, __ATOMIC_RELAXED) != 0;
}

static int fail(int e)
{
    hk_set_errno(e);
    return -1;
}

int sem_init(sem_t *s, int pshared, unsigned value)
{
    lk_ready();
    if (!lk_own || pshared)
        return lk_real.sem_init(s, pshared, value);
    if (value > SEM_VALUE_MAX)
        return fail(EINVAL);
    __atomic_store_n(&sm(s)->data, (uint64_t)value, __ATOMIC_RELAXED);
    sm(s)->private_ = 0;
    sm(s)->pad = 0;
    return 0;
}

int sem_destroy(sem_t *s)
{
    if (theirs(s))
        return lk_real.sem_destroy(s);
    return 0;
}

int sem_getvalue(sem_t *restrict s, int *restrict v)
{
    if (theirs(s))
        return lk_real.sem_getvalue(s, v);
    *v = (int)(__atomic_load_n(&sm(s)->data, __ATOMIC_RELAXED) & SEM_VALUE);
    return 0;
}

static inline int take(struct lk_sem *k, uint64_t *d)
{
    while (*d & SEM_VALUE)
        if (__atomic_compare_exchange_n(&k->data, d, *d - 1, false, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return 1;
    return 0;
}

static int zero(const void *addr, void *arg)
{
    (void)arg;
    return (__atomic_load_n(&((const struct lk_sem *)addr)->data, __ATOMIC_RELAXED) & SEM_VALUE) ==
           0;
}

/* 0 or an errno value. */
static int sem_take(sem_t *s, int64_t dl)
{
    struct lk_sem *k = sm(s);
    uint64_t d = __atomic_load_n(&k->data, __ATOMIC_RELAXED);
    if (take(k, &d))
        return 0;
    __atomic_fetch_add(&k->data, SEM_WAITER, __ATOMIC_SEQ_CST);
    int r = 0;
    HK_TSAN_ENTER();
    for (;;) {
        d = __atomic_load_n(&k->data, __ATOMIC_RELAXED);
        /* A unit taken and the waiter count dropped in one step. */
        int got = 0;
        while (d & SEM_VALUE) {
            if (__atomic_compare_exchange_n(&k->data, &d, d - 1 - SEM_WAITER, false,
                                            __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
                got = 1;
                break;
            }
        }
        if (got)
            break;
        if (fern__lot_park(k, zero, NULL, "sem_t (fern-hook)", dl) == FERN__LOT_TIMEDOUT) {
            d = __atomic_load_n(&k->data, __ATOMIC_RELAXED);
            if (take(k, &d)) /* a unit came as the time ran out: keep it */
                ;
            else
                r = ETIMEDOUT;
            __atomic_fetch_sub(&k->data, SEM_WAITER, __ATOMIC_RELAXED);
            break;
        }
    }
    HK_TSAN_LEAVE();
    return r;
}

int sem_wait(sem_t *s)
{
    if (theirs(s))
        return lk_real.sem_wait(s);
    return sem_take(s, FERN_FOREVER);
}

int sem_trywait(sem_t *s)
{
    if (theirs(s))
        return lk_real.sem_trywait(s);
    uint64_t d = __atomic_load_n(&sm(s)->data, __ATOMIC_RELAXED);
    return take(sm(s), &d) ? 0 : fail(EAGAIN);
}

int sem_clockwait(sem_t *restrict s, clockid_t clk, const struct timespec *restrict abs)
{
    if (theirs(s))
        return lk_real.sem_clockwait(s, clk, abs);
    uint64_t d = __atomic_load_n(&sm(s)->data, __ATOMIC_RELAXED);
    if (take(sm(s), &d))
        return 0;
    int64_t dl;
    int r = lk_deadline(clk, abs, &dl);
    if (r == 0)
        r = sem_take(s, dl);
    return r ? fail(r) : 0;
}

int sem_timedwait(sem_t *restrict s, const struct timespec *restrict abs)
{
    if (theirs(s))
        return lk_real.sem_timedwait(s, abs);
    return sem_clockwait(s, CLOCK_REALTIME, abs);
}

int sem_post(sem_t *s)
{
    if (theirs(s))
        return lk_real.sem_post(s);
    struct lk_sem *k = sm(s);
    uint64_t d = __atomic_load_n(&k->data, __ATOMIC_RELAXED);
    do {
        if ((d & SEM_VALUE) == SEM_VALUE_MAX)
            return fail(EOVERFLOW);
    } while (!__atomic_compare_exchange_n(&k->data, &d, d + 1, false, __ATOMIC_SEQ_CST,
                                          __ATOMIC_RELAXED));
    if (d >> 32)
        fern__lot_unpark(k, 1);
    return 0;
}
