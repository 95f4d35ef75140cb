/* SPDX-License-Identifier: MIT */
/*
 * fern-hook's start-up and the waits every family shares (model: hook.h).
 *
 * Start-up runs as a constructor: it reads FERN_HOOK (0 turns hooking off,
 * 1 or unset/empty leaves it on; anything else is refused, below) and
 * registers the fork handler that turns hooking off in a child, where
 * only the forking thread exists and no runtime can run (the child usually
 * execs; plain-thread behaviour is what it needs). Nothing here looks up a
 * symbol: the transfer calls are raw system calls, and the name functions
 * (names.c) resolve libc's versions once, here, outside any malloc path.
 */
#include "hook.h"
#include "lock.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>

int hk_on;
#if defined(HK_SANITIZED)
int hk_started;
#endif

void hk_names_resolve(void) HK_HIDDEN;

static void hk_child(void) { __atomic_store_n(&hk_on, 0, __ATOMIC_RELAXED); }

/* FERN_HOOK is checked as src/config.c checks every other FERN_* variable:
 * "0" or "1", unset or empty meaning the default (on), anything else is not
 * guessed at. The other variables make fern_init fail with EINVAL; this one
 * is read while the program loads, before main and before any fern call
 * could report a failure, so the refusal is the process's: the same one line
 * on stderr, then exit status 1, rather than running with hooking silently
 * on ("banana") or off ("off", "false") against what the user meant. */
__attribute__((constructor)) static void hk_start(void)
{
    const char *v = getenv("FERN_HOOK");
    int on = 1;
    if (v && *v) {
        if (strcmp(v, "0") == 0) {
            on = 0;
        } else if (strcmp(v, "1") != 0) {
            fprintf(stderr, "fern: FERN_HOOK=\"%s\" is not valid: expected 0 (off) or 1 (on)\n",
                    v);
            exit(1);
        }
    }
    hk_names_resolve();
    lk_resolve();
    pthread_atfork(NULL, NULL, hk_child);
    /* fern_close's raw close (src/io/io.c) drops our entry as close does. */
    __atomic_store_n(&fern__hook_close, hk_drop, __ATOMIC_RELEASE);
    __atomic_store_n(&hk_on, on, __ATOMIC_RELAXED);
#if defined(HK_SANITIZED)
    __atomic_store_n(&hk_started, 1, __ATOMIC_RELEASE);
#endif
}

/* Not inlined: errno's address must be computed after any park (hook.h). */
__attribute__((noinline)) void hk_set_errno(int e) { errno = e; }

long hk_check(int fd, struct hk_fd *h)
{
    if (hk_state(h) & HK_CHECKED)
        return 0;
    struct stat sb;
    long r = hk_sys(SYS_fstat, fd, &sb);
    if (r < 0)
        return r;
    if ((uint64_t)sb.st_dev != __atomic_load_n(&h->dev, __ATOMIC_RELAXED) ||
        (uint64_t)sb.st_ino != __atomic_load_n(&h->ino, __ATOMIC_RELAXED)) {
        /* Closed behind the hook's back and the number reused (fd.c). */
        __atomic_store_n(&h->st, 0, __ATOMIC_RELEASE);
        return -EBADF;
    }
    __atomic_fetch_or(&h->st, HK_CHECKED, __ATOMIC_ACQ_REL);
    return 0;
}

long hk_desc_nonblock(int fd)
{
    long fl = hk_sys(SYS_fcntl, fd, F_GETFL);
    if (fl < 0)
        return fl;
    struct hk_fd *h = hk_fd_find(fd);
    /* socket.c's own one-attempt flag is not the user's. */
    if (hk_state(h) & HK_WINDOW)
        return 0;
    return (fl & O_NONBLOCK) != 0;
}

