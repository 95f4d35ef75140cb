/* SPDX-License-Identifier: MIT */
/*
 * Sockets: creating, accepting, connecting, shutting down, and the two
 * options fern-hook reads (SO_RCVTIMEO, SO_SNDTIMEO).
 *
 * accept and connect have no per-call non-blocking flag, and a blocking
 * attempt would stop the worker (a connect for a round trip, an accept until
 * a client comes). On a green thread and a blocking description, each
 * attempt runs with O_NONBLOCK on for that one system call (set, call, put
 * back: hk_window), which F_GETFL does not show meanwhile (HK_WINDOW); a
 * connect in progress goes on in the kernel once the flag is back, so the
 * thread then parks for the write edge and reads SO_ERROR, as a blocking
 * connect does in the kernel; SO_SNDTIMEO bounds it and its expiry gives
 * EINPROGRESS (the kernel's answer). An accept that finds no client parks
 * for the read edge within SO_RCVTIMEO. What the window can still show:
 * another process sharing the listening socket's description that starts
 * an accept during those few microseconds gets EAGAIN (docs/hooks.md). A full
 * AF_UNIX backlog answers EAGAIN with no edge to wait for: the green thread
 * sleeps and retries with back-off, as the blocking kernel call would wait.
 * The timeouts are kept in nanoseconds in the hook's table and also passed
 * to the kernel, which applies them itself while the descriptor is blocking.
 */
#include "hook.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

int socket(int domain, int type, int protocol)
{
    long r = hk_sys(SYS_socket, domain, type, protocol);
    if (r >= 0)
        hk_adopt((int)r, NULL);
    return (int)hk_ret(r);
}

int socketpair(int domain, int type, int protocol, int sv[2])
{
    long r = hk_sys(SYS_socketpair, domain, type, protocol, sv);
    if (r == 0) {
        hk_adopt(sv[0], NULL);
        hk_adopt(sv[1], NULL);
    }
    return (int)hk_ret(r);
}

/* c, made once with O_NONBLOCK on the description and back off at once.
 * `fl` is the description's flags (blocking). */
static long hk_window(int fd, struct hk_fd *h, long fl, const struct hk_call *c)
{
    __atomic_fetch_or(&h->st, HK_WINDOW, __ATOMIC_ACQ_REL);
    long r = hk_sys(SYS_fcntl, fd, F_SETFL, fl | O_NONBLOCK);
    if (r == 0) {
        r = hk_do(c);
        hk_sys(SYS_fcntl, fd, F_SETFL, fl);
    }
    __atomic_fetch_and(&h->st, ~HK_WINDOW, __ATOMIC_ACQ_REL);
    return r;
}

/* The description's flags if a green thread may make c with the window
 * (managed, blocking, still the file it was adopted for), else -1. */
static long window_flags(int fd, struct hk_fd *h)
{
    if (!(hk_state(h) & HK_MANAGED) || hk_check(fd, h) < 0)
        return -1;
    long fl = hk_sys(SYS_fcntl, fd, F_GETFL);
    return fl < 0 || (fl & O_NONBLOCK) ? -1 : fl;
}

static long accept_green(int fd, const struct hk_call *c)
{
    struct hk_fd *h = hk_fd_find(fd);
    long fl = window_flags(fd, h);
    if (fl < 0)
        return hk_do(c);
    int64_t dl = -1;
    for (;;) {
        struct fern__pollent pe = {.fd = fd, .dirs = FERN_READ};
        if (fern__io_snap(&pe))
            return hk_do(c);
        long r = hk_window(fd, h, fl, c);
        if (r != -EAGAIN)
            return r;
        if (dl < 0)
            dl = hk_deadline(__atomic_load_n(&h->rcvto, __ATOMIC_RELAXED));
        int k = fern__io_park(&pe, 1, dl);
        if (k == FERN__PARK_CANCELED)
            return -ECANCELED;
        if (k == 0)
            return -EAGAIN;
        if (k < 0)
            return -EBADF;
    }
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    struct hk_call c = {SYS_accept4, {fd, (long)addr, (long)len, flags}};
    long r;
    if (HK_LIKELY(!hk_green())) {
        r = hk_do(&c);
    } else {
        HK_TSAN_ENTER();
        r = accept_green(fd, &c);
        HK_TSAN_LEAVE();
    }
    if (r >= 0)
        hk_adopt((int)r, NULL);
    return (int)hk_ret(r);
}

