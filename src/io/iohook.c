/* SPDX-License-Identifier: MIT */
/*
 * The entry points libfern lends to fern-hook (hookapi.h has the model).
 *
 * fern-hook waits on any number of fds at once, so its waiters are not the
 * entry's one-per-direction rw/ww but a queue (fdent.pq) that every edge of
 * the entry claims from (poller.c). fern__io_park takes the entries' locks
 * in ascending fd order (every other path holds one entry lock at a time),
 * checks each tick word against the caller's snapshot under its lock, and
 * parks only if none moved: an edge between the caller's check and the park
 * either ticked a word (the caller checks again) or finds the waiter queued.
 */
#include "io.h"
#include "io/hookapi.h"
#include "sched/hibernate.h"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>

void (*fern__hook_close)(int fd);

int fern__hook_green(void) { return thread_current() != NULL; }

int fern__cancel_due(void) { return cancel_due(thread_current()); }

void fern__io_forget(int fd)
{
    if (LOAD_RELAXED(&FDT.chunks))
        io_forget(fd);
}

int fern__io_snap(struct fern__pollent *pe)
{
    struct fdent *e = io_register(pe->fd, false);
    if (!e)
        return errno;
    if (!e->pollable)
        return EPERM;
    uint32_t r = LOAD(&e->rst), w = LOAD(&e->wst);
    pe->rtick = r & ~ST_FLAGS;
    pe->wtick = w & ~ST_FLAGS;
    pe->drained = (r & ST_DRAINED ? FERN_READ : 0) | (w & ST_DRAINED ? FERN_WRITE : 0);
    return 0;
}

uint32_t fern__io_begin(struct fern__pollent *pe)
{
    struct fdent *e = fdent_get(pe->fd);
    if (!e || !LOAD_RELAXED(&e->tcp))
        return 0;
    if (pe->dirs == FERN_READ) {
        uint32_t m = st_begin(&e->rst);
        pe->rtick = m & ~ST_FLAGS;
        return m;
    }
    uint32_t m = st_begin(&e->wst);
    pe->wtick = m & ~ST_FLAGS;
    return m;
}

void fern__io_short(const struct fern__pollent *pe, uint32_t token)
{
    struct fdent *e = fdent_get(pe->fd);
    if (e && token)
        st_short(pe->dirs == FERN_READ ? &e->rst : &e->wst, token);
}

struct park_many {
    const struct fern__pollent *pe;
    int n;
};

/* The after-switch action of fern__io_park. *pm lives in the parked
 * thread's frame: read it before the first unlock. Once lock i is released
 * a waker can wake the thread, which then takes every entry lock in turn to
 * unlink its waiters, so it waits at the first lock still held here and
 * pe[] stays valid up to the last unlock; after that nothing of the frame
 * may be read (the thread may have returned and reused it). */
static void unlock_many(void *arg)
{
    const struct park_many *pm = arg;
    const struct fern__pollent *pe = pm->pe;
    int n = pm->n;
    for (int i = 0; i < n; i++)
        spin_unlock(&fdent_get(pe[i].fd)->lock);
}

