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

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int hk_on;

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
    pthread_atfork(NULL, NULL, hk_child);
    __atomic_store_n(&hk_on, on, __ATOMIC_RELAXED);
}

/* Not inlined: errno's address must be computed after any park (hook.h). */
__attribute__((noinline)) void hk_set_errno(int e) { errno = e; }

long hk_flip(int fd, struct hk_fd *h)
{
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
    long fl = hk_sys(SYS_fcntl, fd, F_GETFL);
    if (fl < 0)
        return fl;
    if (!(fl & O_NONBLOCK)) {
        r = hk_sys(SYS_fcntl, fd, F_SETFL, fl | O_NONBLOCK);
        if (r < 0)
            return r;
    }
    __atomic_fetch_or(&h->st, HK_FLIPPED, __ATOMIC_ACQ_REL);
    return 0;
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

long hk_plain_retry(int fd, int dir, const struct hk_call *c)
{
    struct hk_fd *h = hk_fd_find(fd);
    uint32_t st = hk_state(h);
    /* Only a descriptor we switched to non-blocking behind a user who sees
     * it blocking owes this thread a blocking call. */
    if ((st & (HK_MANAGED | HK_USER_NB | HK_FLIPPED)) != (HK_MANAGED | HK_FLIPPED))
        return -EAGAIN;
    int64_t dl = hk_deadline(__atomic_load_n(dir == FERN_READ ? &h->rcvto : &h->sndto,
                                             __ATOMIC_RELAXED));
    for (;;) {
        long w = hk_poll_one(fd, dir, dl);
        if (w == 0)
            return -EAGAIN; /* SO_RCVTIMEO / SO_SNDTIMEO passed, as in the kernel */
        if (w < 0)
            return w;
        long r = hk_do(c);
        if (r != -EAGAIN)
            return r;
    }
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

static long green_transfer(int fd, int dir, int nowait, const struct hk_call *c)
{
    struct hk_fd *h = hk_fd_find(fd);
    uint32_t st = hk_state(h);
    if (nowait || (st & (HK_MANAGED | HK_USER_NB)) != HK_MANAGED)
        return hk_do(c); /* not ours, or the user asked for EAGAIN */
    if (!(st & HK_FLIPPED) && hk_flip(fd, h) < 0)
        return hk_do(c);
    int64_t dl = -1;
    size_t ask = short_ask(dir, c);
    int last = 0; /* the deadline passed while skipping: one call, then EAGAIN */
    for (;;) {
        struct fern__pollent pe = {.fd = fd, .dirs = dir};
        if (fern__io_snap(&pe)) {
            /* The poller will not take it: block this worker instead. */
            long r = hk_do(c);
            return r == -EAGAIN ? hk_plain_retry(fd, dir, c) : r;
        }
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
        long r = hk_do(c);
        if (r != -EAGAIN) {
            if (token && r > 0 && (size_t)r < ask)
                fern__io_short(&pe, token);
            return r;
        }
        if (last)
            return -EAGAIN;
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

long hk_green_transfer(int fd, int dir, int nowait, const struct hk_call *c)
{
    HK_TSAN_ENTER();
    long r = green_transfer(fd, dir, nowait, c);
    HK_TSAN_LEAVE();
    return r;
}