long hk_poll_one(int fd, int dir, int64_t deadline)
{
    struct pollfd p = {.fd = fd, .events = (short)(dir == FERN_READ ? POLLIN : POLLOUT)};
    struct timespec ts, *tsp = NULL;
    if (deadline != FERN_FOREVER) {
        int64_t left = deadline - fern_now_ns();
        if (left <= 0)
            return 0;
        ts.tv_sec = left / 1000000000;
        ts.tv_nsec = left % 1000000000;
        tsp = &ts;
    }
    long r = hk_sys(SYS_ppoll, &p, 1, tsp, NULL, 0);
    return r;
}

/* The size a read asks for when the short-transfer rule applies to it
 * (read, and recv/recvfrom without flags: one stream, nothing left queued
 * by a peek or a partial wait), else 0. Sizes above 1 GiB do not qualify:
 * the kernel stops a single call near 2 GiB for its own reasons. */
static size_t short_ask(int dir, const struct hk_call *c)
{
    if (dir != FERN_READ || !(c->nr == SYS_read || (c->nr == SYS_recvfrom && c->a[3] == 0)))
        return 0;
    size_t n = (size_t)c->a[2];
    return n - 1 < (1u << 30) ? n : 0;
}

/* The one-attempt form of c: the same call with MSG_DONTWAIT, or read,
 * readv, write, writev as preadv2 / pwritev2 with RWF_NOWAIT at the file
 * position (offset -1; the high half of the offset is 0). `iov` holds the
 * vector of a flat read or write. Returns 0, or -1 if c has none. */
static int nowait_form(const struct hk_call *c, struct hk_call *nw, struct iovec *iov)
{
    *nw = *c;
    switch (c->nr) {
    case SYS_read:
    case SYS_write:
        iov->iov_base = (void *)c->a[1];
        iov->iov_len = (size_t)c->a[2];
        *nw = (struct hk_call){c->nr == SYS_read ? SYS_preadv2 : SYS_pwritev2,
                               {c->a[0], (long)iov, 1, -1, 0, RWF_NOWAIT}};
        return 0;
    case SYS_readv:
    case SYS_writev:
        *nw = (struct hk_call){c->nr == SYS_readv ? SYS_preadv2 : SYS_pwritev2,
                               {c->a[0], c->a[1], c->a[2], -1, 0, RWF_NOWAIT}};
        return 0;
    case SYS_recvfrom:
    case SYS_sendto:
        nw->a[3] |= MSG_DONTWAIT;
        return 0;
    case SYS_recvmsg:
    case SYS_sendmsg:
        nw->a[2] |= MSG_DONTWAIT;
        return 0;
    case SYS_recvmmsg:
    case SYS_sendmmsg:
        nw->a[3] |= MSG_DONTWAIT;
        return 0;
    default:
        return -1;
    }
}

/* Park until fd is ready in dir (a zero-timeout poll first, then the
 * fd's edge), within the deadline: 1 ready, 0 timed out, -errno. */
static long wait_ready(int fd, int dir, int64_t dl)
{
    for (;;) {
        struct fern__pollent pe = {.fd = fd, .dirs = dir};
        if (fern__io_snap(&pe))
            return hk_poll_one(fd, dir, dl); /* the poller will not take it */
        struct pollfd p = {.fd = fd, .events = (short)(dir == FERN_READ ? POLLIN : POLLOUT)};
        struct timespec zero = {0, 0};
        long w = hk_sys(SYS_ppoll, &p, 1, &zero, NULL, 0);
        if (w != 0)
            return w;
        int k = fern__io_park(&pe, 1, dl);
        if (k == FERN__PARK_CANCELED)
            return -ECANCELED;
        if (k == 0)
            return 0;
        if (k < 0)
            return -EBADF;
    }
}

