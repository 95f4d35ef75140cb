/* SPDX-License-Identifier: MIT */
/*
 * Waiting for many descriptors: poll, ppoll, select, pselect, epoll_wait,
 * epoll_pwait (and _FORTIFY_SOURCE's __poll_chk, __ppoll_chk).
 *
 * On a green thread: ask the kernel first with a zero timeout (most calls
 * end here); with no descriptors, sleep; otherwise park on every descriptor
 * at once through libfern (io/hookapi.h) and ask the kernel again when woken,
 * until the deadline. Each descriptor is registered with the runtime's epoll
 * once, the first time it is waited on, and stays registered until close:
 * a poll loop costs no epoll_ctl per call. The tick snapshot is taken before
 * each zero-timeout check, so an edge between check and park is never lost.
 *
 * Only managed descriptors (hook.h) can be parked on. A set with any other
 * descriptor (stdin, say) runs the call on fern's blocking pool instead: the
 * green thread still parks and the worker runs on, and the hook never
 * registers a descriptor whose close it would not see.
 *
 * A descriptor closed while a green thread waits on it: poll reports it
 * POLLNVAL, select fails with EBADF, epoll_wait on a closed epoll fd fails
 * with EBADF.
 *
 * Signal masks (ppoll, pselect, epoll_pwait). A mask belongs to a kernel
 * thread, and the worker's is shared by all its green threads, so a green
 * thread's wait never changes it. Instead:
 *  - the first, zero-timeout check passes the mask to the kernel, which
 *    applies it atomically for that instant: a signal already pending that
 *    the mask unblocks interrupts the call (EINTR, its handler runs). This
 *    check (masked_first) runs before the rest of the call moves to its
 *    second TSan fiber: ThreadSanitizer runs a handler at the next
 *    intercepted call of the fiber the signal came on, and that second
 *    fiber may never run again;
 *  - if the mask unblocks a signal the worker blocks (the pattern: block
 *    SIGCHLD everywhere, then pselect with a mask that lets it in), the wait
 *    runs on the blocking pool with the mask: that pool thread is then a
 *    kernel thread that takes the signal, the handler runs there and the
 *    call returns EINTR;
 *  - otherwise the green thread parks as without a mask: the mask lets in
 *    nothing the worker does not, and a signal that comes is taken by
 *    whichever thread the kernel picks, as in any multi-threaded program.
 * docs/hooks.md states the rule for users.
 */
#include "hook.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>

#define KSIGSET (_NSIG / 8)

/* NO_EINTR_UNMASKED: a zero-timeout check without the caller's mask is
 * retried when it fails with EINTR. Linux fails select and poll with EINTR
 * when any handler runs during the call, even a zero-timeout one and even
 * under SA_RESTART, and fern's own preemption tick (or ThreadSanitizer's
 * deferral of it) can land in that instant: the caller would see an EINTR
 * for a signal it never sent. A parked green thread is not interrupted by
 * signals either (header comment), so neither is its check. With a mask,
 * EINTR is the mask's point and is returned. */

static long raw_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *m)
{
    return hk_sys(SYS_ppoll, fds, n, ts, m, KSIGSET);
}

/* ppoll without waiting, under `mask` for that instant if not NULL. The
 * zero timeout is a local, not a constant: ppoll writes the time left back,
 * and where Linux ignores a read-only timeout qemu-user fails the whole call
 * with EFAULT. */
static long poll_now(struct pollfd *fds, nfds_t n, const sigset_t *mask)
{
    long r;
    do {
        struct timespec ts = {0, 0};
        r = hk_sys(SYS_ppoll, fds, n, &ts, mask, KSIGSET);
    } while (r == -EINTR && !mask); /* see NO_EINTR_UNMASKED */
    return r;
}

/* Does mask let in a signal the calling kernel thread blocks? Then the
 * wait belongs on the blocking pool (header comment). */
static int mask_unblocks(const sigset_t *mask)
{
    uint64_t cur, m;
    if (!mask || hk_sys(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &cur, KSIGSET) < 0)
        return 0;
    memcpy(&m, mask, sizeof m);
    return (cur & ~m) != 0;
}

