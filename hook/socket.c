/* SPDX-License-Identifier: MIT */
/*
 * Sockets: creating, accepting, connecting, shutting down, and the two
 * options fern-hook reads (SO_RCVTIMEO, SO_SNDTIMEO).
 *
 * A connect that would block on a green thread parks for the write edge and
 * reads SO_ERROR, as a blocking connect does in the kernel; SO_SNDTIMEO
 * bounds it and its expiry gives EINPROGRESS (the kernel's answer). A full
 * AF_UNIX backlog answers EAGAIN with no edge to wait for: the green thread
 * sleeps and retries with back-off, as the blocking kernel call would wait.
 * The timeouts are kept in nanoseconds in the hook's table and also passed
 * to the kernel, which applies them itself while the descriptor is blocking.
 */
#include "hook.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

int socket(int domain, int type, int protocol)
{
    long r = hk_sys(SYS_socket, domain, type, protocol);
    if (r >= 0)
        hk_adopt((int)r, type & SOCK_NONBLOCK, NULL);
    return (int)hk_ret(r);
}

int socketpair(int domain, int type, int protocol, int sv[2])
{
    long r = hk_sys(SYS_socketpair, domain, type, protocol, sv);
    if (r == 0) {
        hk_adopt(sv[0], type & SOCK_NONBLOCK, NULL);
        hk_adopt(sv[1], type & SOCK_NONBLOCK, NULL);
    }
    return (int)hk_ret(r);
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    struct hk_call c = {SYS_accept4, {fd, (long)addr, (long)len, flags}};
    long r = hk_transfer(fd, FERN_READ, 0, &c);
    if (r >= 0)
        hk_adopt((int)r, flags & SOCK_NONBLOCK, NULL);
    return (int)hk_ret(r);
}

int accept(int fd, struct sockaddr *addr, socklen_t *len) { return accept4(fd, addr, len, 0); }

/* The wait of a connect in progress. Returns 0, -errno, or -EINPROGRESS if
 * SO_SNDTIMEO passed. */
static long hk_connect_wait(int fd, struct hk_fd *h, int green)
{
    int64_t dl = hk_deadline(__atomic_load_n(&h->sndto, __ATOMIC_RELAXED));
    for (;;) {
        struct fern__pollent pe = {.fd = fd, .dirs = FERN_WRITE};
        int parkable = green && fern__io_snap(&pe) == 0;
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

static long connect_(int fd, const struct sockaddr *addr, socklen_t len);

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    if (HK_LIKELY(!hk_green()))
        return (int)hk_ret(connect_(fd, addr, len));
    HK_TSAN_ENTER();
    long r = connect_(fd, addr, len);
    HK_TSAN_LEAVE();
    return (int)hk_ret(r);
}

static long connect_(int fd, const struct sockaddr *addr, socklen_t len)
{
    int green = hk_green();
    struct hk_fd *h = hk_fd_find(fd);
    uint32_t st = hk_state(h);
    int ours = (st & (HK_MANAGED | HK_USER_NB)) == HK_MANAGED;
    if (green && ours && !(st & HK_FLIPPED) && hk_flip(fd, h) < 0)
        ours = 0;
    int64_t backoff = 100000, dl = -1;
    for (;;) {
        long r = hk_sys(SYS_connect, fd, addr, len);
        if (r == -EINPROGRESS && ours && (green || (hk_state(h) & HK_FLIPPED)))
            return hk_connect_wait(fd, h, green);
        if (r != -EAGAIN || !ours || !(green || (hk_state(h) & HK_FLIPPED)))
            return r;
        /* Full AF_UNIX backlog on a descriptor the user sees blocking. */
        if (dl < 0)
            dl = hk_deadline(__atomic_load_n(&h->sndto, __ATOMIC_RELAXED));
        if (dl != FERN_FOREVER && fern_now_ns() + backoff > dl)
            return -EAGAIN;
        if (green)
            fern_sleep_ns(backoff);
        else {
            struct timespec ts = {0, (long)backoff};
            hk_sys(SYS_nanosleep, &ts, NULL);
        }
        if (backoff < 10000000)
            backoff *= 2;
    }
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
