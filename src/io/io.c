/* SPDX-License-Identifier: MIT */
/*
 * The fd calls that park: fern_read, fern_write and their vector, message
 * and address variants, fern_accept, fern_connect, fern_wait_fd, fern_close.
 *
 * Each call makes its system call first on the fd, which fern switched to
 * O_NONBLOCK at registration (fdtab.c); only after EAGAIN does it wait, and
 * then it retries, so a stale wake-up costs one EAGAIN. io_wait queues at
 * most one waiter per direction of an fd (a second one gets EBUSY); both
 * directions of one call share one parker, as a select does. The wait ends
 * at an edge (poller.c), the fd's deadline (fern_fd_set_deadline: then
 * ETIMEDOUT) or fern_close (EBADF). A TCP connection whose last transfer was
 * short skips the system call that could only say EAGAIN (fdtab.c says why
 * that loses no edge). An fd epoll refuses (a regular file) blocks in
 * poll(2) on the calling worker. Writes to sockets add MSG_NOSIGNAL; a full
 * AF_UNIX backlog (EAGAIN from connect, no edge to wait for) is retried
 * with back-off within the write deadline.
 */
#include "io.h"
#include "io/hookapi.h"

#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* Largest transfer whose short result is trusted (the kernel caps one call
 * at MAX_RW_COUNT, just under 2 GiB: such a result is short for that reason). */
#define ST_MAX_ASK    (1u << 30)
#define ST_RECV_FLAGS MSG_CMSG_CLOEXEC
#define ST_SEND_FLAGS (MSG_NOSIGNAL | MSG_MORE)

/* A transfer size that qualifies for DRAINED, or 0. */
static inline size_t st_ask(size_t n)
{
    return n - 1 < ST_MAX_ASK ? n : 0;
}

static size_t st_ask_iov(const struct iovec *iov, size_t cnt)
{
    if (!iov || cnt == 0 || cnt > IOV_MAX)
        return 0;
    size_t t = 0;
    for (size_t i = 0; i < cnt; i++) {
        if (iov[i].iov_len > ST_MAX_ASK)
            return 0;
        t += iov[i].iov_len;
    }
    return st_ask(t);
}

/* The sanitizers' view of the raw transfers (base/sys.h). libc's read,
 * write, ... would have gone through ASan's and TSan's interceptors, which
 * check the buffer the kernel reads or fills and, under TSan, order a
 * transfer after the sends before it (TSan syncs every socket on one
 * object). A sanitizer build of libfern does the same here: SAN_IN and
 * SAN_OUT take the call's result r (bytes moved, or -errno) and the buffer
 * (or the iovecs) the kernel filled or read; SAN_SEND comes before a send or
 * a connect, SAN_RECV after an accept.
 * Only fern's own calls are seen this way: a send through libc in one thread
 * and a fern_read in another are not ordered for TSan. Nothing in a build
 * without sanitizers. */
#if defined(FERN_ASAN) || defined(FERN_TSAN)
/* As GCC declares them (its built-ins): address, size. */
void __asan_loadN(void *p, long n);
void __asan_storeN(void *p, long n);
void __tsan_read_range(void *p, long n);
void __tsan_write_range(void *p, long n);
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#if defined(FERN_TSAN)
static char san_fdsync; /* the object every send releases, every receive acquires */
#endif

static void san_range(const void *p, size_t n, bool in)
{
    if (!n)
        return;
#if defined(FERN_ASAN)
    if (in)
        __asan_storeN((void *)p, (long)n);
    else
        __asan_loadN((void *)p, (long)n);
#else
    if (in)
        __tsan_write_range((void *)p, (long)n);
    else
        __tsan_read_range((void *)p, (long)n);
#endif
}

static long san_iov(long r, const struct iovec *iov, size_t cnt, bool in)
{
    size_t left = r > 0 ? (size_t)r : 0;
    for (size_t i = 0; i < cnt && left; i++) {
        size_t k = iov[i].iov_len < left ? iov[i].iov_len : left;
        san_range(iov[i].iov_base, k, in);
        left -= k;
    }
#if defined(FERN_TSAN)
    if (in && r >= 0)
        __tsan_acquire(&san_fdsync);
#endif
    return r;
}