/* timeout in ms (< 0: none) -> a deadline. */
static int64_t ms_deadline(int ms)
{
    return ms < 0 ? FERN_FOREVER : fern_now_ns() + (int64_t)ms * 1000000;
}

static int64_t ts_deadline(const struct timespec *ts)
{
    return !ts ? FERN_FOREVER : fern_now_ns() + ts->tv_sec * 1000000000ll + ts->tv_nsec;
}

static int pe_cmp(const void *a, const void *b)
{
    return ((const struct fern__pollent *)a)->fd - ((const struct fern__pollent *)b)->fd;
}

/* Sort by fd and merge duplicates. Returns the count, or -1 if a descriptor
 * is not managed (the caller falls back to the pool). */
static int pe_prepare(struct fern__pollent *pe, int n)
{
    for (int i = 0; i < n; i++)
        if (!(hk_state(hk_fd_find(pe[i].fd)) & HK_MANAGED))
            return -1;
    qsort(pe, (size_t)n, sizeof *pe, pe_cmp);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && pe[m - 1].fd == pe[i].fd)
            pe[m - 1].dirs |= pe[i].dirs;
        else
            pe[m++] = pe[i];
    }
    return m;
}

static int pe_snap(struct fern__pollent *pe, int n)
{
    for (int i = 0; i < n; i++)
        if (fern__io_snap(&pe[i]))
            return -1;
    return 0;
}

/* ---- the blocking-pool fallback ---- */
struct pool_call {
    struct hk_call c;
    long r;
};
static void *pool_run(void *arg)
{
    struct pool_call *pc = arg;
    pc->r = hk_do(&pc->c);
    return NULL;
}
static long on_pool(struct hk_call c)
{
    struct pool_call pc = {c, 0};
    hk_offload(pool_run, &pc);
    return pc.r;
}
static struct timespec *left_ts(int64_t dl, struct timespec *ts)
{
    if (dl == FERN_FOREVER)
        return NULL;
    int64_t left = dl - fern_now_ns();
    if (left < 0)
        left = 0;
    ts->tv_sec = left / 1000000000;
    ts->tv_nsec = left % 1000000000;
    return ts;
}

/* ---- poll ---- */
/* mask_checked: the caller made the first check (masked_first). */
static long poll_green(struct pollfd *fds, nfds_t n, int64_t dl, const sigset_t *mask,
                       int mask_checked)
{
    long r = mask_checked ? 0 : poll_now(fds, n, mask);
    if (r != 0 || (dl != FERN_FOREVER && dl <= fern_now_ns()))
        return r;
    if (mask_unblocks(mask)) {
        struct timespec ts;
        return on_pool((struct hk_call){
            SYS_ppoll, {(long)fds, (long)n, (long)left_ts(dl, &ts), (long)mask, KSIGSET}});
    }
    if (n == 0) {
        fern_sleep_until(dl);
        return 0;
    }
    struct fern__pollent few[8], *pe = n <= 8 ? few : malloc(n * sizeof *pe);
    if (!pe)
        return -ENOMEM;
    int m = 0;
    for (nfds_t i = 0; i < n; i++) {
        if (fds[i].fd < 0)
            continue;
        int dirs = fds[i].events & (POLLOUT | POLLWRNORM | POLLWRBAND) ? FERN_WRITE : 0;
        if (fds[i].events & (POLLIN | POLLPRI | POLLRDNORM | POLLRDBAND | POLLRDHUP) || !dirs)
            dirs |= FERN_READ; /* hang-up and error edges come on the read side */
        pe[m++] = (struct fern__pollent){.fd = fds[i].fd, .dirs = dirs};
    }
    m = m ? pe_prepare(pe, m) : 0;
    for (;;) {
        if (m <= 0 || pe_snap(pe, m)) {
            struct timespec ts;
            r = on_pool((struct hk_call){SYS_ppoll, {(long)fds, (long)n, (long)left_ts(dl, &ts)}});
            break;
        }
        r = poll_now(fds, n, NULL);
        if (r != 0)
            break;
        int k = fern__io_park(pe, m, dl);
        if (k == FERN__PARK_NOMEM) {
            m = 0;
            continue;
        }
        if (k == FERN__PARK_CANCELED) {
            r = -ECANCELED;
            break;
        }
        if (k == 0) {
            r = poll_now(fds, n, NULL);
            break;
        }
        if (k < 0) {
            int gone = pe[-k - 1].fd;
            r = poll_now(fds, n, NULL);
            if (r >= 0) {
                r = 0;
                for (nfds_t i = 0; i < n; i++) {
                    if (fds[i].fd == gone)
                        fds[i].revents = POLLNVAL;
                    r += fds[i].revents != 0;
                }
            }
            break;
        }
    }
    if (pe != few)
        free(pe);
    return r;
}

