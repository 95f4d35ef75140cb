/* SPDX-License-Identifier: MIT */
/*
 * pthread mutexes, C11 mtx_*, pthread spin locks (the design: lock.h).
 *
 * glibc's mutex words (x86_64 and aarch64 alike: __lock at 0, __count at
 * 4, __owner at 8, __nusers at 12, __kind at 16). __lock follows glibc's
 * low-level lock: 0 free; 1 held; 2 held, waiters possible. Every party
 * takes a free lock with CAS 0 -> 1; one that must wait sets 2 by exchange
 * (owning the lock if the exchange returned 0) and then sleeps while the
 * word is 2: a plain thread on the futex (glibc's code), a green thread in
 * the lot (validated under the lot's lock). Unlock exchanges 0 and, if it
 * saw 2, wakes one party: a green unlocker wakes one from the lot, or the
 * futex if the lot had none; a plain unlocker is glibc's code, unchanged
 * (the plain-thread cost rule: one TLS load and a branch), which wakes
 * only the futex.
 *
 * So a green waiter sleeps in the lot untimed only while a green thread
 * owns the mutex (__owner >= 2^28, checked again under the lot's lock):
 * that owner's unlock wakes it. While a kernel thread owns it, a green
 * waiter sleeps for a poll interval (50 us, doubling to 1 ms) and looks
 * again. Why nobody sleeps forever: a party woken from either place makes
 * one more exchange to 2 before sleeping again, so while anyone sleeps the
 * word returns to 2 and the next green unlock wakes again (glibc's own
 * argument for waking one); an untimed green sleeper has a green owner,
 * and when ownership passes to a kernel thread it is through a green
 * unlock that woke a green waiter, which then polls. A timed lock that
 * gives up wakes one sleeper to take its place.
 *
 * Ownership: glibc writes the kernel thread id into __owner; a green thread
 * writes its own id (fern__lock_owner_id), which no kernel thread has, so
 * glibc's recursive and error-checking tests, and ours, tell two green
 * threads of one worker apart, and a green owner from a plain thread.
 */
#include "lock.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <threads.h>

/* Until the constructor (or the first call) resolves them, the mutex
 * entries go through stubs that resolve first: the plain-thread paths of
 * lock and unlock then need no "resolved yet?" test. */
static int stub_mutex_lock(pthread_mutex_t *m)
{
    lk_resolve();
    return lk_real.mutex_lock(m);
}
static int stub_mutex_unlock(pthread_mutex_t *m)
{
    lk_resolve();
    return lk_real.mutex_unlock(m);
}
static int stub_mutex_trylock(pthread_mutex_t *m)
{
    lk_resolve();
    return lk_real.mutex_trylock(m);
}

int lk_own_cond;

struct lk_real lk_real = {.mutex_lock = stub_mutex_lock,
                          .mutex_unlock = stub_mutex_unlock,
                          .mutex_trylock = stub_mutex_trylock};
int lk_own;

#define KIND_TYPE 3           /* PTHREAD_MUTEX_KIND_MASK_NP */
#define KIND_KERNEL (16 | 32 | 64 | 128) /* robust, PI, PP, process-shared */
#define T_RECURSIVE 1
#define T_ERRORCHECK 2

static void *must(const char *name)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p) {
        fprintf(stderr, "fern-hook: libc's %s not found: %s\n", name, dlerror());
        abort();
    }
    return p;
}