static long san_buf(long r, const void *p, bool in)
{
    struct iovec v = {(void *)p, r > 0 ? (size_t)r : 0};
    return san_iov(r, &v, 1, in);
}

static void san_send(void)
{
#if defined(FERN_TSAN)
    __tsan_release(&san_fdsync);
#endif
}

static void san_recv(void)
{
#if defined(FERN_TSAN)
    __tsan_acquire(&san_fdsync);
#endif
}
#define SAN_IN(r, p) san_buf((r), (p), true)
#define SAN_OUT(r, p) san_buf((r), (p), false)
#define SAN_IN_IOV(r, iov, cnt) san_iov((r), (iov), (size_t)(cnt), true)
#define SAN_OUT_IOV(r, iov, cnt) san_iov((r), (iov), (size_t)(cnt), false)
#define SAN_SEND() san_send()
#define SAN_RECV() san_recv()
#else
#define SAN_IN(r, p) (r)
#define SAN_OUT(r, p) (r)
#define SAN_IN_IOV(r, iov, cnt) (r)
#define SAN_OUT_IOV(r, iov, cnt) (r)
#define SAN_SEND() ((void)0)
#define SAN_RECV() ((void)0)
#endif

static struct fdent *io_prepare(int fd) { return io_register(fd, true); }

enum { IO_TIMEOUT = 0, IO_ERROR = -1 };

static int poll_now(int fd, int dirs)
{
    struct pollfd p = {.fd = fd, .events = (short)((dirs & FERN_READ ? POLLIN : 0) |
                                                    (dirs & FERN_WRITE ? POLLOUT : 0))};
    if (sys_poll(&p, 1, 0) <= 0)
        return 0;
    int ev = 0;
    if (p.revents & (POLLIN | POLLHUP | POLLERR | POLLRDHUP))
        ev |= FERN_READ;
    if (p.revents & (POLLOUT | POLLHUP | POLLERR))
        ev |= FERN_WRITE;
    return ev & dirs;
}

/* io_wait for an fd epoll refuses (a regular file, say): poll(2) blocks
 * the worker. Out of line: its pollfd stays off the common park's frame. */
static __attribute__((noinline, cold)) int io_wait_poll(int fd, int dirs, int64_t deadline)
{
    struct pollfd p = {.fd = fd, .events = (short)((dirs & FERN_READ ? POLLIN : 0) |
                                                    (dirs & FERN_WRITE ? POLLOUT : 0))};
    for (;;) {
        int ms = -1;
        if (deadline != FERN_FOREVER) {
            int64_t left = deadline - fern_now_ns();
            if (left <= 0)
                return IO_TIMEOUT;
            ms = (int)((left + 999999) / 1000000);
        }
        long r = sys_poll(&p, 1, ms);
        if (r > 0) {
            if (p.revents & POLLNVAL) {
                errno_set(EBADF);
                return IO_ERROR;
            }
            return dirs;
        }
        if (r < 0 && r != -EINTR) {
            errno_set((int)-r);
            return IO_ERROR;
        }
    }
}

/* Drop our parker from the directions that still hold it (a wake-up of one
 * direction, a timeout, a cancel). Under no lock. */
static void io_unpark(struct fdent *e, struct parker *p)
{
    spin_lock(&e->lock);
    if (e->rw == p)
        e->rw = NULL;
    if (e->ww == p)
        e->ww = NULL;
    spin_unlock(&e->lock);
}

