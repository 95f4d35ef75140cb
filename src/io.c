/*
 * I/O: the readiness poller and the fd calls that park.
 *
 * One epoll instance for the process, edge-triggered. Each fd used through
 * fern has an entry in a two-level fd-indexed table (chunks of FD_CHUNK
 * entries, allocated on first use): a lock, one waiting reader and one
 * waiting writer, a "ready" flag per direction, per-fd deadlines and a
 * generation that fern_close bumps. An fd is registered (EPOLLIN | EPOLLOUT |
 * EPOLLRDHUP, EPOLLET) once, by the first fern_* call on it, and stays
 * registered until fern_close.
 *
 * Edges are never lost: a call tries the system call first; only after
 * EAGAIN does it take the entry's lock and look at the ready flag. An edge
 * that arrived after the EAGAIN either finds the waiter (claims and wakes it)
 * or sets the flag, which the waiter sees under the lock and retries. A stale
 * flag costs one extra EAGAIN, never a lost wake-up.
 *
 * Polling is woven into the scheduler, with no poller thread:
 *  - an idle worker polls without blocking before it goes to sleep;
 *  - one idle worker at a time (the poll owner) sleeps in epoll_wait instead
 *    of on its futex, with its earliest timer as the timeout; cluster_wake
 *    interrupts it through an eventfd that sits in the same epoll set;
 *  - a busy worker polls without blocking every 61 scheduling ticks while
 *    anyone waits on an fd, so ready fds are served even under load.
 * Events only ready threads (sched_ready): a thread of another cluster goes to
 * that cluster's inbox.
 */
#include "internal.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#define FD_CHUNK 1024u
#define EV_WAKE UINT64_MAX

static void unlock_spin_io(void *l) { spin_unlock(l); }

struct fdent {
    uint32_t lock;
    uint8_t registered;
    uint8_t pollable;        /* epoll accepted it (regular files are not pollable) */
    uint8_t rready, wready;
    uint32_t gen;
    struct waiter *rw, *ww;
    int64_t rdl, wdl;        /* per-fd deadlines */
};

static struct {
    int epfd, evfd;
    uint32_t nchunks;
    struct fdent **chunks;
    uint32_t waiters;        /* threads parked on fds */
    uint32_t poll_owner;     /* a worker sleeps in epoll_wait */
    uint32_t wake_pending;   /* the eventfd holds an unread wake */
} IO = {-1, -1, 0, NULL, 0, 0, 0};

int io_init(void)
{
    struct rlimit rl;
    uint64_t max = 1u << 20;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && rl.rlim_max < max)
        max = rl.rlim_max;
    IO.nchunks = (uint32_t)((max + FD_CHUNK - 1) / FD_CHUNK);
    struct fdent **chunks = calloc(IO.nchunks, sizeof *chunks);
    if (!chunks)
        return ENOMEM;
    IO.epfd = epoll_create1(EPOLL_CLOEXEC);
    IO.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (IO.epfd < 0 || IO.evfd < 0) {
        int e = errno;
        free(chunks);
        io_fini();
        return e;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_WAKE};
    if (epoll_ctl(IO.epfd, EPOLL_CTL_ADD, IO.evfd, &ev)) {
        int e = errno;
        free(chunks);
        io_fini();
        return e;
    }
    STORE(&IO.chunks, chunks);
    return 0;
}

void io_fini(void)
{
    if (IO.epfd >= 0)
        close(IO.epfd);
    if (IO.evfd >= 0)
        close(IO.evfd);
    for (uint32_t i = 0; IO.chunks && i < IO.nchunks; i++)
        free(IO.chunks[i]);
    free(IO.chunks);
    STORE(&IO.chunks, NULL);
    IO.nchunks = 0;
    IO.epfd = IO.evfd = -1;
    IO.waiters = IO.poll_owner = IO.wake_pending = 0;
}

