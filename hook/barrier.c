/* SPDX-License-Identifier: MIT */
/*
 * pthread barriers (the design: lock.h).
 *
 * A private barrier is fern-hook's own, for green and plain threads alike.
 * Its words, in glibc's 32 bytes:
 *   count  (offset 4)  threads per round
 *   shared (offset 12, where glibc's init puts it) nonzero: process-shared,
 *                     glibc's object, for everyone
 *   word   (offset 16, 64 bits) the round in its high half, the threads
 *                     arrived in this round in its low half
 *   inside (offset 24) threads inside pthread_barrier_wait
 * Offset 0 is written only by init: ThreadSanitizer's interceptor reads the
 * object's first byte as the barrier's own memory, and must not see it race
 * with the waits' atomics.
 * The last thread of a round starts the next one (round + 1, nobody
 * arrived) and wakes the others, which park in the lot while the round is
 * theirs; it returns PTHREAD_BARRIER_SERIAL_THREAD. Destroy answers EBUSY
 * while a round is under way and otherwise waits for the threads still
 * leaving the last one, as glibc's does, so the memory may then be freed.
 */
#include "lock.h"

#include <stddef.h>

struct lk_bar {
    uint32_t pad0;
    uint32_t count;
    uint32_t pad1;
    int32_t shared;
    uint64_t word;
    uint32_t inside;
    uint32_t pad2;
};
_Static_assert(offsetof(struct lk_bar, shared) == 12, "glibc's shared");
_Static_assert(sizeof(struct lk_bar) == sizeof(pthread_barrier_t), "pthread_barrier_t's size");

static inline struct lk_bar *br(pthread_barrier_t *b) { return (struct lk_bar *)b; }

static inline int theirs(pthread_barrier_t *b)
{
    lk_ready();
    return !lk_own || __atomic_load_n(&br(b)->shared, __ATOMIC_RELAXED) != 0;
}

int pthread_barrier_init(pthread_barrier_t *restrict b, const pthread_barrierattr_t *restrict a,
                         unsigned count)
{
    lk_ready();
    int shared = 0;
    if (a)
        pthread_barrierattr_getpshared(a, &shared);
    if (!lk_own || shared == PTHREAD_PROCESS_SHARED)
        return lk_real.barrier_init(b, a, count);
    if (count == 0 || count > INT32_MAX)
        return EINVAL;
    struct lk_bar *k = br(b);
    k->pad0 = 0;
    k->pad1 = 0;
    k->pad2 = 0;
    k->word = 0;
    k->count = count;
    k->shared = 0;
    k->inside = 0;
    return 0;
}

static int same_round(const void *addr, void *arg)
{
    return __atomic_load_n(&((const struct lk_bar *)addr)->word, __ATOMIC_RELAXED) >> 32 ==
           *(uint64_t *)arg;
}

int pthread_barrier_wait(pthread_barrier_t *b)
{
    if (theirs(b))
        return lk_real.barrier_wait(b);
    struct lk_bar *k = br(b);
    __atomic_fetch_add(&k->inside, 1, __ATOMIC_RELAXED);
    uint64_t w = __atomic_load_n(&k->word, __ATOMIC_RELAXED), n;
    uint32_t count = k->count;
    int last;
    do {
        last = (uint32_t)w + 1 == count;
        n = last ? ((w >> 32) + 1) << 32 : w + 1;
    } while (!__atomic_compare_exchange_n(&k->word, &w, n, false, __ATOMIC_ACQ_REL,
                                          __ATOMIC_RELAXED));
    if (last) {
        fern__lot_unpark(k, INT32_MAX);
        __atomic_fetch_sub(&k->inside, 1, __ATOMIC_RELEASE);
        return PTHREAD_BARRIER_SERIAL_THREAD;
    }
    uint64_t round = w >> 32;
    HK_TSAN_ENTER();
    while (__atomic_load_n(&k->word, __ATOMIC_ACQUIRE) >> 32 == round)
        fern__lot_park(k, same_round, &round, "pthread_barrier (fern-hook)", FERN_FOREVER);
    HK_TSAN_LEAVE();
    __atomic_fetch_sub(&k->inside, 1, __ATOMIC_RELEASE); /* the last touch of *b */
    return 0;
}

int pthread_barrier_destroy(pthread_barrier_t *b)
{
    if (theirs(b))
        return lk_real.barrier_destroy(b);
    struct lk_bar *k = br(b);
    if ((uint32_t)__atomic_load_n(&k->word, __ATOMIC_ACQUIRE) != 0)
        return EBUSY;
    while (__atomic_load_n(&k->inside, __ATOMIC_ACQUIRE) != 0)
        lk_yield();
    return 0;
}
