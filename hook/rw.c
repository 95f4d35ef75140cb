/* SPDX-License-Identifier: MIT */
/*
 * Reads and writes: read, readv, write, writev, recv, recvfrom, recvmsg,
 * send, sendto, sendmsg, and the _FORTIFY_SOURCE entry points that code
 * built with it calls instead (__read_chk, __recv_chk, __recvfrom_chk).
 *
 * Each is one system call kept in a struct hk_call and handed to
 * hk_transfer (hook.h): on a green thread, a managed descriptor whose
 * description is blocking gets one non-blocking attempt (MSG_DONTWAIT,
 * RWF_NOWAIT), then a park and a retry. MSG_DONTWAIT from the user asks for
 * one attempt and gets it. Because the attempts are non-blocking where the
 * user's call would have blocked, two promises of the blocking call are kept
 * here: a write or send moves every byte (rest_flat, rest_iov), and a
 * recv(MSG_WAITALL) on a stream socket fills its buffer (waitall_*), both
 * within one deadline.
 *
 * Files are never managed (no hooked call creates a descriptor the poller
 * can wait on for them): a green thread's read, readv, write or writev of an
 * unmanaged descriptor goes to file.c's hk_file_io, which serves a page-cache
 * hit on the worker and sends a call that would wait for the disk off it.
 */
#include "hook.h"

#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

ssize_t read(int fd, void *buf, size_t n)
{
    struct hk_call c = {SYS_read, {fd, (long)buf, (long)n}};
    return hk_ret(hk_transfer(fd, FERN_READ, 0, &c));
}

/* A blocking write or send moves every byte (pipes and stream sockets) or
 * fails; a non-blocking attempt may stop short. Where the hook made the
 * attempt non-blocking behind a user whose description is blocking, it
 * finishes the job: the rest goes out with more waits, and an error or
 * deadline after some bytes went returns the count so far, as the kernel's
 * blocking call does when interrupted. A plain thread's call was the
 * kernel's blocking one: a short count there is the kernel's, kept. */
static int owes_all(int fd)
{
    uint32_t st = hk_state(hk_fd_find(fd));
    return hk_green() && (st & (HK_MANAGED | HK_POLLFIRST)) == HK_MANAGED &&
           hk_desc_nonblock(fd) == 0;
}

/* c's buffer is a[1] with length a[2]; r bytes of it went. */
static long rest_flat(int fd, int nowait, struct hk_call *c, long r)
{
    long done = 0;
    while (r > 0 && r < c->a[2] && !nowait && owes_all(fd)) {
        done += r;
        c->a[1] += r;
        c->a[2] -= r;
        r = hk_transfer(fd, FERN_WRITE, 0, c);
    }
    return r < 0 && done ? done : r + done;
}

/* r bytes of the iovec `iov` (cnt entries) went. The call reads its iovec
 * from c's arguments (writev: m is NULL) or from the msghdr m (sendmsg: c
 * points at m, a copy; the control data went with the first bytes). */
static long rest_iov(int fd, struct hk_call *c, long r, const struct iovec *iov, size_t cnt,
                     struct msghdr *m)
{
    size_t total = 0;
    for (size_t i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    if (r <= 0 || (size_t)r >= total || cnt > IOV_MAX || !owes_all(fd))
        return r;
    struct iovec *v = malloc(cnt * sizeof *v);
    if (!v)
        return r;
    memcpy(v, iov, cnt * sizeof *v);
    size_t first = 0;
    long done = 0;
    for (;;) {
        done += r;
        while (r > 0) { /* skip what went */
            size_t take = (size_t)r < v[first].iov_len ? (size_t)r : v[first].iov_len;
            v[first].iov_base = (char *)v[first].iov_base + take;
            v[first].iov_len -= take;
            r -= (long)take;
            if (v[first].iov_len == 0)
                first++;
        }
        while (first < cnt && v[first].iov_len == 0)
            first++;
        if (first == cnt)
            break;
        if (m) {
            m->msg_iov = v + first;
            m->msg_iovlen = cnt - first;
            m->msg_control = NULL;
            m->msg_controllen = 0;
        } else {
            c->a[1] = (long)(v + first);
            c->a[2] = (long)(cnt - first);
        }
        r = hk_transfer(fd, FERN_WRITE, 0, c);
        if (r <= 0)
            break;
    }
    free(v);
    return done;
}

ssize_t write(int fd, const void *buf, size_t n)
{
    struct hk_call c = {SYS_write, {fd, (long)buf, (long)n}};
    long r = hk_transfer(fd, FERN_WRITE, 0, &c);
    if (__builtin_expect(r > 0 && (size_t)r < n, 0))
        r = rest_flat(fd, 0, &c, r);
    return hk_ret(r);
}

ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    struct hk_call c = {SYS_readv, {fd, (long)iov, cnt}};
    return hk_ret(hk_transfer(fd, FERN_READ, 0, &c));
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    struct hk_call c = {SYS_writev, {fd, (long)iov, cnt}};
    long r = hk_transfer(fd, FERN_WRITE, 0, &c);
    if (__builtin_expect(r > 0, 1) && cnt > 0)
        r = rest_iov(fd, &c, r, iov, (size_t)cnt, NULL);
    return hk_ret(r);
}

