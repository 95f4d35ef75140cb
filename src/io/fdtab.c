/* SPDX-License-Identifier: MIT */
/*
 * The fd table: an entry per fd used through fern, its registration with
 * the poller (poller.c), and the per-direction state words that keep edges.
 *
 * One epoll instance for the process, edge-triggered. Each fd used through
 * fern has an entry in a two-level fd-indexed table (chunks of FD_CHUNK
 * entries, allocated on first use): a lock, the parkers of one waiting
 * reader and one waiting writer (io.c), a state word per direction (below),
 * per-fd deadlines and a generation that fern_close bumps. An fd is registered (EPOLLIN | EPOLLOUT |
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
 *
 * Memory ordering. The per-direction state words (rst, wst) change only by
 * RMW (acq_rel; st_begin's is seq_cst so the system call after it cannot be
 * ordered before it), one location, so the READY/DRAINED/tick logic holds on
 * any CPU.
 * FDT.chunks and the chunk slots are published with release (store or CAS)
 * after the chunk is initialised, and read with acquire. registered is
 * stored with release after epoll_ctl(ADD) and loaded with acquire.
 * rdl, wdl, tcp: relaxed, per-fd settings read as of the call.
 */
#include "io.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>

struct fdtab FDT = {0, NULL};

/* Size the table for RLIMIT_NOFILE; publishing chunks marks the runtime's
 * I/O as booted (io_register), so this comes last in io_init. */
int fdtab_init(void)
{
    struct rlimit rl;
    uint64_t max = 1u << 20;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && rl.rlim_max < max)
        max = rl.rlim_max;
    FDT.nchunks = (uint32_t)((max + FD_CHUNK - 1) / FD_CHUNK);
    struct fdent **chunks = calloc(FDT.nchunks, sizeof *chunks);
    if (!chunks)
        return ENOMEM;
    STORE(&FDT.chunks, chunks);
    return 0;
}

void fdtab_fini(void)
{
    for (uint32_t i = 0; FDT.chunks && i < FDT.nchunks; i++)
        free(FDT.chunks[i]);
    free(FDT.chunks);
    STORE(&FDT.chunks, NULL);
    FDT.nchunks = 0;
}

/* fdent_get's first use of a chunk: allocate it, or take the one another
 * thread installed first. */
struct fdent *fdtab_chunk(struct fdent **slot, int fd)
{
    struct fdent *n = calloc(FD_CHUNK, sizeof *n);
    if (!n)
        return NULL;
    for (unsigned i = 0; i < FD_CHUNK; i++)
        n[i].rdl = n[i].wdl = FERN_FOREVER;
    struct fdent *c, *expect = NULL;
    if (CAS(slot, &expect, n))
        c = n;
    else {
        free(n);
        c = expect;
    }
    return &c[(uint32_t)fd % FD_CHUNK];
}

/* Register fd (and, for the fern_* calls, make it non-blocking; fern-hook
 * keeps the flags itself). Returns the entry, or NULL with errno. */
struct fdent *io_register(int fd, bool nonblock)
{
    if (unlikely(!LOAD(&FDT.chunks))) {
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
        int type = 0, proto = 0;
        socklen_t tl = sizeof type, pl = sizeof proto;
        bool sock = sys_getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0;
        bool tcp = sock && type == SOCK_STREAM &&
                   sys_getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &pl) == 0 &&
                   proto == IPPROTO_TCP;
        STORE_RELAXED(&e->tcp, (uint8_t)tcp);
        STORE_RELAXED(&e->sock, (uint8_t)sock);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET |
                                           (tcp ? EPOLLPRI : 0),
                                 .data.u64 = (uint64_t)(uint32_t)fd | (uint64_t)e->gen << 32};
        int r = poller_ctl(EPOLL_CTL_ADD, fd, &ev);
        if (r && errno == EEXIST)
            r = poller_ctl(EPOLL_CTL_MOD, fd, &ev);
        e->pollable = r == 0;
        st_update(&e->rst, ST_FLAGS, 0);
        st_update(&e->wst, ST_FLAGS, 0);
        STORE(&e->registered, 1);
    }
    spin_unlock(&e->lock);
    return e;
}

/* Claim the hook pollers of e waiting for any of `dirs` (all if dirs is 0),
 * chained through ->next for waiters_release. Under e->lock. */
struct waiter *pq_claim(struct fdent *e, int dirs)
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

/* fern_close without the close: wake every waiter of fd with EBADF, drop
 * the registration, start the number's next user clean. */
void io_forget(int fd)
{
    struct fdent *e = fdent_get(fd);
    if (!e)
        return;
    struct parker *r = NULL, *w = NULL;
    struct waiter *pq;
    spin_lock(&e->lock);
    if (e->registered) {
        if (e->pollable)
            poller_ctl(EPOLL_CTL_DEL, fd, NULL);
        STORE(&e->registered, 0);
    }
    e->gen++;
    st_update(&e->rst, ST_FLAGS, 0);
    st_update(&e->wst, ST_FLAGS, 0);
    if (e->rw && parker_claim(e->rw, FERN_READ))
        r = e->rw;
    if (e->ww && parker_claim(e->ww, FERN_WRITE))
        w = e->ww;
    e->rw = e->ww = NULL;
    pq = pq_claim(e, 0);
    STORE_RELAXED(&e->rdl, FERN_FOREVER);
    STORE_RELAXED(&e->wdl, FERN_FOREVER);
    spin_unlock(&e->lock);
    if (r)
        parker_release(r, EBADF);
    if (w)
        parker_release(w, EBADF);
    if (pq)
        waiters_release(pq, EBADF);
}