int fern__io_park(const struct fern__pollent *pe, int n, int64_t deadline)
{
    /* The waiters, which an edge reads and other waiters' unlinks write:
     * on the heap while stacks may be hibernated, as io_wait's parker is
     * in the fd entry, so a wake-up reads nothing on the parked stack (the
     * thread is restored by its own resume, not by a waker's touch). */
    bool heap = n > 4 || LOAD_RELAXED(&hib_on);
    struct waiter few[4], *wts = !heap ? few : calloc((size_t)n, sizeof *wts);
    if (!wts)
        return FERN__PARK_NOMEM;
    struct parker p;
    parker_init(&p);
    /* Locks in ascending fd order (the caller sorted pe): every other path
     * holds one entry lock at a time, so this cannot deadlock. */
    int locked = 0, changed = 0;
    for (; locked < n; locked++) {
        struct fdent *e = fdent_get(pe[locked].fd);
        spin_lock(&e->lock);
        /* Any edge since the snapshot ticked a word: the caller retries
         * (this is how an edge between its check and this park is kept). */
        if (!e->registered || ((pe[locked].dirs & FERN_READ) &&
                               (LOAD(&e->rst) & ~ST_FLAGS) != pe[locked].rtick) ||
            ((pe[locked].dirs & FERN_WRITE) &&
             (LOAD(&e->wst) & ~ST_FLAGS) != pe[locked].wtick)) {
            changed = 1;
            spin_unlock(&e->lock);
            break;
        }
        waiter_init(&wts[locked]);
        wts[locked].p = &p;
        wts[locked].index = locked;
        wts[locked].data = (void *)(intptr_t)pe[locked].dirs;
        waitq_push(&e->pq, &wts[locked]);
    }
    int ret;
    fern_thread *self = thread_current();
    struct parker *pp = &p;
    /* The thread's own parker if it is to wait (a cancellation point,
     * sync/wait.h), swapped in under every entry's lock, where no waker
     * can see the waiters. */
    bool late = !changed && deadline != FERN_FOREVER && fern_now_ns() >= deadline;
    bool canceled = !changed && !late && !(pp = parker_cancellable(self, &p));
    if (changed || late || canceled) {
        for (int i = 0; i < locked; i++) {
            waitq_unlink(&wts[i]);
            spin_unlock(&fdent_get(pe[i].fd)->lock);
        }
        ret = canceled ? FERN__PARK_CANCELED : changed;
    } else {
        for (int i = 0; i < n; i++)
            wts[i].p = pp;
        if (self) {
            STORE_RELAXED(&self->wait_what, "fd (fern-hook)");
            STORE_RELAXED(&self->wait_obj, (void *)(intptr_t)pe[0].fd);
        }
        ADD_RELAXED(&IO.waiters, 1);
        struct park_many pm = {pe, n};
        int st = parker_wait(pp, unlock_many, &pm, deadline);
        __atomic_fetch_sub(&IO.waiters, 1, __ATOMIC_RELAXED);
        if (self)
            STORE_RELAXED(&self->wait_what, NULL);
        for (int i = 0; i < n; i++) {
            struct fdent *e = fdent_get(pe[i].fd);
            spin_lock(&e->lock);
            waitq_unlink(&wts[i]);
            spin_unlock(&e->lock);
        }
        if (st == W_WOKEN)
            ret = pp->result ? -(pp->index + 1) : 1;
        else
            ret = st == W_CANCELED ? FERN__PARK_CANCELED : 0;
    }
    if (wts != few)
        free(wts);
    return ret;
}

/* ---- the parking lot, for fern-hook's lock families (sync/lot.c) ---- */

int fern__lot_park(const void *addr, int (*valid)(const void *, void *), void *arg,
                   const char *what, int64_t deadline)
{
    return lot_park(addr, valid, arg, what, deadline);
}

int fern__lot_unpark(const void *addr, int n) { return lot_unpark(addr, n); }

int fern__lot_unpark_filter(const void *addr, int (*fn)(void *, int, void *), void *arg)
{
    return lot_unpark_filter(addr, fn, arg);
}

int fern__lot_queued(const void *addr) { return lot_queued(addr); }

int fern__lock_owner_id(void)
{
    fern_thread *t = thread_current();
    /* 2^28 and up: above any kernel thread id (pid_max is at most 2^22)
     * and below glibc's robust-mutex flag bits (2^30, 2^31). */
    return t ? (int)(0x10000000u | (uint32_t)(t->id & 0x0fffffffu)) : 0;
}

/* Restore what a failed call's arguments point into (hookapi.h). The
 * pointer arguments of every call are tried (a hibernated stack is found
 * from any address in it); the vectored calls' buffers are read from their
 * iovec (which, if on a hibernated stack, the first pass restored). */
static bool touch_iov(const struct iovec *v, long n)
{
    bool any = false;
    for (long i = 0; v && i < n && i < 1024; i++)
        any |= hib_touch(v[i].iov_base, v[i].iov_len);
    return any;
}

int fern__hib_retry(long nr, const long *a)
{
    if (!LOAD_RELAXED(&hib_on))
        return 0;
    bool any = false;
    for (int i = 0; i < 6; i++)
        any |= hib_touch((const void *)a[i], 1);
    if (nr == SYS_readv || nr == SYS_writev)
        any |= touch_iov((const struct iovec *)a[1], a[2]);
    if (nr == SYS_recvmsg || nr == SYS_sendmsg) {
        const struct msghdr *m = (const struct msghdr *)a[1];
        if (m) {
            any |= hib_touch(m->msg_name, m->msg_namelen);
            any |= hib_touch(m->msg_control, m->msg_controllen);
            any |= touch_iov(m->msg_iov, (long)m->msg_iovlen);
        }
    }
    return any;
}