/* MSG_WAITALL on a stream socket: the kernel's blocking call returns
 * only when the buffer is full, at end of file, on an error or signal, or
 * when SO_RCVTIMEO passes (the count so far, or EAGAIN if none). The
 * attempts here are non-blocking, so the rest is asked for again within the
 * one deadline. With MSG_PEEK the data stays queued and a second attempt
 * would see it again: left to one attempt. */
static int waitall_applies(int fd, int flags)
{
    if ((flags & (MSG_WAITALL | MSG_DONTWAIT | MSG_PEEK)) != MSG_WAITALL || !hk_green() ||
        !(hk_state(hk_fd_find(fd)) & HK_MANAGED))
        return 0;
    int type = 0;
    socklen_t tl = sizeof type;
    return hk_sys(SYS_getsockopt, fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 &&
           type == SOCK_STREAM;
}

static int64_t rcv_deadline(int fd)
{
    struct hk_fd *h = hk_fd_find(fd);
    return h ? hk_deadline(__atomic_load_n(&h->rcvto, __ATOMIC_RELAXED)) : FERN_FOREVER;
}

static long waitall_flat(int fd, struct hk_call *c, long r)
{
    int64_t dl = rcv_deadline(fd);
    long done = 0;
    while (r > 0 && r < c->a[2]) {
        done += r;
        c->a[1] += r;
        c->a[2] -= r;
        r = hk_green_transfer(fd, FERN_READ, 0, c, dl);
    }
    return r < 0 && done ? done : r + done;
}

static long waitall_msg(int fd, struct msghdr *m, int flags, long r)
{
    size_t cnt = m->msg_iovlen, total = 0;
    for (size_t i = 0; i < cnt; i++)
        total += m->msg_iov[i].iov_len;
    if (r <= 0 || (size_t)r >= total || cnt > IOV_MAX)
        return r;
    struct iovec *v = malloc(cnt * sizeof *v);
    if (!v)
        return r;
    memcpy(v, m->msg_iov, cnt * sizeof *v);
    /* Later attempts go into the rest of the vector with no room for
     * control data or an address: those came with the first bytes. */
    struct msghdr rest = {0};
    struct hk_call c = {SYS_recvmsg, {fd, (long)&rest, flags}};
    int64_t dl = rcv_deadline(fd);
    size_t first = 0;
    long done = 0;
    for (;;) {
        done += r;
        while (r > 0) {
            size_t take = (size_t)r < v[first].iov_len ? (size_t)r : v[first].iov_len;
            v[first].iov_base = (char *)v[first].iov_base + take;
            v[first].iov_len -= take;
            r -= (long)take;
            if (v[first].iov_len == 0)
                first++;
        }
        while (first < cnt && v[first].iov_len == 0)
            first++;
        if (first == cnt)
            break;
        rest.msg_iov = v + first;
        rest.msg_iovlen = cnt - first;
        r = hk_green_transfer(fd, FERN_READ, 0, &c, dl);
        if (r <= 0)
            break;
        m->msg_flags |= rest.msg_flags;
    }
    free(v);
    return done;
}

ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fl)
{
    struct hk_call c = {SYS_recvfrom, {fd, (long)buf, (long)n, flags, (long)from, (long)fl}};
    long r = hk_transfer(fd, FERN_READ, flags & MSG_DONTWAIT, &c);
    if (__builtin_expect(r > 0 && (size_t)r < n && (flags & MSG_WAITALL), 0) &&
        waitall_applies(fd, flags)) {
        c.a[4] = c.a[5] = 0; /* the address came with the first bytes */
        r = waitall_flat(fd, &c, r);
    }
    return hk_ret(r);
}