static long green_transfer(int fd, int dir, int nowait, const struct hk_call *c, int64_t dl)
{
    struct hk_fd *h = hk_fd_find(fd);
    uint32_t st = hk_state(h);
    struct hk_call nw;
    struct iovec iov;
    if (nowait || nowait_form(c, &nw, &iov))
        return hk_do(c); /* the user asked for one attempt */
    if (!(st & HK_MANAGED) || hk_check(fd, h) < 0) {
        /* Not a descriptor the poller can wait on: perhaps a file. */
        if (c->nr != SYS_read && c->nr != SYS_readv && c->nr != SYS_write &&
            c->nr != SYS_writev)
            return hk_do(c);
        long r = hk_file_io(fd, c, &nw);
        if (r != HK_ADOPTED)
            return r;
        h = hk_fd_find(fd); /* a tty, managed from now on: poll first */
        st = hk_state(h);
    }
    if (dl < 0 && (st & HK_POLLFIRST))
        dl = hk_deadline(__atomic_load_n(dir == FERN_READ ? &h->rcvto : &h->sndto,
                                         __ATOMIC_RELAXED));
    size_t ask = short_ask(dir, c);
    int last = 0; /* the deadline passed while skipping: one call, then EAGAIN */
    for (;;) {
        if (hk_state(h) & HK_POLLFIRST) {
            /* No per-call non-blocking form for this file: wait until poll
             * says ready, then the user's own call. */
            long r = hk_desc_nonblock(fd);
            if (r != 0)
                return r < 0 ? r : hk_do(c);
            long w = wait_ready(fd, dir, dl);
            if (w == 0)
                return -EAGAIN;
            return w < 0 ? w : hk_do(c);
        }
        struct fern__pollent pe = {.fd = fd, .dirs = dir};
        if (fern__io_snap(&pe))
            return hk_do(c); /* the poller will not take it: the plain call */
        uint32_t token = 0;
        if (ask) {
            /* The last read of this TCP socket was short and no edge came
             * since: this one could only say EAGAIN, so wait first. */
            if (!last && (pe.drained & dir)) {
                if (dl < 0)
                    dl = hk_deadline(__atomic_load_n(&h->rcvto, __ATOMIC_RELAXED));
                int k = fern__io_park(&pe, 1, dl);
                if (k == FERN__PARK_CANCELED)
                    return -ECANCELED;
                if (k < 0)
                    return -EBADF;
                last = k == 0;
                continue;
            }
            token = fern__io_begin(&pe);
        }
        /* A form of the call with RWF_NOWAIT (nw.nr != c->nr) where the
         * kernel has no preadv2/pwritev2 (qemu-user: the runtime's probe)
         * cannot be made: as for a tty that refuses it. */
        long r = nw.nr != c->nr && !fern__file_rwf() ? -EOPNOTSUPP : hk_do(&nw);
        if (r == -EOPNOTSUPP && nw.nr != c->nr) {
            /* RWF_NOWAIT refused (a tty), or no preadv2 at all: remember,
             * and wait with poll. */
            __atomic_fetch_or(&h->st, HK_POLLFIRST, __ATOMIC_ACQ_REL);
            if (dl < 0)
                dl = hk_deadline(__atomic_load_n(dir == FERN_READ ? &h->rcvto : &h->sndto,
                                                 __ATOMIC_RELAXED));
            continue;
        }
        if (r != -EAGAIN) {
            if (token && r > 0 && (size_t)r < ask)
                fern__io_short(&pe, token);
            return r;
        }
        if (last)
            return -EAGAIN;
        /* A description the user (or another holder) made non-blocking
         * owes EAGAIN, not a wait. */
        long nb = hk_desc_nonblock(fd);
        if (nb != 0)
            return nb < 0 ? nb : -EAGAIN;
        if (dl < 0)
            dl = hk_deadline(__atomic_load_n(dir == FERN_READ ? &h->rcvto : &h->sndto,
                                             __ATOMIC_RELAXED));
        int k = fern__io_park(&pe, 1, dl);
        if (k == FERN__PARK_CANCELED)
            return -ECANCELED;
        if (k == 0)
            return -EAGAIN;
        if (k < 0)
            return -EBADF; /* closed while we waited */
    }
}

long hk_green_transfer(int fd, int dir, int nowait, const struct hk_call *c, int64_t deadline)
{
    HK_TSAN_ENTER();
    long r = green_transfer(fd, dir, nowait, c, deadline);
    HK_TSAN_LEAVE();
    return r;
}