/* io_wait's first half, under the entry's lock: a READY flag, EBUSY, a
 * passed deadline, a pending cancel end the wait here (the lock dropped);
 * else the thread's parker is enlisted in the entry and IO_PARK returned
 * with the lock held. `own` is the parker of a wait that cannot use the
 * thread's (a plain or a shielded thread's), or NULL; *pp (if pp) is the
 * parker used.
 * Out of line, so that what io_wait keeps live across the park is little
 * (the saved frames of a parked connection are what hibernation keeps).
 *
 * Nothing a waker reads is on the waiting thread's stack: the entry holds
 * the parker itself (rw, ww), and a green thread's cancellable parker is
 * its descriptor's (fern_thread.cpark: sync/wait.h), as is its timer. So a
 * wake-up of a parked, even hibernated, reader only claims the parker and
 * readies the thread (sched/hibernate.c then restores the stack when it
 * runs, not in the fault handler). A shielded thread's parker (io_wait_own)
 * is on its stack, as are a plain thread's. The thread's parker is shared
 * by both directions of one call, and one thread waits in one place at a
 * time, so the entry's pointer to it names this wait until the wait drops
 * it (io_unpark, under the entry's lock). */
enum { IO_PARK = -2 };
static __attribute__((noinline)) int io_enlist(int fd, struct fdent *e, int dirs, int64_t deadline,
                                               struct parker *own, struct parker **pp)
{
    fern_thread *self = thread_current();
    spin_lock(&e->lock);
    int ready = 0;
    if ((dirs & FERN_READ) && (LOAD_RELAXED(&e->rst) & ST_READY)) {
        __atomic_fetch_and(&e->rst, ~ST_READY, __ATOMIC_ACQ_REL);
        ready |= FERN_READ;
    }
    if ((dirs & FERN_WRITE) && (LOAD_RELAXED(&e->wst) & ST_READY)) {
        __atomic_fetch_and(&e->wst, ~ST_READY, __ATOMIC_ACQ_REL);
        ready |= FERN_WRITE;
    }
    if (ready) {
        spin_unlock(&e->lock);
        return ready;
    }
    if (((dirs & FERN_READ) && e->rw) || ((dirs & FERN_WRITE) && e->ww)) {
        spin_unlock(&e->lock);
        errno_set(EBUSY);
        return IO_ERROR;
    }
    if (deadline != FERN_FOREVER && fern_now_ns() >= deadline) {
        spin_unlock(&e->lock);
        return IO_TIMEOUT;
    }
    /* The thread's parker, a cancellation point (sync/wait.h), taken last
     * under the lock, right before the park. */
    struct parker *p;
    if (own)
        parker_init(own);
    if (!(p = parker_cancellable(self, own))) {
        spin_unlock(&e->lock);
        errno_set(ECANCELED);
        return IO_ERROR;
    }
    if (dirs & FERN_READ)
        e->rw = p;
    if (dirs & FERN_WRITE)
        e->ww = p;
    if (self) {
        STORE_RELAXED(&self->wait_what, dirs == FERN_READ ? "fd read" : "fd write");
        STORE_RELAXED(&self->wait_obj, (void *)(intptr_t)fd);
    }
    ADD_RELAXED(&IO.waiters, 1);
    if (!self && !io_poll_owned()) {
        /* A plain thread waits on its futex; make sure some worker polls
         * (an idle one becomes the poll owner now that io_active()). */
        full_fence();
        struct fern_cluster *c = fern_cluster_default();
        if (c)
            cluster_wake(c);
    }
    if (pp)
        *pp = p;
    return IO_PARK;
}

/* io_wait's second half: park on p (enlisted, e's lock held: the park
 * releases it), then drop what the wake-up left and say why it ended. */
static inline __attribute__((always_inline)) int io_park(struct fdent *e, int dirs,
                                                        int64_t deadline, fern_thread *self,
                                                        struct parker *p)
{
    int st = self && deadline == FERN_FOREVER ? parker_park_untimed(p, self, &e->lock)
                                              : parker_wait(p, unlock_spin_io, &e->lock, deadline);
    __atomic_fetch_sub(&IO.waiters, 1, __ATOMIC_RELAXED);
    if (self)
        STORE_RELAXED(&self->wait_what, NULL);
    /* A wake-up dropped the direction it claimed; the other one, or both
     * after a timeout or a cancel, are ours to drop. */
    if (st != W_WOKEN || p->index != dirs)
        io_unpark(e, p);
    if (st == W_WOKEN) {
        if (p->result) {
            errno_set(p->result);
            return IO_ERROR;
        }
        return p->index;
    }
    if (st == W_CANCELED) {
        errno_set(ECANCELED);
        return IO_ERROR;
    }
    return IO_TIMEOUT;
}