int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    if (HK_LIKELY(!hk_green())) {
        struct timespec ts = {timeout / 1000, (long)(timeout % 1000) * 1000000};
        return (int)hk_ret(raw_ppoll(fds, n, timeout < 0 ? NULL : &ts, NULL));
    }
    {
        HK_TSAN_ENTER();
        long r_ = poll_green(fds, n, ms_deadline(timeout), NULL, 0);
        HK_TSAN_LEAVE();
        return (int)hk_ret(r_);
    }
}

int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
    if (HK_LIKELY(!hk_green())) {
        struct timespec copy, *tp = NULL; /* the kernel writes the time left back */
        if (ts) {
            copy = *ts;
            tp = &copy;
        }
        return (int)hk_ret(raw_ppoll(fds, n, tp, mask));
    }
    if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000))
        return (int)hk_ret(-EINVAL);
    {
        int64_t dl = ts_deadline(ts);
        long r_ = mask ? poll_now(fds, n, mask) : 0; /* masked_first */
        if (r_ != 0)
            return (int)hk_ret(r_);
        HK_TSAN_ENTER();
        r_ = poll_green(fds, n, dl, mask, mask != NULL);
        HK_TSAN_LEAVE();
        return (int)hk_ret(r_);
    }
}

int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
    if (fdslen / sizeof *fds < n)
        abort();
    return poll(fds, n, timeout);
}

int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
                size_t fdslen)
{
    if (fdslen / sizeof *fds < n)
        abort();
    return ppoll(fds, n, ts, mask);
}

/* ---- select ---- */
struct sel {
    int nfds;
    fd_set *r, *w, *e;
    fd_set in_r, in_w, in_e;
};

static void sel_init(struct sel *s, int nfds, fd_set *rs, fd_set *ws, fd_set *es)
{
    *s = (struct sel){.nfds = nfds, .r = rs, .w = ws, .e = es};
    FD_ZERO(&s->in_r);
    FD_ZERO(&s->in_w);
    FD_ZERO(&s->in_e);
    if (rs)
        s->in_r = *rs;
    if (ws)
        s->in_w = *ws;
    if (es)
        s->in_e = *es;
}

/* pselect6's last argument: the mask and its size. */
struct ksigmask {
    const sigset_t *ss;
    size_t len;
};

/* Zero-timeout check on copies of the caller's sets (under `mask` for that
 * instant if not NULL); the result goes back to the caller only when
 * something is ready (or at the end). */
static long sel_check(struct sel *s, int final, const sigset_t *mask)
{
    fd_set r, w, e;
    long n;
    do { /* see NO_EINTR_UNMASKED */
        r = s->in_r, w = s->in_w, e = s->in_e;
        struct timespec z = {0, 0};
        struct ksigmask sm = {mask, KSIGSET};
        n = hk_sys(SYS_pselect6, s->nfds, s->r ? &r : NULL, s->w ? &w : NULL, s->e ? &e : NULL,
                   &z, mask ? &sm : NULL);
    } while (n == -EINTR && !mask);
    if (n > 0 || (n == 0 && final)) {
        if (s->r)
            *s->r = r;
        if (s->w)
            *s->w = w;
        if (s->e)
            *s->e = e;
    }
    return n;
}