static struct fdent *fdent_get(int fd)
{
    struct fdent **chunks = LOAD(&IO.chunks);
    if (fd < 0 || !chunks || (uint32_t)fd / FD_CHUNK >= IO.nchunks)
        return NULL;
    struct fdent **slot = &chunks[(uint32_t)fd / FD_CHUNK];
    struct fdent *c = LOAD(slot);
    if (!c) {
        struct fdent *n = calloc(FD_CHUNK, sizeof *n);
        if (!n)
            return NULL;
        for (unsigned i = 0; i < FD_CHUNK; i++)
            n[i].rdl = n[i].wdl = FERN_FOREVER;
        struct fdent *expect = NULL;
        if (CAS(slot, &expect, n))
            c = n;
        else {
            free(n);
            c = expect;
        }
    }
    return &c[(uint32_t)fd % FD_CHUNK];
}

/* Make fd non-blocking and registered. Returns the entry, or NULL with errno. */
static struct fdent *io_prepare(int fd)
{
    if (unlikely(!LOAD(&IO.chunks))) {
        /* Not booted: start the runtime, which creates the poller. */
        int r = fern_init(NULL);
        if (r && r != EBUSY) {
            errno = r;
            return NULL;
        }
    }
    struct fdent *e = fdent_get(fd);
    if (!e) {
        errno = EBADF;
        return NULL;
    }
    if (likely(LOAD(&e->registered)))
        return e;
    spin_lock(&e->lock);
    if (!e->registered) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
            spin_unlock(&e->lock);
            errno = EBADF;
            return NULL;
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                                 .data.u64 = (uint64_t)(uint32_t)fd | (uint64_t)e->gen << 32};
        int r = epoll_ctl(IO.epfd, EPOLL_CTL_ADD, fd, &ev);
        if (r && errno == EEXIST)
            r = epoll_ctl(IO.epfd, EPOLL_CTL_MOD, fd, &ev);
        e->pollable = r == 0;
        e->rready = e->wready = 0;
        STORE(&e->registered, 1);
    }
    spin_unlock(&e->lock);
    return e;
}

static void io_dispatch(struct epoll_event *ev, bool owner)
{
    if (ev->data.u64 == EV_WAKE) {
        /* Only the poll owner drains the wake: if a non-blocking poller
         * read it, the owner's epoll_wait would find nothing and sleep on. */
        if (owner) {
            uint64_t v;
            ssize_t r = read(IO.evfd, &v, sizeof v);
            (void)r;
            STORE_RELAXED(&IO.wake_pending, 0);
        }
        return;
    }
    int fd = (int)(uint32_t)ev->data.u64;
    uint32_t gen = (uint32_t)(ev->data.u64 >> 32);
    struct fdent *e = fdent_get(fd);
    if (!e)
        return;
    struct waiter *r = NULL, *w = NULL;
    spin_lock(&e->lock);
    if (e->gen != gen || !e->registered) {
        spin_unlock(&e->lock);
        return; /* an event from before fern_close */
    }
    if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        if (e->rw && waiter_claim(e->rw))
            r = e->rw;
        else
            e->rready = 1;
        e->rw = NULL;
    }
    if (ev->events & (EPOLLOUT | EPOLLHUP | EPOLLERR)) {
        if (e->ww && waiter_claim(e->ww))
            w = e->ww;
        else
            e->wready = 1;
        e->ww = NULL;
    }
    spin_unlock(&e->lock);
    if (r)
        waiter_release(r, 0);
    if (w)
        waiter_release(w, 0);
}

/* Poll and dispatch; timeout_ns 0 = do not block. Returns events handled. */
static int io_poll_for(int64_t timeout_ns, bool owner)
{
    struct epoll_event evs[64];
    int ms = timeout_ns == FERN_FOREVER ? -1 : (int)((timeout_ns + 999999) / 1000000);
    int n = epoll_wait(IO.epfd, evs, 64, ms);
    int handled = 0;
    for (int i = 0; i < n; i++) {
        io_dispatch(&evs[i], owner);
        handled += evs[i].data.u64 != EV_WAKE;
    }
    return handled;
}

bool io_active(void) { return LOAD_RELAXED(&IO.waiters) != 0; }

bool io_poll_owned(void) { return LOAD_RELAXED(&IO.poll_owner) != 0; }

int io_poll_nonblocking(void)
{
    if (!io_active())
        return 0;
    return io_poll_for(0, false);
}

/* Idle path: become the poll owner and sleep in epoll_wait until an event,
 * a wake (eventfd) or the deadline. Returns false if another worker already
 * owns the poller (sleep on the futex instead). */