ssize_t recv(int fd, void *buf, size_t n, int flags) { return recvfrom(fd, buf, n, flags, NULL, NULL); }

ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
    struct hk_call c = {SYS_recvmsg, {fd, (long)m, flags}};
    long r = hk_transfer(fd, FERN_READ, flags & MSG_DONTWAIT, &c);
    if (__builtin_expect(r > 0 && (flags & MSG_WAITALL), 0) && m && m->msg_iovlen > 0 &&
        waitall_applies(fd, flags))
        r = waitall_msg(fd, m, flags, r);
    return hk_ret(r);
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to,
               socklen_t tl)
{
    struct hk_call c = {SYS_sendto, {fd, (long)buf, (long)n, flags, (long)to, tl}};
    long r = hk_transfer(fd, FERN_WRITE, flags & MSG_DONTWAIT, &c);
    if (__builtin_expect(r > 0 && (size_t)r < n, 0))
        r = rest_flat(fd, flags & MSG_DONTWAIT, &c, r);
    return hk_ret(r);
}

ssize_t send(int fd, const void *buf, size_t n, int flags) { return sendto(fd, buf, n, flags, NULL, 0); }

ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
    struct hk_call c = {SYS_sendmsg, {fd, (long)m, flags}};
    long r = hk_transfer(fd, FERN_WRITE, flags & MSG_DONTWAIT, &c);
    if (__builtin_expect(r > 0, 1) && m && m->msg_iovlen > 0 && !(flags & MSG_DONTWAIT)) {
        struct msghdr copy = *m;
        c.a[1] = (long)&copy;
        r = rest_iov(fd, &c, r, m->msg_iov, m->msg_iovlen, &copy);
    }
    return hk_ret(r);
}

/* Many messages at once. A blocking recvmmsg without MSG_WAITFORONE waits
 * until all n slots are filled (or its timeout passes, which the kernel
 * checks only after each datagram); a blocking sendmmsg sends all n. The
 * green thread's attempts are non-blocking, so after the first message the
 * rest is asked for again, parking as needed: recvmmsg until the slots are
 * full or the timeout (from the call's start) passes, sendmmsg until every
 * message went (one hooked sendmsg each, which finishes a message sent in
 * part); an error after some messages returns their count, as the
 * kernel does. */
int recvmmsg(int fd, struct mmsghdr *v, unsigned n, int flags, struct timespec *to)
{
    struct hk_call c = {SYS_recvmmsg, {fd, (long)v, n, flags, (long)to}};
    int nowait = flags & MSG_DONTWAIT;
    int64_t dl = FERN_FOREVER;
    if (to && hk_green())
        dl = fern_now_ns() + (int64_t)to->tv_sec * 1000000000 + to->tv_nsec;
    long r = hk_transfer(fd, FERN_READ, nowait, &c);
    if (r <= 0 || (unsigned)r >= n || nowait || (flags & MSG_WAITFORONE) || !hk_green() ||
        !(hk_state(hk_fd_find(fd)) & HK_MANAGED) || hk_desc_nonblock(fd) != 0)
        return (int)hk_ret(r);
    long done = r;
    while ((unsigned)done < n) {
        struct hk_call more = {SYS_recvmmsg, {fd, (long)(v + done), n - (unsigned)done, flags, 0}};
        long k = hk_green_transfer(fd, FERN_READ, 0, &more, dl);
        if (k <= 0)
            break;
        done += k;
    }
    return (int)done;
}

int sendmmsg(int fd, struct mmsghdr *v, unsigned n, int flags)
{
    struct hk_call c = {SYS_sendmmsg, {fd, (long)v, n, flags}};
    if (HK_LIKELY(!hk_green()) || (flags & MSG_DONTWAIT) || !owes_all(fd))
        return (int)hk_ret(hk_transfer(fd, FERN_WRITE, flags & MSG_DONTWAIT, &c));
    /* One sendmsg per message: the hooked sendmsg finishes a message the
     * non-blocking attempt sent only part of, as the blocking call would
     * (a second message must not start after half of the first). */
    unsigned i = 0;
    for (; i < n; i++) {
        ssize_t r = sendmsg(fd, &v[i].msg_hdr, flags);
        if (r < 0) {
            if (i == 0)
                return -1; /* errno set by sendmsg */
            break;
        }
        v[i].msg_len = (unsigned)r;
    }
    return (int)i;
}

/* _FORTIFY_SOURCE: the buffer's known size must cover the request. */
void hk_overflow(void)
{
    static const char msg[] = "*** buffer overflow detected ***: terminated\n";
    hk_sys(SYS_write, 2, msg, sizeof msg - 1);
    abort();
}

ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    if (n > buflen)
        hk_overflow();
    return read(fd, buf, n);
}

ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
    if (n > buflen)
        hk_overflow();
    return recvfrom(fd, buf, n, flags, NULL, NULL);
}

ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                       struct sockaddr *from, socklen_t *fl)
{
    if (n > buflen)
        hk_overflow();
    return recvfrom(fd, buf, n, flags, from, fl);
}
