/* SPDX-License-Identifier: MIT */
/*
 * I/O: the readiness poller and the fd calls that park.
 *
 * One epoll instance for the process, edge-triggered. Each fd used through
 * fern has an entry in a two-level fd-indexed table (chunks of FD_CHUNK
 * entries, allocated on first use): a lock, one waiting reader and one
 * waiting writer, a state word per direction (below), per-fd deadlines and a
 * generation that fern_close bumps. An fd is registered (EPOLLIN | EPOLLOUT |
 * EPOLLRDHUP, EPOLLET; EPOLLPRI too for TCP) once, by the first fern_* call on
 * it, and stays registered until fern_close.
 *
 * Edges are never lost: a call tries the system call first; only after
 * EAGAIN does it take the entry's lock and look at the ready flag. An edge
 * that arrived after the EAGAIN either finds the waiter (claims and wakes it)
 * or sets the flag, which the waiter sees under the lock and retries. A stale
 * flag costs one extra EAGAIN, never a lost wake-up.
 *
 * Short transfers on TCP. A stream read that returns 0 < r < asked leaves the
 * receive queue empty at the moment the kernel stopped copying, so the next
 * read would only say EAGAIN: a TCP connection's next fern_read (recv, ...)
 * skips that system call and parks for the next edge at once. Writes alike: a
 * short TCP write filled the send buffer (the kernel sets SOCK_NOSPACE, which
 * promises an EPOLLOUT edge when room comes back). An echo round trip then
 * costs read, write, park instead of read, write, read (EAGAIN), park.
 *
 * Each direction's state word (rst, wst) holds READY (an edge came and found
 * no waiter: the old ready flag), DRAINED (the last transfer was short and
 * nothing happened since), FINAL (sticky: hang-up, error or urgent data seen)
 * and a tick count above those bits (29 bits: a false match would need 2^29
 * ticks during one system call). It changes only by atomic RMW:
 *  - st_begin, before every qualifying system call: tick, clear READY and
 *    DRAINED, keep FINAL; the call remembers the new value m;
 *  - st_short, after a short result: compare-and-swap m -> m | DRAINED, which
 *    fails if anything ticked in between; never with FINAL;
 *  - io_dispatch, under the entry's lock, for every edge of that direction:
 *    tick, clear DRAINED, set READY unless it claimed a waiter, set FINAL on
 *    EPOLLRDHUP/HUP/ERR/PRI (reads) or EPOLLHUP/ERR (writes);
 *  - io_wait, under the lock, takes READY as before; fern_close and a new
 *    registration tick and clear all flags (the fd number's next user starts
 *    clean).
 * Why skipping loses no edge. Say a call sees DRAINED and goes straight to
 * io_wait. DRAINED was set by some call C whose st_begin value m was still the
 * word at C's CAS, and nothing ticked since (a tick clears DRAINED). So every
 * edge dispatched so far was dispatched before C's st_begin, in the word's
 * modification order; such an edge's data was queued before C's system call
 * began (data queued -> epoll wake -> epoll_wait -> dispatch's RMW ->
 * st_begin, each step ordered by locks or the RMW chain) and C's short read
 * left the queue empty, so that data is gone; a condition that stays (peer
 * FIN, socket error, urgent mark) set FINAL, and C would not have set
 * DRAINED. Data that came after C's copy has an edge that the kernel raised
 * after st_begin, so its dispatch ticks after m: either before our check
 * (DRAINED gone, we make the system call) or after it, when io_wait settles
 * it under the lock as for EAGAIN: the edge set READY first (we retry) or it
 * finds our waiter (wakes us). The old rule that clearing READY is safe only
 * right before a system call still holds: st_begin clears it there, and a
 * READY from an edge ordered before st_begin described data that call sees.
 * The edge that arrives while the short call runs (the trap of clearing a
 * flag after the call) ticks the word, so C's CAS fails and the next call
 * makes its system call. A stale READY costs one EAGAIN, a failed CAS one
 * EAGAIN; neither loses a wake-up.
 * Where short does not mean drained, nothing is skipped: only SOCK_STREAM
 * sockets of protocol IPPROTO_TCP qualify (SO_TYPE and SO_PROTOCOL, read at
 * registration): datagram sockets return one datagram per call, and AF_UNIX
 * stream reads stop early after a message carrying SCM_RIGHTS (or from another
 * writer under SO_PASSCRED) with data still queued; pipes, ttys, eventfds and
 * other fds never qualify. Only results 0 < r < asked count (readv/writev and
 * the msg calls: the iovec total; asked at most 1 GiB): EOF and errors never
 * mark DRAINED. Only flags 0 and MSG_CMSG_CLOEXEC (receive) or MSG_NOSIGNAL
 * and MSG_MORE (send) qualify: MSG_PEEK leaves the data queued, MSG_WAITALL,
 * MSG_OOB, MSG_ERRQUEUE, MSG_TRUNC and the rest are not reasoned about.
 * TCP stops a read short at the urgent mark with data behind it, hence
 * EPOLLPRI -> FINAL; a read short because of EOF, an error or a bad buffer
 * (EFAULT part-way) is covered by FINAL for the first two and not at all for
 * the third (a caller bug: the next call waits for the next edge instead of
 * failing). Not detected either: a kTLS socket (TCP_ULP "tls", set after
 * registration) stops a read at a TLS control record with data behind it, so
 * the next read would wait for the next edge; sockets with a BPF sockmap
 * verdict program are not reasoned about.
 * A skipped call whose deadline passes makes its system call once, so a
 * deadline never hides data that is there; fern_close still wakes it with
 * EBADF.
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
 *
 * Memory ordering. The per-direction state words (rst, wst) change only by
 * RMW (acq_rel; st_begin's is seq_cst so the system call after it cannot be
 * ordered before it), one location, so the READY/DRAINED/tick logic holds on
 * any CPU.
 * IO.chunks and the chunk slots are published with release (store or CAS)
 * after the chunk is initialised, and read with acquire. registered is
 * stored with release after epoll_ctl(ADD) and loaded with acquire. The
 * poll owner's in_epoll and a waker's sleep_word form the store-buffer
 * pattern with sched.c: a full_fence on each side. poll_owner: acquire CAS
 * to take, release store to give up. wake_pending: acq_rel exchange, so
 * one eventfd write per wake. waiters: a relaxed count (io_active is a
 * hint); a plain thread about to wait fences after counting itself, then
 * wakes a worker if it sees no poll owner, and that worker sees the count.
 * rdl, wdl, tcp: relaxed, per-fd settings read as of the call.
 */