/* io_wait with a parker of its own on the stack: a plain thread, or a
 * green thread in a cancel shield (its waits are no cancellation points). */
static __attribute__((noinline)) int io_wait_own(int fd, struct fdent *e, int dirs,
                                                 int64_t deadline, fern_thread *self)
{
    struct parker own, *p = NULL;
    int r = io_enlist(fd, e, dirs, deadline, &own, &p);
    return r == IO_PARK ? io_park(e, dirs, deadline, self, p) : r;
}

/* Wait until fd is ready in one of `dirs` (FERN_READ, FERN_WRITE or both).
 * Returns the direction(s) that woke us (> 0), IO_TIMEOUT, or IO_ERROR with
 * errno (EBADF: closed while waiting; EBUSY: that direction already has a
 * waiter). A return may be a stale edge: callers retry their system call.
 * A green thread that may be cancelled waits on its descriptor's parker
 * (parker_cancellable gives no other), so p need not be kept: it is
 * &self->cpark. */
static int io_wait(int fd, struct fdent *e, int dirs, int64_t deadline)
{
    if (unlikely(!e->pollable))
        return io_wait_poll(fd, dirs, deadline);
    fern_thread *self = thread_current();
    if (unlikely(!self || self->cshield))
        return io_wait_own(fd, e, dirs, deadline, self);
    int r = io_enlist(fd, e, dirs, deadline, NULL, NULL);
    return r == IO_PARK ? io_park(e, dirs, deadline, self, &self->cpark) : r;
}

/* After EAGAIN: wait for the direction within the fd's deadline. 0 to retry,
 * -1 with errno to fail. */
static int io_await(int fd, struct fdent *e, int dir)
{
    int64_t d = LOAD_RELAXED(dir == FERN_READ ? &e->rdl : &e->wdl);
    int r = io_wait(fd, e, dir, d);
    if (r > 0)
        return 0;
    if (r == IO_TIMEOUT)
        errno_set(ETIMEDOUT);
    return -1;
}

/* Try the call; on EAGAIN park until the fd is ready and retry. errno is
 * read through errno_get: the loop spans parks (see base/base.h: errno_get).
 *
 * `ask` is the size asked for when the call qualifies for the short-transfer
 * rule (fdtab.c header comment), else 0; it is evaluated only for TCP
 * sockets. A qualifying call that finds DRAINED parks before any system
 * call; if its deadline passes there it still makes the call once (data may
 * have come with an edge not yet dispatched), and EAGAIN then means
 * ETIMEDOUT. */
#define IO_LOOP(fd, dir, ask, call)                                                                \
    do {                                                                                           \
        struct fdent *e_ = io_prepare(fd);                                                         \
        if (!e_)                                                                                   \
            return -1;                                                                             \
        size_t ask_ = LOAD_RELAXED(&e_->tcp) ? (ask) : 0;                                          \
        uint32_t *st_ = (dir) == FERN_READ ? &e_->rst : &e_->wst;                                  \
        bool last_ = false;                                                                        \
        for (;;) {                                                                                 \
            uint32_t m_ = 0;                                                                       \
            if (ask_) {                                                                            \
                if (!last_ && (LOAD(st_) & ST_DRAINED)) {                                          \
                    if (io_await(fd, e_, dir) == 0)                                                \
                        continue;                                                                  \
                    if (errno_get() != ETIMEDOUT)                                                  \
                        return -1;                                                                 \
                    last_ = true;                                                                  \
                }                                                                                  \
                m_ = st_begin(st_);                                                                \
            }                                                                                      \
            long r_ = (call); /* raw: the result or -errno (base/sys.h) */                        \
            if (r_ >= 0) {                                                                         \
                if (ask_ && r_ > 0 && (size_t)r_ < ask_)                                           \
                    st_short(st_, m_);                                                             \
                return r_;                                                                         \
            }                                                                                      \
            if (r_ != -EAGAIN && r_ != -EWOULDBLOCK) {                                             \
                errno_set((int)-r_);                                                               \
                return -1;                                                                         \
            }                                                                                      \
            if (last_) {                                                                           \
                errno_set(ETIMEDOUT);                                                              \
                return -1;                                                                         \
            }                                                                                      \
            if (io_await(fd, e_, dir))                                                             \
                return -1;                                                                         \
        }                                                                                          \
    } while (0)