int accept(int fd, struct sockaddr *addr, socklen_t *len) { return accept4(fd, addr, len, 0); }

/* The wait of a connect in progress on a green thread. Returns 0, -errno,
 * or -EINPROGRESS if SO_SNDTIMEO passed. */
static long hk_connect_wait(int fd, struct hk_fd *h)
{
    int64_t dl = hk_deadline(__atomic_load_n(&h->sndto, __ATOMIC_RELAXED));
    for (;;) {
        struct fern__pollent pe = {.fd = fd, .dirs = FERN_WRITE};
        int parkable = fern__io_snap(&pe) == 0;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        struct timespec zero = {0, 0};
        long w = hk_sys(SYS_ppoll, &p, 1, &zero, NULL, 0);
        if (w == 0) {
            if (parkable) {
                int k = fern__io_park(&pe, 1, dl);
                if (k == FERN__PARK_CANCELED)
                    return -ECANCELED;
                if (k < 0)
                    return -EBADF;
                w = k;
            } else {
                w = hk_poll_one(fd, FERN_WRITE, dl);
            }
            if (w == 0)
                return -EINPROGRESS;
            if (w < 0)
                return w;
            continue; /* woken: confirm with the kernel */
        }
        if (w < 0)
            return w;
        int err = 0;
        socklen_t el = sizeof err;
        long r = hk_sys(SYS_getsockopt, fd, SOL_SOCKET, SO_ERROR, &err, &el);
        return r < 0 ? r : -err;
    }
}

static long connect_green(int fd, const struct sockaddr *addr, socklen_t len)
{
    struct hk_call c = {SYS_connect, {fd, (long)addr, len}};
    struct hk_fd *h = hk_fd_find(fd);
    long fl = window_flags(fd, h);
    if (fl < 0)
        return hk_do(&c);
    int64_t backoff = 100000, dl = -1;
    for (;;) {
        long r = hk_window(fd, h, fl, &c);
        if (r == -EINPROGRESS)
            return hk_connect_wait(fd, h);
        if (r != -EAGAIN)
            return r;
        /* A full AF_UNIX backlog on a descriptor the user sees blocking:
         * the kernel's blocking call would wait for room, with no edge to
         * wait for here. */
        if (dl < 0)
            dl = hk_deadline(__atomic_load_n(&h->sndto, __ATOMIC_RELAXED));
        if (dl != FERN_FOREVER && fern_now_ns() + backoff > dl)
            return -EAGAIN;
        fern_sleep_ns(backoff);
        if (backoff < 10000000)
            backoff *= 2;
    }
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    if (HK_LIKELY(!hk_green()))
        return (int)hk_ret(hk_sys(SYS_connect, fd, addr, len));
    HK_TSAN_ENTER();
    long r = connect_green(fd, addr, len);
    HK_TSAN_LEAVE();
    return (int)hk_ret(r);
}

int shutdown(int fd, int how) { return (int)hk_ret(hk_sys(SYS_shutdown, fd, how)); }

int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    long r = hk_sys(SYS_setsockopt, fd, level, name, val, len);
    if (r == 0 && level == SOL_SOCKET && val) {
        struct hk_fd *h = hk_fd_find(fd);
        int64_t ns = -1;
        if ((name == SO_RCVTIMEO_OLD || name == SO_SNDTIMEO_OLD) && len >= sizeof(struct timeval)) {
            const struct timeval *tv = val;
            ns = (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000;
        }
#ifdef SO_RCVTIMEO_NEW
        if ((name == SO_RCVTIMEO_NEW || name == SO_SNDTIMEO_NEW) && len >= 2 * sizeof(int64_t)) {
            const int64_t *tv = val;
            ns = tv[0] * 1000000000 + tv[1] * 1000;
        }
#endif
        if (ns >= 0 && (hk_state(h) & HK_MANAGED)) {
#ifdef SO_RCVTIMEO_NEW
            int rcv = name == SO_RCVTIMEO_OLD || name == SO_RCVTIMEO_NEW;
#else
            int rcv = name == SO_RCVTIMEO_OLD;
#endif
            __atomic_store_n(rcv ? &h->rcvto : &h->sndto, ns, __ATOMIC_RELAXED);
        }
    }
    return (int)hk_ret(r);
}

int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    return (int)hk_ret(hk_sys(SYS_getsockopt, fd, level, name, val, len));
}