bool io_sleep(struct worker *w, int64_t deadline)
{
    uint32_t z = 0;
    if (!io_active() || !CAS(&IO.poll_owner, &z, 1))
        return false;
    /* Dekker with cluster_wake: it clears sleep_word then reads in_epoll. */
    STORE(&w->in_epoll, 1);
    full_fence();
    if (!LOAD(&w->sleep_word)) {
        STORE(&w->in_epoll, 0);
        STORE(&IO.poll_owner, 0);
        return true;
    }
    int64_t timeout = FERN_FOREVER;
    if (deadline != FERN_FOREVER) {
        timeout = deadline - fern_now_ns();
        if (timeout < 0)
            timeout = 0;
    }
    io_poll_for(timeout, true);
    STORE(&w->in_epoll, 0);
    STORE(&IO.poll_owner, 0);
    return true;
}

/* Interrupt the worker sleeping in epoll_wait (cluster_wake picked it). */
void io_wake(void)
{
    if (__atomic_exchange_n(&IO.wake_pending, 1, __ATOMIC_ACQ_REL))
        return;
    uint64_t one = 1;
    ssize_t r = write(IO.evfd, &one, sizeof one);
    (void)r;
}

enum { IO_TIMEOUT = 0, IO_ERROR = -1 };

static int poll_now(int fd, int dirs)
{
    struct pollfd p = {.fd = fd, .events = (short)((dirs & FERN_READ ? POLLIN : 0) |
                                                    (dirs & FERN_WRITE ? POLLOUT : 0))};
    if (poll(&p, 1, 0) <= 0)
        return 0;
    int ev = 0;
    if (p.revents & (POLLIN | POLLHUP | POLLERR | POLLRDHUP))
        ev |= FERN_READ;
    if (p.revents & (POLLOUT | POLLHUP | POLLERR))
        ev |= FERN_WRITE;
    return ev & dirs;
}

/* Wait until fd is ready in one of `dirs` (FERN_READ, FERN_WRITE or both).
 * Returns the direction(s) that woke us (> 0), IO_TIMEOUT, or IO_ERROR with
 * errno (EBADF: closed while waiting; EBUSY: that direction already has a
 * waiter). A return may be a stale edge: callers retry their system call. */