/* MSG_DONTWAIT asks for one attempt: honour it (no skip, no state). */
#define IO_LOOP_FLAGS(fd, dir, flags, ask, call)                                                   \
    do {                                                                                           \
        if ((flags)&MSG_DONTWAIT) {                                                                \
            if (!io_prepare(fd))                                                                   \
                return -1;                                                                         \
            return sys_err(call);                                                                  \
        }                                                                                          \
        IO_LOOP(fd, dir, ask, call);                                                               \
    } while (0)

int fern_fd_set_deadline(int fd, int64_t rd, int64_t wd)
{
    struct fdent *e = io_prepare(fd);
    if (!e)
        return errno;
    STORE_RELAXED(&e->rdl, rd);
    STORE_RELAXED(&e->wdl, wd);
    return 0;
}

int fern_wait_fd(int fd, int events, int64_t deadline_ns)
{
    if (events == 0 || (events & ~(FERN_READ | FERN_WRITE)) || deadline_ns < 0) {
        errno = EINVAL;
        return -1;
    }
    struct fdent *e = io_prepare(fd);
    if (!e)
        return -1;
    /* The ready flags may be stale (an edge whose data someone else has
     * consumed): ask the kernel before and after each wake-up. */
    for (;;) {
        int ready = poll_now(fd, events);
        if (ready)
            return ready;
        int r = io_wait(fd, e, events, deadline_ns);
        if (r == IO_ERROR)
            return -1;
        if (r == IO_TIMEOUT)
            return poll_now(fd, events);
    }
}

/* Writes to a socket go through send/sendmsg with MSG_NOSIGNAL: a peer that
 * has gone makes the call fail with EPIPE instead of raising SIGPIPE, whose
 * default action would end the whole process for one lost client (every
 * fern send call adds the flag too). Pipes and other fds keep write's
 * behaviour. `e` is the entry IO_LOOP prepared. */
static long write_nosignal(const struct fdent *e, int fd, const void *buf, size_t n)
{
    SAN_SEND();
    return SAN_OUT(LOAD_RELAXED(&e->sock) ? sys_sendto(fd, buf, n, MSG_NOSIGNAL, NULL, 0)
                                          : sys_write(fd, buf, n),
                   buf);
}

static long writev_nosignal(const struct fdent *e, int fd, const struct iovec *iov, int cnt)
{
    SAN_SEND();
    if (!LOAD_RELAXED(&e->sock) || cnt < 0)
        return SAN_OUT_IOV(sys_writev(fd, iov, cnt), iov, cnt > 0 ? cnt : 0);
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};
    return SAN_OUT_IOV(sys_sendmsg(fd, &m, MSG_NOSIGNAL), iov, cnt);
}