void lk_resolve(void)
{
    if (__atomic_load_n(&lk_real.spin_trylock, __ATOMIC_ACQUIRE))
        return;
    const char *v = getenv("FERN_HOOK");
    lk_own = !(v && strcmp(v, "0") == 0);
    /* Whose pthread_cond_signal comes first: the object that holds this
     * library's own data, or another (an address comparison would not do:
     * our own function's address may itself resolve to the first one). */
    Dl_info front, self;
    void *sig = dlsym(RTLD_DEFAULT, "pthread_cond_signal");
    lk_own_cond = lk_own && sig && dladdr(sig, &front) && dladdr(&lk_own_cond, &self) &&
                  front.dli_fbase == self.dli_fbase;
    struct lk_real r;
#define R(f, n) r.f = must(n)
    R(mutex_lock, "pthread_mutex_lock");
    R(mutex_trylock, "pthread_mutex_trylock");
    R(mutex_timedlock, "pthread_mutex_timedlock");
    R(mutex_clocklock, "pthread_mutex_clocklock");
    R(mutex_unlock, "pthread_mutex_unlock");
    R(cond_init, "pthread_cond_init");
    R(cond_destroy, "pthread_cond_destroy");
    R(cond_signal, "pthread_cond_signal");
    R(cond_broadcast, "pthread_cond_broadcast");
    R(cond_wait, "pthread_cond_wait");
    R(cond_timedwait, "pthread_cond_timedwait");
    R(cond_clockwait, "pthread_cond_clockwait");
    R(rw_init, "pthread_rwlock_init");
    R(rw_destroy, "pthread_rwlock_destroy");
    R(rw_rdlock, "pthread_rwlock_rdlock");
    R(rw_tryrdlock, "pthread_rwlock_tryrdlock");
    R(rw_timedrdlock, "pthread_rwlock_timedrdlock");
    R(rw_clockrdlock, "pthread_rwlock_clockrdlock");
    R(rw_wrlock, "pthread_rwlock_wrlock");
    R(rw_trywrlock, "pthread_rwlock_trywrlock");
    R(rw_timedwrlock, "pthread_rwlock_timedwrlock");
    R(rw_clockwrlock, "pthread_rwlock_clockwrlock");
    R(rw_unlock, "pthread_rwlock_unlock");
    R(sem_init, "sem_init");
    R(sem_destroy, "sem_destroy");
    R(sem_wait, "sem_wait");
    R(sem_trywait, "sem_trywait");
    R(sem_timedwait, "sem_timedwait");
    R(sem_clockwait, "sem_clockwait");
    R(sem_post, "sem_post");
    R(sem_getvalue, "sem_getvalue");
    R(barrier_init, "pthread_barrier_init");
    R(barrier_destroy, "pthread_barrier_destroy");
    R(barrier_wait, "pthread_barrier_wait");
    R(once, "pthread_once");
    R(spin_lock, "pthread_spin_lock");
    R(spin_trylock, "pthread_spin_trylock");
#undef R
    /* Field by field, the guard last: a concurrent first call sees either
     * nothing (and resolves too, to the same values) or everything. */
    void **dst = (void **)&lk_real, **src = (void **)&r;
    size_t n = sizeof r / sizeof(void *);
    for (size_t i = 0; i + 1 < n; i++)
        __atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
    __atomic_store_n(&dst[n - 1], src[n - 1], __ATOMIC_RELEASE);
}

int lk_deadline(clockid_t clk, const struct timespec *abs, int64_t *dl)
{
    if (clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC)
        return EINVAL;
    if (!abs || abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000)
        return EINVAL;
    struct timespec now;
    clock_gettime(clk, &now);
    int64_t sec = (int64_t)abs->tv_sec - (int64_t)now.tv_sec;
    if (sec > INT64_MAX / 2000000000)
        sec = INT64_MAX / 2000000000; /* far enough: no overflow below */
    int64_t left = sec * 1000000000 + (abs->tv_nsec - now.tv_nsec);
    *dl = fern_now_ns() + (left > 0 ? left : 0);
    return 0;
}

void lk_yield(void)
{
    if (lk_plain())
        sched_yield();
    else
        fern_yield();
}

int lk_thrd(int err)
{
    switch (err) {
    case 0:
        return thrd_success;
    case EBUSY:
        return thrd_busy;
    case ETIMEDOUT:
        return thrd_timedout;
    case ENOMEM:
        return thrd_nomem;
    default:
        return thrd_error;
    }
}

/* ---- mutexes ---- */

static inline int kind_of(pthread_mutex_t *m) { return __atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED); }

/* A green waiter sleeps on the word while it is 2 and its owner is of
 * the kind it saw before parking (a green thread: until woken; a kernel
 * thread: for a poll interval, see green_lock). */
static inline int owner_green(int owner) { return owner >= 0x10000000; }
static int still_contended(const void *addr, void *arg)
{
    const pthread_mutex_t *m = addr;
    return __atomic_load_n(&m->__data.__lock, __ATOMIC_RELAXED) == 2 &&
           owner_green(__atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED)) == *(int *)arg;
}

static void futex_wake1(int *w)
{
    hk_sys(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1);
}

/* The green lock: 0, EBUSY (try), ETIMEDOUT, EDEADLK, EAGAIN (recursion). */
static int green_lock(pthread_mutex_t *m, int64_t dl, int try)
{
    int type = kind_of(m) & KIND_TYPE;
    int id = fern__lock_owner_id();
    int owner = __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED);
    if (owner == id) {
        if (type == T_RECURSIVE) {
            if (m->__data.__count + 1 == 0)
                return EAGAIN;
            m->__data.__count++;
            return 0;
        }
        if (type == T_ERRORCHECK)
            return EDEADLK;
    }
    int *w = &m->__data.__lock;
    int e = 0;
    if (!__atomic_compare_exchange_n(w, &e, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        if (try)
            return EBUSY;
        /* A short spin: the holder may be on another worker, about to let go. */
        for (int i = 0; i < 64; i++) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#elif defined(__aarch64__)
            __asm__ volatile("yield");
#endif
            e = 0;
            if (__atomic_load_n(w, __ATOMIC_RELAXED) == 0 &&
                __atomic_compare_exchange_n(w, &e, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                goto got;
        }
        HK_TSAN_ENTER();
        int timedout = 0;
        int64_t poll = 50000;
        while (__atomic_exchange_n(w, 2, __ATOMIC_ACQUIRE) != 0) {
            if (timedout) {
                /* Giving up: whoever else sleeps here may have relied on
                 * this thread to look again (below); let one do it. */
                fern__lot_unpark(m, 1);
                HK_TSAN_LEAVE();
                return ETIMEDOUT;
            }
            int g = owner_green(__atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED));
            int64_t until = dl;
            if (!g) {
                /* A kernel thread holds it: its unlock is glibc's, which
                 * wakes only the futex, so look again after a while
                 * (50 us, doubling to 1 ms). */
                int64_t t = fern_now_ns() + poll;
                if (t < until)
                    until = t;
                if (poll < 1000000)
                    poll *= 2;
            }
            int r = fern__lot_park(m, still_contended, &g, "pthread_mutex (fern-hook)", until);
            /* A poll's end is not the caller's deadline. */
            timedout = r == FERN__LOT_TIMEDOUT && dl != FERN_FOREVER && fern_now_ns() >= dl;
        }
        HK_TSAN_LEAVE();
    }
got:
    __atomic_store_n(&m->__data.__owner, id, __ATOMIC_RELAXED);
    if (type == T_RECURSIVE)
        m->__data.__count = 1;
    m->__data.__nusers++;
    return 0;
}