static int io_wait(int fd, struct fdent *e, int dirs, int64_t deadline)
{
    if (!e->pollable) {
        /* An fd epoll refuses (a regular file, say) blocks in poll(2). */
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
            int r = poll(&p, 1, ms);
            if (r > 0) {
                if (p.revents & POLLNVAL) {
                    errno_set(EBADF);
                    return IO_ERROR;
                }
                return dirs;
            }
            if (r < 0 && errno != EINTR)
                return IO_ERROR;
        }
    }
    fern_thread *self = thread_current();
    spin_lock(&e->lock);
    int ready = 0;
    if ((dirs & FERN_READ) && e->rready) {
        e->rready = 0;
        ready |= FERN_READ;
    }
    if ((dirs & FERN_WRITE) && e->wready) {
        e->wready = 0;
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
    /* One waiter per direction, sharing one parker (as a select). */
    struct parker p;
    struct waiter wr, ww;
    parker_init(&p);
    waiter_init(&wr);
    waiter_init(&ww);
    wr.p = ww.p = &p;
    wr.index = FERN_READ;
    ww.index = FERN_WRITE;
    if (dirs & FERN_READ)
        e->rw = &wr;
    if (dirs & FERN_WRITE)
        e->ww = &ww;
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
    int st = parker_wait(&p, unlock_spin_io, &e->lock, deadline);
    __atomic_fetch_sub(&IO.waiters, 1, __ATOMIC_RELAXED);
    if (self)
        STORE_RELAXED(&self->wait_what, NULL);
    if (st == W_WOKEN) {
        spin_lock(&e->lock); /* drop the other direction's waiter */
        if (e->rw == &wr)
            e->rw = NULL;
        if (e->ww == &ww)
            e->ww = NULL;
        spin_unlock(&e->lock);
        if (p.result) {
            errno_set(p.result);
            return IO_ERROR;
        }
        return p.index;
    }
    spin_lock(&e->lock);
    if (e->rw == &wr)
        e->rw = NULL;
    if (e->ww == &ww)
        e->ww = NULL;
    spin_unlock(&e->lock);
    return IO_TIMEOUT;
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
 * read through errno_get: the loop spans parks (see internal.h). */
#define IO_LOOP(fd, dir, call)                                          \
    do {                                                                \
        struct fdent *e_ = io_prepare(fd);                              \
        if (!e_)                                                        \
            return -1;                                                  \
        for (;;) {                                                      \
            ssize_t r_ = (call);                                        \
            if (r_ >= 0)                                                \
                return r_;                                              \
            int err_ = errno_get();                                     \
            if (err_ != EAGAIN && err_ != EWOULDBLOCK)                  \
                return r_;                                              \
            if (io_await(fd, e_, dir))                                  \
                return -1;                                              \
        }                                                               \
    } while (0)

/* MSG_DONTWAIT asks for one attempt: honour it. */
#define IO_LOOP_FLAGS(fd, dir, flags, call) \
    do {                                    \
        if ((flags) & MSG_DONTWAIT) {       \
            if (!io_prepare(fd))            \
                return -1;                  \
            return (call);                  \
        }                                   \
        IO_LOOP(fd, dir, call);             \
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

ssize_t fern_read(int fd, void *buf, size_t n) { IO_LOOP(fd, FERN_READ, read(fd, buf, n)); }
ssize_t fern_write(int fd, const void *buf, size_t n) { IO_LOOP(fd, FERN_WRITE, write(fd, buf, n)); }
ssize_t fern_readv(int fd, const struct iovec *iov, int cnt) { IO_LOOP(fd, FERN_READ, readv(fd, iov, cnt)); }
ssize_t fern_writev(int fd, const struct iovec *iov, int cnt) { IO_LOOP(fd, FERN_WRITE, writev(fd, iov, cnt)); }
ssize_t fern_recv(int fd, void *buf, size_t n, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_READ, flags, recv(fd, buf, n, flags));
}
ssize_t fern_send(int fd, const void *buf, size_t n, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_WRITE, flags, send(fd, buf, n, flags | MSG_NOSIGNAL));
}
ssize_t fern_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fl)
{
    IO_LOOP_FLAGS(fd, FERN_READ, flags, recvfrom(fd, buf, n, flags, from, fl));
}
ssize_t fern_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to,
                    socklen_t tl)
{
    IO_LOOP_FLAGS(fd, FERN_WRITE, flags, sendto(fd, buf, n, flags | MSG_NOSIGNAL, to, tl));
}
ssize_t fern_recvmsg(int fd, struct msghdr *m, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_READ, flags, recvmsg(fd, m, flags));
}
ssize_t fern_sendmsg(int fd, const struct msghdr *m, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_WRITE, flags, sendmsg(fd, m, flags | MSG_NOSIGNAL));
}

int fern_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    struct fdent *e = io_prepare(fd);
    if (!e)
        return -1;
    for (;;) {
        int c = accept4(fd, addr, len, flags | SOCK_NONBLOCK);
        if (c >= 0)
            return c;
        int err = errno_get();
        if (err != EAGAIN && err != EWOULDBLOCK)
            return c;
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
        if (connect(fd, addr, len) == 0)
            return 0;
        int err = errno_get();
        if (err == EINPROGRESS)
            break;
        if (err != EAGAIN)
            return -1;
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
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
        return -1;
    if (err) {
        errno_set(err);
        return -1;
    }
    return 0;
}

int fern_close(int fd)
{
    struct fdent *e = fdent_get(fd);
    if (e) {
        struct waiter *r = NULL, *w = NULL;
        spin_lock(&e->lock);
        if (e->registered) {
            if (e->pollable)
                epoll_ctl(IO.epfd, EPOLL_CTL_DEL, fd, NULL);
            STORE(&e->registered, 0);
        }
        e->gen++;
        e->rready = e->wready = 0;
        if (e->rw && waiter_claim(e->rw))
            r = e->rw;
        if (e->ww && waiter_claim(e->ww))
            w = e->ww;
        e->rw = e->ww = NULL;
        STORE_RELAXED(&e->rdl, FERN_FOREVER);
        STORE_RELAXED(&e->wdl, FERN_FOREVER);
        spin_unlock(&e->lock);
        if (r)
            waiter_release(r, EBADF);
        if (w)
            waiter_release(w, EBADF);
    }
    return close(fd);
}