ssize_t fern_read(int fd, void *buf, size_t n)
{
    IO_LOOP(fd, FERN_READ, st_ask(n), SAN_IN(sys_read(fd, buf, n), buf));
}
ssize_t fern_write(int fd, const void *buf, size_t n)
{
    IO_LOOP(fd, FERN_WRITE, st_ask(n), write_nosignal(e_, fd, buf, n));
}
ssize_t fern_readv(int fd, const struct iovec *iov, int cnt)
{
    IO_LOOP(fd, FERN_READ, cnt > 0 ? st_ask_iov(iov, (size_t)cnt) : 0,
            SAN_IN_IOV(sys_readv(fd, iov, cnt), iov, cnt > 0 ? cnt : 0));
}
ssize_t fern_writev(int fd, const struct iovec *iov, int cnt)
{
    IO_LOOP(fd, FERN_WRITE, cnt > 0 ? st_ask_iov(iov, (size_t)cnt) : 0,
            writev_nosignal(e_, fd, iov, cnt));
}
ssize_t fern_recv(int fd, void *buf, size_t n, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_READ, flags, flags & ~ST_RECV_FLAGS ? 0 : st_ask(n),
                  SAN_IN(sys_recvfrom(fd, buf, n, flags, NULL, NULL), buf));
}
ssize_t fern_send(int fd, const void *buf, size_t n, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_WRITE, flags, flags & ~ST_SEND_FLAGS ? 0 : st_ask(n),
                  (SAN_SEND(), SAN_OUT(sys_sendto(fd, buf, n, flags | MSG_NOSIGNAL, NULL, 0), buf)));
}
ssize_t fern_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fl)
{
    IO_LOOP_FLAGS(fd, FERN_READ, flags, flags & ~ST_RECV_FLAGS ? 0 : st_ask(n),
                  SAN_IN(sys_recvfrom(fd, buf, n, flags, from, fl), buf));
}
ssize_t fern_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to,
                    socklen_t tl)
{
    IO_LOOP_FLAGS(fd, FERN_WRITE, flags, flags & ~ST_SEND_FLAGS ? 0 : st_ask(n),
                  (SAN_SEND(), SAN_OUT(sys_sendto(fd, buf, n, flags | MSG_NOSIGNAL, to, tl), buf)));
}
ssize_t fern_recvmsg(int fd, struct msghdr *m, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_READ, flags,
                  flags & ~ST_RECV_FLAGS || !m ? 0 : st_ask_iov(m->msg_iov, m->msg_iovlen),
                  SAN_IN_IOV(sys_recvmsg(fd, m, flags), m ? m->msg_iov : NULL, m ? m->msg_iovlen : 0));
}
ssize_t fern_sendmsg(int fd, const struct msghdr *m, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_WRITE, flags,
                  flags & ~ST_SEND_FLAGS || !m ? 0 : st_ask_iov(m->msg_iov, m->msg_iovlen),
                  (SAN_SEND(), SAN_OUT_IOV(sys_sendmsg(fd, m, flags | MSG_NOSIGNAL),
                                           m ? m->msg_iov : NULL, m ? m->msg_iovlen : 0)));
}

int fern_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    struct fdent *e = io_prepare(fd);
    if (!e)
        return -1;
    for (;;) {
        long c = sys_accept4(fd, addr, len, flags | SOCK_NONBLOCK);
        SAN_RECV();
        if (c >= 0)
            return (int)c;
        if (c != -EAGAIN && c != -EWOULDBLOCK)
            return (int)sys_err(c);
        if (io_await(fd, e, FERN_READ))
            return -1;
    }
}

int fern_connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    struct fdent *e = io_prepare(fd);
    if (!e)
        return -1;
    int64_t backoff = 100000;
    for (;;) {
        SAN_SEND();
        long c = sys_connect(fd, addr, len);
        if (c == 0)
            return 0;
        if (c == -EINPROGRESS)
            break;
        if (c != -EAGAIN)
            return (int)sys_err(c);
        /* A full AF_UNIX backlog says EAGAIN and gives no edge to wait
         * for: retry with back-off within the write deadline. */
        int64_t d = LOAD_RELAXED(&e->wdl);
        if (d != FERN_FOREVER && fern_now_ns() + backoff > d) {
            errno_set(ETIMEDOUT);
            return -1;
        }
        fern_sleep_ns(backoff);
        if (backoff < 10000000)
            backoff *= 2;
    }
    for (;;) {
        if (io_await(fd, e, FERN_WRITE))
            return -1;
        /* The write edge may be stale (from before connect): confirm. */
        if (poll_now(fd, FERN_WRITE))
            break;
    }
    int err = 0;
    socklen_t el = sizeof err;
    long g = sys_getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (g < 0)
        return (int)sys_err(g);
    if (err) {
        errno_set(err);
        return -1;
    }
    return 0;
}


int fern_close(int fd)
{
    /* fern-hook's entry too, if it is loaded (hookapi.h): the raw close
     * below is not its close. */
    void (*hook)(int) = __atomic_load_n(&fern__hook_close, __ATOMIC_ACQUIRE);
    if (hook)
        hook(fd);
    else
        io_forget(fd);
    return (int)sys_err(sys_close(fd));
}