static long select_green(int nfds, fd_set *rs, fd_set *ws, fd_set *es, int64_t dl,
                         const sigset_t *mask, int mask_checked)
{
    if (nfds < 0 || nfds > FD_SETSIZE)
        return -EINVAL;
    struct sel s;
    sel_init(&s, nfds, rs, ws, es);
    int expired = dl != FERN_FOREVER && dl <= fern_now_ns();
    long r = mask_checked && !expired ? 0 : sel_check(&s, expired, mask);
    if (r != 0 || expired)
        return r;
    if (mask_unblocks(mask)) {
        struct timespec ts;
        struct ksigmask sm = {mask, KSIGSET};
        return on_pool((struct hk_call){SYS_pselect6, {nfds, (long)rs, (long)ws, (long)es,
                                                       (long)left_ts(dl, &ts), (long)&sm}});
    }
    int m = 0, count = 0;
    for (int fd = 0; fd < nfds; fd++)
        count += (rs && FD_ISSET(fd, rs)) || (ws && FD_ISSET(fd, ws)) || (es && FD_ISSET(fd, es));
    if (count == 0) {
        fern_sleep_until(dl);
        return sel_check(&s, 1, NULL);
    }
    struct fern__pollent *pe = malloc((size_t)count * sizeof *pe);
    if (!pe)
        return -ENOMEM;
    for (int fd = 0; fd < nfds; fd++) {
        int dirs = ((rs && FD_ISSET(fd, rs)) || (es && FD_ISSET(fd, es)) ? FERN_READ : 0) |
                   (ws && FD_ISSET(fd, ws) ? FERN_WRITE : 0);
        if (dirs)
            pe[m++] = (struct fern__pollent){.fd = fd, .dirs = dirs};
    }
    m = pe_prepare(pe, m);
    for (;;) {
        if (m <= 0 || pe_snap(pe, m)) {
            struct timespec ts;
            r = on_pool((struct hk_call){SYS_pselect6, {nfds, (long)rs, (long)ws, (long)es,
                                                        (long)left_ts(dl, &ts), 0}});
            break;
        }
        r = sel_check(&s, 0, NULL);
        if (r != 0)
            break;
        int k = fern__io_park(pe, m, dl);
        if (k == FERN__PARK_NOMEM) {
            m = 0;
            continue;
        }
        if (k == FERN__PARK_CANCELED) {
            r = -ECANCELED;
            break;
        }
        if (k == 0) {
            r = sel_check(&s, 1, NULL);
            break;
        }
        if (k < 0) {
            r = -EBADF;
            break;
        }
    }
    free(pe);
    return r;
}

int select(int nfds, fd_set *rs, fd_set *ws, fd_set *es, struct timeval *tv)
{
    if (HK_LIKELY(!hk_green())) {
        /* SYS_select where it exists updates *tv as Linux's select does. */
#ifdef SYS_select
        return (int)hk_ret(hk_sys(SYS_select, nfds, rs, ws, es, tv));
#else
        struct timespec ts, *tp = NULL;
        if (tv) {
            ts.tv_sec = tv->tv_sec;
            ts.tv_nsec = tv->tv_usec * 1000;
            tp = &ts;
        }
        long r = hk_sys(SYS_pselect6, nfds, rs, ws, es, tp, NULL);
        if (tv) {
            tv->tv_sec = ts.tv_sec;
            tv->tv_usec = ts.tv_nsec / 1000;
        }
        return (int)hk_ret(r);
#endif
    }
    if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000))
        return (int)hk_ret(-EINVAL);
    int64_t dl = tv ? fern_now_ns() + tv->tv_sec * 1000000000ll + tv->tv_usec * 1000ll
                    : FERN_FOREVER;
    HK_TSAN_ENTER();
    long r = select_green(nfds, rs, ws, es, dl, NULL, 0);
    HK_TSAN_LEAVE();
    if (tv) { /* Linux writes back the time not slept */
        int64_t left = dl - fern_now_ns();
        if (left < 0 || r != 0)
            left = left < 0 ? 0 : left;
        tv->tv_sec = left / 1000000000;
        tv->tv_usec = (left % 1000000000) / 1000;
    }
    return (int)hk_ret(r);
}

