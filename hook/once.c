/* SPDX-License-Identifier: MIT */
/*
 * pthread_once and C11 call_once (the design: lock.h).
 *
 * Over glibc's own word, so that plain threads keep glibc's code: 0 not
 * run, 1 running (glibc adds a fork generation to this value; it is 0 in
 * any process that has not forked, and fern-hook is off in a fork child),
 * 2 done. A green thread that finds it running parks in the lot while the
 * word is unchanged, rather than sleeping its worker on the futex (the
 * running routine may be parked on the same worker). Whoever finishes the
 * routine stores 2 and wakes both kinds of waiter: the futex (glibc's
 * waiters) and the lot. A plain thread's call is glibc's; after it, if the
 * lot has anyone parked, fern-hook wakes the lot (glibc's wake reaches
 * only the futex). Green threads cannot be cancelled, so a routine run by
 * one always finishes.
 */
#include "lock.h"

#include "arch/arch.h"

#include <linux/futex.h>
#include <threads.h>

#define ONCE_RUNNING 1
#define ONCE_DONE 2

static int unchanged(const void *addr, void *arg)
{
    return __atomic_load_n((const int *)addr, __ATOMIC_RELAXED) == *(int *)arg;
}

int pthread_once(pthread_once_t *o, void (*fn)(void))
{
    if (HK_LIKELY(__atomic_load_n(o, __ATOMIC_ACQUIRE) == ONCE_DONE))
        return 0;
    lk_ready();
    if (lk_plain()) {
        int r = lk_real.once(o, fn);
        full_fence();
        if (__atomic_load_n(&fern__lot_nwait, __ATOMIC_RELAXED))
            fern__lot_unpark(o, INT32_MAX);
        return r;
    }
    for (;;) {
        int v = __atomic_load_n(o, __ATOMIC_ACQUIRE);
        if (v == ONCE_DONE)
            return 0;
        if (v & ONCE_RUNNING) {
            HK_TSAN_ENTER();
            fern__lot_park(o, unchanged, &v, "pthread_once (fern-hook)", FERN_FOREVER);
            HK_TSAN_LEAVE();
            continue;
        }
        if (!__atomic_compare_exchange_n(o, &v, ONCE_RUNNING, false, __ATOMIC_ACQUIRE,
                                         __ATOMIC_ACQUIRE))
            continue;
        fn();
        __atomic_store_n(o, ONCE_DONE, __ATOMIC_SEQ_CST);
        hk_sys(SYS_futex, o, FUTEX_WAKE_PRIVATE, INT32_MAX);
        fern__lot_unpark(o, INT32_MAX);
        return 0;
    }
}

void call_once(once_flag *f, void (*fn)(void))
{
    _Static_assert(sizeof(once_flag) == sizeof(pthread_once_t), "once_flag");
    pthread_once((pthread_once_t *)f, fn);
}