#include "internal.h"
#include "hookapi.h"

#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define FD_CHUNK 1024u
#define EV_WAKE UINT64_MAX

static void unlock_spin_io(void *l) { spin_unlock(l); }

struct fdent {
    uint32_t lock;
    uint8_t registered;
    uint8_t pollable;        /* epoll accepted it (regular files are not pollable) */
    uint8_t tcp;             /* a TCP stream socket: a short transfer drains */
    uint8_t sock;            /* any socket: writes go through send(MSG_NOSIGNAL) */
    uint32_t gen;
    uint32_t rst, wst;       /* per-direction state words (header comment) */
    struct waiter *rw, *ww;
    fern_waitq pq;           /* fern-hook's pollers (any number; fern__io_park) */
    int64_t rdl, wdl;        /* per-fd deadlines */
};

/* State word bits; the tick count sits above them. */
#define ST_READY   1u /* an edge found no waiter */
#define ST_DRAINED 2u /* the last transfer was short, nothing since */
#define ST_FINAL   4u /* hang-up, error or urgent data seen: never skip */
#define ST_FLAGS   7u
#define ST_TICK    8u
/* Largest transfer whose short result is trusted (the kernel caps one call
 * at MAX_RW_COUNT, just under 2 GiB: such a result is short for that reason). */
#define ST_MAX_ASK    (1u << 30)
#define ST_RECV_FLAGS MSG_CMSG_CLOEXEC
#define ST_SEND_FLAGS (MSG_NOSIGNAL | MSG_MORE)

/* Before a qualifying system call: tick, clear READY and DRAINED. Returns the
 * new word for st_short. Sequentially consistent: the call must not be
 * ordered before it. */
