/* SPDX-License-Identifier: MIT */
/*
 * Futex wait and wake on a private 32-bit word: how an OS thread (a plain
 * thread blocked on a fern object, a sleeping worker) waits in the kernel.
 * Deadlines are absolute CLOCK_MONOTONIC nanoseconds, fern_now_ns's clock.
 */
#include "base/base.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int futex_wait(uint32_t *addr, uint32_t expect, int64_t deadline_ns)
{
    struct timespec ts, *tsp = NULL;
    if (deadline_ns != FERN_FOREVER) {
        ts.tv_sec = deadline_ns / 1000000000;
        ts.tv_nsec = deadline_ns % 1000000000;
        tsp = &ts;
    }
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline. */
    long r = syscall(SYS_futex, addr, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expect, tsp, NULL,
                     FUTEX_BITSET_MATCH_ANY);
    return r == 0 ? 0 : errno;
}

void futex_wake(uint32_t *addr, int n)
{
    syscall(SYS_futex, addr, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, n, NULL, NULL, 0);
}

void plock_lock_slow(struct plock *l)
{
    /* Mark the word contended and sleep until an unlock finds it free. */
    while (__atomic_exchange_n(&l->w, 2, __ATOMIC_ACQUIRE) != 0)
        futex_wait(&l->w, 2, FERN_FOREVER);
}

int pcond_wait(struct pcond *c, struct plock *l, int64_t deadline_ns)
{
    /* Read under l: a signal after the unlock changes the word first, and
     * the futex then does not sleep. */
    uint32_t s = __atomic_load_n(&c->seq, __ATOMIC_RELAXED);
    plock_unlock(l);
    int r = futex_wait(&c->seq, s, deadline_ns);
    plock_lock(l);
    return r == ETIMEDOUT ? ETIMEDOUT : 0;
}

void pcond_signal(struct pcond *c)
{
    __atomic_fetch_add(&c->seq, 1, __ATOMIC_RELAXED);
    futex_wake(&c->seq, 1);
}

void pcond_broadcast(struct pcond *c)
{
    __atomic_fetch_add(&c->seq, 1, __ATOMIC_RELAXED);
    futex_wake(&c->seq, INT32_MAX);
}