static int green_unlock(pthread_mutex_t *m)
{
    int type = kind_of(m) & KIND_TYPE;
    int id = fern__lock_owner_id();
    int *w = &m->__data.__lock;
    if (type == T_RECURSIVE || type == T_ERRORCHECK) {
        if (__atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED) != id ||
            __atomic_load_n(w, __ATOMIC_RELAXED) == 0)
            return EPERM;
        if (type == T_RECURSIVE && --m->__data.__count != 0)
            return 0;
    }
    __atomic_store_n(&m->__data.__owner, 0, __ATOMIC_RELAXED);
    m->__data.__nusers--;
    if (__atomic_exchange_n(w, 0, __ATOMIC_SEQ_CST) > 1 && fern__lot_unpark(m, 1) == 0)
        futex_wake1(w);
    return 0;
}

static inline int green_ok(pthread_mutex_t *m) { return !(kind_of(m) & KIND_KERNEL); }

/* The plain-thread paths of lock, trylock and unlock are the hot ones for
 * a program that takes its locks on plain threads: one TLS load and a
 * branch before glibc's function (the stubs above spare the test for
 * resolution). */
int pthread_mutex_lock(pthread_mutex_t *m)
{
    if (HK_LIKELY(fern__tls_worker == NULL) || !hk_green() || !green_ok(m))
        return lk_real.mutex_lock(m);
    return green_lock(m, FERN_FOREVER, 0);
}

int pthread_mutex_trylock(pthread_mutex_t *m)
{
    if (HK_LIKELY(fern__tls_worker == NULL) || !hk_green() || !green_ok(m))
        return lk_real.mutex_trylock(m);
    return green_lock(m, FERN_FOREVER, 1);
}

int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clk, const struct timespec *abs)
{
    lk_ready();
    if (lk_plain() || !green_ok(m))
        return lk_real.mutex_clocklock(m, clk, abs);
    int r = green_lock(m, FERN_FOREVER, 1);
    if (r != EBUSY)
        return r;
    int64_t dl;
    if ((r = lk_deadline(clk, abs, &dl)) != 0)
        return r; /* glibc checks the time only when it must wait */
    return green_lock(m, dl, 0);
}

int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *abs)
{
    lk_ready();
    if (lk_plain() || !green_ok(m))
        return lk_real.mutex_timedlock(m, abs);
    return pthread_mutex_clocklock(m, CLOCK_REALTIME, abs);
}

int pthread_mutex_unlock(pthread_mutex_t *m)
{
    if (HK_LIKELY(fern__tls_worker == NULL) || !hk_green() || !green_ok(m))
        return lk_real.mutex_unlock(m);
    return green_unlock(m);
}

int lk_mutex_lock(pthread_mutex_t *m) { return pthread_mutex_lock(m); }
int lk_mutex_unlock(pthread_mutex_t *m) { return pthread_mutex_unlock(m); }

/* ---- C11 (glibc's call __pthread_mutex_* directly) ---- */

int mtx_lock(mtx_t *m) { return lk_thrd(pthread_mutex_lock((pthread_mutex_t *)m)); }
int mtx_trylock(mtx_t *m) { return lk_thrd(pthread_mutex_trylock((pthread_mutex_t *)m)); }
int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts)
{
    return lk_thrd(pthread_mutex_timedlock((pthread_mutex_t *)m, ts));
}
int mtx_unlock(mtx_t *m) { return lk_thrd(pthread_mutex_unlock((pthread_mutex_t *)m)); }

/* ---- spin locks ----
 * glibc's word differs by architecture (x86_64 counts down from 1), so
 * a green thread uses glibc's own trylock; after a short spin it yields,
 * so a holder parked on the same worker gets to run and let go. */

int pthread_spin_lock(pthread_spinlock_t *l)
{
    lk_ready();
    if (lk_plain())
        return lk_real.spin_lock(l);
    for (unsigned n = 0;; n++) {
        if (lk_real.spin_trylock(l) == 0)
            return 0;
        if (n < 100) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#elif defined(__aarch64__)
            __asm__ volatile("yield");
#endif
        } else {
            fern_yield();
        }
    }
}