static inline uint32_t st_begin(uint32_t *st)
{
    uint32_t w = LOAD_RELAXED(st), nw;
    do
        nw = ((w & ~ST_FLAGS) + ST_TICK) | (w & ST_FINAL);
    while (!__atomic_compare_exchange_n(st, &w, nw, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
    return nw;
}

/* After a short result of the call that st_begin returned m for: DRAINED,
 * unless anything ticked since or FINAL is set. */
static inline void st_short(uint32_t *st, uint32_t m)
{
    if (!(m & ST_FINAL))
        __atomic_compare_exchange_n(st, &m, m | ST_DRAINED, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
}

/* Tick, clear `clear`, set `set` (an edge; a reset). */
static inline void st_update(uint32_t *st, uint32_t clear, uint32_t set)
{
    uint32_t w = LOAD_RELAXED(st), nw;
    do
        nw = (((w & ~ST_FLAGS) + ST_TICK) | (w & ST_FLAGS & ~clear)) | set;
    while (!__atomic_compare_exchange_n(st, &w, nw, true, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
}

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

/* Register fd (and, for the fern_* calls, make it non-blocking; fern-hook
 * keeps the flags itself). Returns the entry, or NULL with errno. */
static struct fdent *io_register(int fd, bool nonblock)
{
    if (unlikely(!LOAD(&IO.chunks))) {
        /* Not booted: start the runtime, which creates the poller. */
        int r = runtime_start("an I/O call (fern_read, fern_write, fern_accept, ...)");
        if (r) {
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
        /* Raw fcntl: fern-hook's fcntl would record O_NONBLOCK as the
         * user's own choice (hook/fd.c). */
        long fl = syscall(SYS_fcntl, fd, F_GETFL);
        if (fl < 0 || (nonblock && !(fl & O_NONBLOCK) &&
                       syscall(SYS_fcntl, fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
            spin_unlock(&e->lock);
            errno = EBADF;
            return NULL;
        }
        /* A TCP socket? (Header comment: where a short transfer drains.)
         * EPOLLPRI tells of urgent data, which stops a read short. */
        int type = 0, proto = 0, saved = errno;
        socklen_t tl = sizeof type, pl = sizeof proto;
        bool sock = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0;
        bool tcp = sock && type == SOCK_STREAM &&
                   getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &pl) == 0 &&
                   proto == IPPROTO_TCP;
        errno = saved;
        STORE_RELAXED(&e->tcp, (uint8_t)tcp);
        STORE_RELAXED(&e->sock, (uint8_t)sock);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET |
                                           (tcp ? EPOLLPRI : 0),
                                 .data.u64 = (uint64_t)(uint32_t)fd | (uint64_t)e->gen << 32};
        int r = epoll_ctl(IO.epfd, EPOLL_CTL_ADD, fd, &ev);
        if (r && errno == EEXIST)
            r = epoll_ctl(IO.epfd, EPOLL_CTL_MOD, fd, &ev);
        e->pollable = r == 0;
        st_update(&e->rst, ST_FLAGS, 0);
        st_update(&e->wst, ST_FLAGS, 0);
        STORE(&e->registered, 1);
    }
    spin_unlock(&e->lock);
    return e;
}

static struct fdent *io_prepare(int fd) { return io_register(fd, true); }

/* Claim the hook pollers of e waiting for any of `dirs` (all if dirs is 0),
 * chained through ->next for waiters_release. Under e->lock. */
static struct waiter *pq_claim(struct fdent *e, int dirs)
{
    struct waiter *chain = NULL, **tail = &chain;
    for (struct waiter *wt = e->pq.head, *next; wt; wt = next) {
        next = wt->next;
        if (dirs && !((intptr_t)wt->data & dirs))
            continue;
        waitq_unlink(wt);
        if (waiter_claim(wt)) {
            wt->next = NULL;
            *tail = wt;
            tail = &wt->next;
        }
    }
    return chain;
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
    /* Every edge ticks its direction's word and clears DRAINED, whether it
     * wakes a waiter or sets READY (header comment). */
    uint32_t evs = ev->events;
    if (evs & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI)) {
        uint32_t set = evs & (EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI) ? ST_FINAL : 0;
        if (e->rw && waiter_claim(e->rw))
            r = e->rw;
        else
            set |= ST_READY;
        e->rw = NULL;
        st_update(&e->rst, ST_DRAINED, set);
    }
    if (evs & (EPOLLOUT | EPOLLHUP | EPOLLERR)) {
        uint32_t set = evs & (EPOLLHUP | EPOLLERR) ? ST_FINAL : 0;
        if (e->ww && waiter_claim(e->ww))
            w = e->ww;
        else
            set |= ST_READY;
        e->ww = NULL;
        st_update(&e->wst, ST_DRAINED, set);
    }
    struct waiter *pq = NULL;
    if (unlikely(e->pq.head)) {
        int dirs = (evs & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI) ? FERN_READ : 0) |
                   (evs & (EPOLLOUT | EPOLLHUP | EPOLLERR) ? FERN_WRITE : 0);
        pq = pq_claim(e, dirs);
    }
    spin_unlock(&e->lock);
    if (r)
        waiter_release(r, 0);
    if (w)
        waiter_release(w, 0);
    if (pq)
        waiters_release(pq, 0);
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
 * read through errno_get: the loop spans parks (see internal.h).
 *
 * `ask` is the size asked for when the call qualifies for the short-transfer
 * rule (header comment), else 0; it is evaluated only for TCP sockets. A
 * qualifying call that finds DRAINED parks before any system call; if its
 * deadline passes there it still makes the call once (data may have come with
 * an edge not yet dispatched), and EAGAIN then means ETIMEDOUT. */
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
            ssize_t r_ = (call);                                                                   \
            if (r_ >= 0) {                                                                         \
                if (ask_ && r_ > 0 && (size_t)r_ < ask_)                                           \
                    st_short(st_, m_);                                                             \
                return r_;                                                                         \
            }                                                                                      \
            int err_ = errno_get();                                                                \
            if (err_ != EAGAIN && err_ != EWOULDBLOCK)                                             \
                return r_;                                                                         \
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
            return (call);                                                                         \
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
static ssize_t write_nosignal(const struct fdent *e, int fd, const void *buf, size_t n)
{
    return LOAD_RELAXED(&e->sock) ? send(fd, buf, n, MSG_NOSIGNAL) : write(fd, buf, n);
}

static ssize_t writev_nosignal(const struct fdent *e, int fd, const struct iovec *iov, int cnt)
{
    if (!LOAD_RELAXED(&e->sock) || cnt < 0)
        return writev(fd, iov, cnt);
    struct msghdr m = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)cnt};
    return sendmsg(fd, &m, MSG_NOSIGNAL);
}

ssize_t fern_read(int fd, void *buf, size_t n)
{
    IO_LOOP(fd, FERN_READ, st_ask(n), read(fd, buf, n));
}
ssize_t fern_write(int fd, const void *buf, size_t n)
{
    IO_LOOP(fd, FERN_WRITE, st_ask(n), write_nosignal(e_, fd, buf, n));
}
ssize_t fern_readv(int fd, const struct iovec *iov, int cnt)
{
    IO_LOOP(fd, FERN_READ, cnt > 0 ? st_ask_iov(iov, (size_t)cnt) : 0, readv(fd, iov, cnt));
}
ssize_t fern_writev(int fd, const struct iovec *iov, int cnt)
{
    IO_LOOP(fd, FERN_WRITE, cnt > 0 ? st_ask_iov(iov, (size_t)cnt) : 0,
            writev_nosignal(e_, fd, iov, cnt));
}
ssize_t fern_recv(int fd, void *buf, size_t n, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_READ, flags, flags & ~ST_RECV_FLAGS ? 0 : st_ask(n),
                  recv(fd, buf, n, flags));
}
ssize_t fern_send(int fd, const void *buf, size_t n, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_WRITE, flags, flags & ~ST_SEND_FLAGS ? 0 : st_ask(n),
                  send(fd, buf, n, flags | MSG_NOSIGNAL));
}
ssize_t fern_recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fl)
{
    IO_LOOP_FLAGS(fd, FERN_READ, flags, flags & ~ST_RECV_FLAGS ? 0 : st_ask(n),
                  recvfrom(fd, buf, n, flags, from, fl));
}
ssize_t fern_sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to,
                    socklen_t tl)
{
    IO_LOOP_FLAGS(fd, FERN_WRITE, flags, flags & ~ST_SEND_FLAGS ? 0 : st_ask(n),
                  sendto(fd, buf, n, flags | MSG_NOSIGNAL, to, tl));
}
ssize_t fern_recvmsg(int fd, struct msghdr *m, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_READ, flags,
                  flags & ~ST_RECV_FLAGS || !m ? 0 : st_ask_iov(m->msg_iov, m->msg_iovlen),
                  recvmsg(fd, m, flags));
}
ssize_t fern_sendmsg(int fd, const struct msghdr *m, int flags)
{
    IO_LOOP_FLAGS(fd, FERN_WRITE, flags,
                  flags & ~ST_SEND_FLAGS || !m ? 0 : st_ask_iov(m->msg_iov, m->msg_iovlen),
                  sendmsg(fd, m, flags | MSG_NOSIGNAL));
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

/* fern_close without the close: wake every waiter of fd with EBADF, drop
 * the registration, start the number's next user clean. */
static void io_forget(int fd)
{
    struct fdent *e = fdent_get(fd);
    if (!e)
        return;
    struct waiter *r = NULL, *w = NULL, *pq;
    spin_lock(&e->lock);
    if (e->registered) {
        if (e->pollable)
            epoll_ctl(IO.epfd, EPOLL_CTL_DEL, fd, NULL);
        STORE(&e->registered, 0);
    }
    e->gen++;
    st_update(&e->rst, ST_FLAGS, 0);
    st_update(&e->wst, ST_FLAGS, 0);
    if (e->rw && waiter_claim(e->rw))
        r = e->rw;
    if (e->ww && waiter_claim(e->ww))
        w = e->ww;
    e->rw = e->ww = NULL;
    pq = pq_claim(e, 0);
    STORE_RELAXED(&e->rdl, FERN_FOREVER);
    STORE_RELAXED(&e->wdl, FERN_FOREVER);
    spin_unlock(&e->lock);
    if (r)
        waiter_release(r, EBADF);
    if (w)
        waiter_release(w, EBADF);
    if (pq)
        waiters_release(pq, EBADF);
}

int fern_close(int fd)
{
    io_forget(fd);
    return close(fd);
}

/* ---- entry points for fern-hook (hookapi.h) ---- */

int fern__hook_green(void) { return thread_current() != NULL; }

void fern__io_forget(int fd)
{
    if (LOAD_RELAXED(&IO.chunks))
        io_forget(fd);
}

int fern__io_snap(struct fern__pollent *pe)
{
    struct fdent *e = io_register(pe->fd, false);
    if (!e)
        return errno;
    if (!e->pollable)
        return EPERM;
    pe->rtick = LOAD(&e->rst) & ~ST_FLAGS;
    pe->wtick = LOAD(&e->wst) & ~ST_FLAGS;
    return 0;
}

struct park_many {
    const struct fern__pollent *pe;
    int n;
};

static void unlock_many(void *arg)
{
    const struct park_many *pm = arg;
    for (int i = 0; i < pm->n; i++)
        spin_unlock(&fdent_get(pm->pe[i].fd)->lock);
}

int fern__io_park(const struct fern__pollent *pe, int n, int64_t deadline)
{
    struct waiter few[4], *wts = n <= 4 ? few : calloc((size_t)n, sizeof *wts);
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
    if (changed || (deadline != FERN_FOREVER && fern_now_ns() >= deadline)) {
        for (int i = 0; i < locked; i++) {
            waitq_unlink(&wts[i]);
            spin_unlock(&fdent_get(pe[i].fd)->lock);
        }
        ret = changed;
    } else {
        fern_thread *self = thread_current();
        if (self) {
            STORE_RELAXED(&self->wait_what, "fd (fern-hook)");
            STORE_RELAXED(&self->wait_obj, (void *)(intptr_t)pe[0].fd);
        }
        ADD_RELAXED(&IO.waiters, 1);
        struct park_many pm = {pe, n};
        int st = parker_wait(&p, unlock_many, &pm, deadline);
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
            ret = p.result ? -(p.index + 1) : 1;
        else
            ret = 0;
    }
    if (wts != few)
        free(wts);
    return ret;
}
