/* SPDX-License-Identifier: MIT */
/*
 * fern-hook's lock families: pthread mutexes (lock.c), condition variables
 * (cond.c), read-write locks (rwlock.c), semaphores (sem.c), barriers and
 * once (barrier.c, once.c), spin locks (lock.c), and C11's mtx_*, cnd_*,
 * call_once, which glibc implements on its internal pthread entry points
 * and so need entries of their own. docs/hooks.md has the user's view.
 *
 * Design: one parking lot keyed by the object's address (libfern's
 * src/sync/lot.c), so that green threads and plain threads blocked on the
 * same object meet in one protocol, over words the object itself holds.
 *
 * - Mutexes keep glibc's layout and lock word, because a plain thread's
 *   lock and unlock must stay glibc's own code (one branch more, the
 *   plain-thread cost rule): __lock is 0 free, 1 held, 2 held and maybe
 *   waited for; a plain waiter sleeps on the futex of __lock, a green one
 *   parks in the lot on the same address. An unlocker that sees 2 wakes a
 *   green waiter from the lot, or if there is none, the futex. A green
 *   owner is recorded in __owner under its own id (fern__lock_owner_id:
 *   never a kernel thread id), so recursion counts, EDEADLK and EPERM are
 *   per green thread. A plain thread's lock and unlock are glibc's; a
 *   green waiter behind a kernel-thread owner polls (lock.c says why).
 * - Condition variables, read-write locks, semaphores and barriers that
 *   are private to the process are fern-hook's own, for every thread:
 *   glibc's versions of these are protocols of several words that a
 *   second implementation could not join safely. Each keeps the word in
 *   which glibc records "process-shared" (and the clock, the kind) where
 *   glibc keeps it, and an object marked shared goes to glibc for everyone.
 *   All their waiters, green or plain, are in the lot.
 * - Process-shared, robust and priority-protocol mutexes, process-shared
 *   objects of every family, and everything on a plain thread that has
 *   glibc's fast path, go to glibc (glibc's functions, found once with
 *   dlsym(RTLD_NEXT)).
 *
 * The choice of implementation for a condition variable, read-write lock,
 * semaphore or barrier cannot change during its life, so it does not
 * follow hk_on (which turns off in a fork child): it is fixed once per
 * process by FERN_HOOK (lk_own), before the first call.
 */
#ifndef FERN_HOOK_LOCK_H
#define FERN_HOOK_LOCK_H

#include "hook.h"

#include <pthread.h>
#include <semaphore.h>
#include <time.h>

/* glibc's functions. */
struct lk_real {
    int (*mutex_lock)(pthread_mutex_t *);
    int (*mutex_trylock)(pthread_mutex_t *);
    int (*mutex_timedlock)(pthread_mutex_t *, const struct timespec *);
    int (*mutex_clocklock)(pthread_mutex_t *, clockid_t, const struct timespec *);
    int (*mutex_unlock)(pthread_mutex_t *);
    int (*cond_init)(pthread_cond_t *, const pthread_condattr_t *);
    int (*cond_destroy)(pthread_cond_t *);
    int (*cond_signal)(pthread_cond_t *);
    int (*cond_broadcast)(pthread_cond_t *);
    int (*cond_wait)(pthread_cond_t *, pthread_mutex_t *);
    int (*cond_timedwait)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
    int (*cond_clockwait)(pthread_cond_t *, pthread_mutex_t *, clockid_t,
                          const struct timespec *);
    int (*rw_init)(pthread_rwlock_t *, const pthread_rwlockattr_t *);
    int (*rw_destroy)(pthread_rwlock_t *);
    int (*rw_rdlock)(pthread_rwlock_t *);
    int (*rw_tryrdlock)(pthread_rwlock_t *);
    int (*rw_timedrdlock)(pthread_rwlock_t *, const struct timespec *);
    int (*rw_clockrdlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
    int (*rw_wrlock)(pthread_rwlock_t *);
    int (*rw_trywrlock)(pthread_rwlock_t *);
    int (*rw_timedwrlock)(pthread_rwlock_t *, const struct timespec *);
    int (*rw_clockwrlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
    int (*rw_unlock)(pthread_rwlock_t *);
    int (*sem_init)(sem_t *, int, unsigned);
    int (*sem_destroy)(sem_t *);
    int (*sem_wait)(sem_t *);
    int (*sem_trywait)(sem_t *);
    int (*sem_timedwait)(sem_t *, const struct timespec *);
    int (*sem_clockwait)(sem_t *, clockid_t, const struct timespec *);
    int (*sem_post)(sem_t *);
    int (*sem_getvalue)(sem_t *, int *);
    int (*barrier_init)(pthread_barrier_t *, const pthread_barrierattr_t *, unsigned);
    int (*barrier_destroy)(pthread_barrier_t *);
    int (*barrier_wait)(pthread_barrier_t *);
    int (*once)(pthread_once_t *, void (*)(void));
    int (*spin_lock)(pthread_spinlock_t *);
    int (*spin_trylock)(pthread_spinlock_t *);
};
extern struct lk_real lk_real HK_HIDDEN;
extern int lk_own HK_HIDDEN; /* 1: private conds, rwlocks, sems, barriers are ours */
/* 1: private condition variables are ours too. Not when another library
 * in front of fern-hook defines pthread_cond_signal (ThreadSanitizer's and
 * AddressSanitizer's runtimes do): such interceptors find glibc's
 * functions by their GLIBC_2.3.2 version, which fern-hook's unversioned
 * definitions do not carry, so part of their calls would reach glibc's
 * code with fern-hook's words. Condition variables then stay glibc's. */
extern int lk_own_cond HK_HIDDEN;
/* Find glibc's functions and read FERN_HOOK (idempotent; the constructor
 * and any call before it). */
void lk_resolve(void) HK_HIDDEN;
static inline void lk_ready(void)
{
    if (__builtin_expect(!__atomic_load_n(&lk_real.spin_trylock, __ATOMIC_ACQUIRE), 0))
        lk_resolve();
}

/* A plain thread (or a worker's own context, or hooking off): the call is
 * glibc's. One TLS load on a plain thread. */
static inline int lk_plain(void) { return HK_LIKELY(fern__tls_worker == NULL) || !hk_green(); }

/* The deadline for an absolute time on clock clk (REALTIME or MONOTONIC),
 * as glibc checks it: EINVAL for another clock or a bad tv_nsec. */
int lk_deadline(clockid_t clk, const struct timespec *abs, int64_t *dl) HK_HIDDEN;

/* The mutex operations, for the condition variable's wait. */
int lk_mutex_lock(pthread_mutex_t *m) HK_HIDDEN;
int lk_mutex_unlock(pthread_mutex_t *m) HK_HIDDEN;

/* Give the CPU: to the worker's other green threads, or the kernel's. */
void lk_yield(void) HK_HIDDEN;

/* C11's error values for a pthread error number. */
int lk_thrd(int err) HK_HIDDEN;

#endif
