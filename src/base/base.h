/* SPDX-License-Identifier: MIT */
/*
 * base/: what every other file of the library stands on, with no knowledge
 * of threads or workers.
 *   base.h        sanitizer flags, branch hints, the atomics vocabulary
 *                 (LOAD/STORE/CAS: GCC __atomic builtins on plain fields,
 *                 because the public structs such as fern_mutex must stay
 *                 plain C usable from C++), per-worker counters (COUNT)
 *   spin.c        the spin lock (fast half inline here, slow half there)
 *   futex.c       futex wait/wake on a private word
 *   membarrier.c  the heavy side of an asymmetric fence
 *   clock.c       fern_now_ns, the one clock
 *   errno.c       errno read and written safely across a switch
 *   config.h      the settings every layer reads (loaded by runtime/config.c)
 *   probes.h      USDT probes (provider "fern"), fired by sched/ and thread/
 * Below it is only arch/ (arch/arch.h: what a CPU must provide).
 */
#ifndef FERN_BASE_H
#define FERN_BASE_H

#pragma GCC visibility push(default)
#include <fern/fern.h>
#pragma GCC visibility pop

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arch/arch.h"

#if defined(__SANITIZE_ADDRESS__)
#define FERN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERN_ASAN 1
#endif
#endif
#include <sys/mman.h>
#ifdef FERN_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* munmap of memory that ran frames: a green thread's stack, a signal stack,
 * a scratch stack. A frame left by a switch (a thread's last, a handler's
 * that switched away) keeps its redzones poisoned under AddressSanitizer,
 * and that shadow outlives munmap: whatever is mapped there next (the next
 * fern_init maps its executable's file) would read as an overflowed stack.
 * So the shadow is cleared first. */
static inline int unmap_frames(void *p, size_t len)
{
#ifdef FERN_ASAN
    ASAN_UNPOISON_MEMORY_REGION(p, len);
#endif
    return munmap(p, len);
}

#if defined(__SANITIZE_THREAD__)
#define FERN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERN_TSAN 1
#endif
#endif

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define STORE_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ADD_RELAXED(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define CAS(p, expp, v) \
    __atomic_compare_exchange_n((p), (expp), (v), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

/* Bump a counter only its worker writes (others read it relaxed). */
#define COUNT(p, d) STORE_RELAXED((p), *(p) + (d))

/* ---- spin lock: short critical sections only (queue links, heap) ---- */
/* One round of waiting for another kernel thread: pause, and after a while
 * yield the CPU (the thread waited for may have been preempted). */
void spin_backoff(unsigned *spins);
void spin_lock_slow(uint32_t *l);
/* One attempt, for fast paths that go a slow way (spin_lock) if it fails. */
static inline bool spin_trylock(uint32_t *l) { return !__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE); }
static inline void spin_lock(uint32_t *l)
{
    if (likely(spin_trylock(l)))
        return;
    spin_lock_slow(l);
}
static inline void spin_unlock(uint32_t *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

/* The heavy side of an asymmetric Dekker handshake (sync/bias.c explains it;
 * sched/runq.c's one-worker rings use it too): membarrier_ready() registers the
 * process for membarrier(PRIVATE_EXPEDITED) and says whether that worked;
 * membarrier_all() then runs a full barrier on every thread of the process. */
bool membarrier_ready(void);
void membarrier_all(void);


/* ---- futex ---- */
int futex_wait(uint32_t *addr, uint32_t expect, int64_t deadline_ns);
void futex_wake(uint32_t *addr, int n);

/* ---- plock: the runtime's own sleeping lock for kernel threads ----
 * For fern's internal locks held across long or blocking work (start-up and
 * shutdown, io_uring's ring creation, the tracer's session): a futex word,
 * 0 free, 1 held, 2 held with waiters. Not pthread_mutex_t: fern-hook
 * interposes pthread_mutex_lock, and fern's own locks must never go
 * through it (a green caller would be parked inside the runtime). */
struct plock {
    uint32_t w;
};
#define PLOCK_INIT {0}
void plock_lock_slow(struct plock *l);
static inline void plock_lock(struct plock *l)
{
    uint32_t z = 0;
    if (likely(__atomic_compare_exchange_n(&l->w, &z, 1, false, __ATOMIC_ACQUIRE,
                                           __ATOMIC_RELAXED)))
        return;
    plock_lock_slow(l);
}
static inline void plock_unlock(struct plock *l)
{
    if (unlikely(__atomic_exchange_n(&l->w, 0, __ATOMIC_RELEASE) == 2))
        futex_wake(&l->w, 1);
}


/* ---- pcond: a condition variable for plock ----
 * For the runtime's own helper threads (the blocking pool), which must not
 * use pthread_cond_t for the same reason. A sequence word: pcond_wait
 * reads it under the lock, unlocks, sleeps while it is unchanged (until
 * the absolute fern_now_ns deadline, FERN_FOREVER for none), and locks
 * again; signal and broadcast bump it and wake one or all sleepers.
 * Wake-ups may be spurious: callers wait in a loop on their condition.
 * Returns 0 or ETIMEDOUT. */
struct pcond {
    uint32_t seq;
};
#define PCOND_INIT {0}
int pcond_wait(struct pcond *c, struct plock *l, int64_t deadline_ns);
void pcond_signal(struct pcond *c);
void pcond_broadcast(struct pcond *c);


/* errno is at a per-kernel-thread address that glibc declares `const`, so
 * in a function that parks the compiler may reuse the address computed
 * before the park. Such functions read and write errno through these. */
int errno_get(void);
void errno_set(int e);

#endif