int pselect(int nfds, fd_set *rs, fd_set *ws, fd_set *es, const struct timespec *ts,
            const sigset_t *mask)
{
    if (HK_LIKELY(!hk_green())) {
        struct timespec copy, *tp = NULL; /* pselect leaves the caller's timeout alone */
        if (ts) {
            copy = *ts;
            tp = &copy;
        }
        struct ksigmask sm = {mask, KSIGSET};
        return (int)hk_ret(hk_sys(SYS_pselect6, nfds, rs, ws, es, tp, mask ? &sm : NULL));
    }
    if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000))
        return (int)hk_ret(-EINVAL);
    {
        int64_t dl = ts_deadline(ts);
        long r_ = 0;
        if (mask && nfds >= 0 && nfds <= FD_SETSIZE) { /* masked_first */
            struct sel s;
            sel_init(&s, nfds, rs, ws, es);
            r_ = sel_check(&s, 0, mask);
            if (r_ != 0)
                return (int)hk_ret(r_);
        }
        HK_TSAN_ENTER();
        r_ = select_green(nfds, rs, ws, es, dl, mask, mask != NULL);
        HK_TSAN_LEAVE();
        return (int)hk_ret(r_);
    }
}

/* ---- epoll ---- */
static long epoll_green(int epfd, struct epoll_event *ev, int max, int64_t dl,
                        const sigset_t *mask, int mask_checked)
{
    long r = mask_checked ? 0 : hk_sys(SYS_epoll_pwait, epfd, ev, max, 0, mask, KSIGSET);
    if (r != 0 || (dl != FERN_FOREVER && dl <= fern_now_ns()))
        return r;
    struct fern__pollent pe = {.fd = epfd, .dirs = FERN_READ};
    if (!mask_unblocks(mask))
        mask = NULL;
    int parkable = !mask && (hk_state(hk_fd_find(epfd)) & HK_MANAGED);
    for (;;) {
        if (!parkable || fern__io_snap(&pe)) {
            long ms = -1;
            if (dl != FERN_FOREVER) {
                int64_t left = dl - fern_now_ns();
                ms = left <= 0 ? 0 : (long)((left + 999999) / 1000000);
            }
            return on_pool(
                (struct hk_call){SYS_epoll_pwait, {epfd, (long)ev, max, ms, (long)mask, KSIGSET}});
        }
        r = hk_sys(SYS_epoll_pwait, epfd, ev, max, 0, NULL, KSIGSET);
        if (r != 0)
            return r;
        int k = fern__io_park(&pe, 1, dl);
        if (k == FERN__PARK_CANCELED)
            return -ECANCELED;
        if (k == 0)
            return hk_sys(SYS_epoll_pwait, epfd, ev, max, 0, NULL, KSIGSET);
        if (k < 0)
            return -EBADF;
    }
}

int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
    if (HK_LIKELY(!hk_green()))
        return (int)hk_ret(hk_sys(SYS_epoll_pwait, epfd, ev, max, timeout, mask, KSIGSET));
    if (max <= 0)
        return (int)hk_ret(-EINVAL);
    {
        int64_t dl = ms_deadline(timeout);
        long r_ = mask ? hk_sys(SYS_epoll_pwait, epfd, ev, max, 0, mask, KSIGSET) : 0;
        if (r_ != 0) /* masked_first */
            return (int)hk_ret(r_);
        HK_TSAN_ENTER();
        r_ = epoll_green(epfd, ev, max, dl, mask, mask != NULL);
        HK_TSAN_LEAVE();
        return (int)hk_ret(r_);
    }
}

int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
    return epoll_pwait(epfd, ev, max, timeout, NULL);
}
