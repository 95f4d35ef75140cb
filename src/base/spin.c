/* SPDX-License-Identifier: MIT */
/*
 * The spin lock's slow half (the fast half, one exchange, is inline in
 * base.h): wait for another kernel thread to drop the lock. Spin locks
 * guard only short critical sections (queue links, a timer heap), so
 * spinning a little is right; after a while the holder may have been
 * preempted by the kernel, and the waiter yields its CPU instead.
 *
 * Memory ordering: acquire exchange to take, release store to drop, relaxed
 * loads while waiting (the exchange decides).
 */
#include "base/base.h"

#include <sched.h>

void spin_backoff(unsigned *spins)
{
    if (++*spins < 256)
        cpu_relax();
    else
        sched_yield();
}

void spin_lock_slow(uint32_t *l)
{
    unsigned spins = 0;
    for (;;) {
        while (__atomic_load_n(l, __ATOMIC_RELAXED))
            spin_backoff(&spins);
        if (!__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE))
            return;
    }
}
