/* SPDX-License-Identifier: MIT */
/*
 * The poller: one epoll set for the process (edge-triggered; fdtab.c
 * registers each fd once) and an eventfd in the same set to interrupt it.
 *
 * Polling is woven into the scheduler, with no poller thread:
 *  - an idle worker polls without blocking before it goes to sleep;
 *  - one idle worker at a time (the poll owner) sleeps in epoll_wait instead
 *    of on its futex, with its earliest timer as the timeout (to the
 *    nanosecond, epoll_pwait2: epoll_wait's whole milliseconds made every
 *    sleeper of that worker up to 1 ms late while any fd or io_uring op was
 *    waited on); cluster_wake interrupts it through the eventfd;
 *  - a busy worker polls without blocking every 64 scheduling ticks while
 *    anyone waits on an fd, so ready fds are served even under load.
 * An event ticks the entry's state word and readies the threads it claims
 * (sched_ready): a thread of another cluster goes to that cluster's inbox.
 * The io_uring rings' eventfds sit in the same set (uring.c): their event
 * reaps that ring's completions.
 *
 * Memory ordering. The poll owner's in_epoll and a waker's sleep_word form
 * the store-buffer pattern with sched/idle.c: a full_fence on each side.
 * poll_owner: acquire CAS to take, release store to give up. wake_pending:
 * acq_rel exchange, so one eventfd write per wake. waiters: a relaxed count
 * (io_active is a hint); a plain thread about to wait fences after counting
 * itself, then wakes a worker if it sees no poll owner, and that worker sees
 * the count. ctls: relaxed, a statistic.
 */
#include "io.h"
#include "sched/trace.h"
#include "arch/syscall.h"

#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EV_WAKE UINT64_MAX

struct poller IO = {-1, -1, 0, 0, 0, 0};

int io_init(void)
{
    long ep = sys_epoll_create1(EPOLL_CLOEXEC);
    IO.epfd = ep < 0 ? -1 : (int)ep;
    IO.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (IO.epfd < 0 || IO.evfd < 0) {
        int e = ep < 0 ? (int)-ep : errno;
        io_fini();
        return e;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = EV_WAKE};
    if (epoll_ctl(IO.epfd, EPOLL_CTL_ADD, IO.evfd, &ev)) {
        int e = errno;
        io_fini();
        return e;
    }
    int e = fdtab_init();
    if (e)
        io_fini();
    else {
        uring_init();    /* the probe: io_uring or the pool for file calls */
        io_file_probe(); /* and whether RWF_NOWAIT reads and writes exist */
    }
    return e;
}

void io_fini(void)
{
    uring_fini();
    if (IO.epfd >= 0)
        sys_close(IO.epfd);
    if (IO.evfd >= 0)
        sys_close(IO.evfd);
    fdtab_fini();
    IO.epfd = IO.evfd = -1;
    IO.waiters = IO.poll_owner = IO.wake_pending = 0;
    STORE_RELAXED(&IO.ctls, 0);
}

int poller_ctl(int op, int fd, struct epoll_event *ev)
{
    ADD_RELAXED(&IO.ctls, 1);
    return epoll_ctl(IO.epfd, op, fd, ev);
}

uint64_t io_poller_ctls(void) { return LOAD_RELAXED(&IO.ctls); }

static void io_dispatch(struct epoll_event *ev, bool owner)
{
    if (ev->data.u64 == EV_WAKE) {
        /* Only the poll owner drains the wake: if a non-blocking poller
         * read it, the owner's epoll_wait would find nothing and sleep on. */
        if (owner) {
            uint64_t v;
            sys_read(IO.evfd, &v, sizeof v);
            STORE_RELAXED(&IO.wake_pending, 0);
        }
        return;
    }
    if (unlikely(uring_tag(ev->data.u64))) {
        uring_reap(ev->data.u64);
        return;
    }
    int fd = (int)(uint32_t)ev->data.u64;
    uint32_t gen = (uint32_t)(ev->data.u64 >> 32);
    struct fdent *e = fdent_get(fd);
    if (!e)
        return;
    struct parker *r = NULL, *w = NULL;
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
        if (e->rw && parker_claim(e->rw, FERN_READ))
            r = e->rw;
        else
            set |= ST_READY;
        e->rw = NULL;
        st_update(&e->rst, ST_DRAINED, set);
    }
    if (evs & (EPOLLOUT | EPOLLHUP | EPOLLERR)) {
        uint32_t set = evs & (EPOLLHUP | EPOLLERR) ? ST_FINAL : 0;
        if (e->ww && parker_claim(e->ww, FERN_WRITE))
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
        parker_release(r, 0);
    if (w)
        parker_release(w, 0);
    if (pq)
        waiters_release(pq, 0);
}

/* Does the kernel have epoll_pwait2 (Linux 5.11)? Cleared by the first
 * ENOSYS (an old kernel, a seccomp filter, qemu-user), after which a timed
 * sleep rounds up to epoll_wait's whole milliseconds, as before. The raw
 * call: glibc before 2.35 has no wrapper. */
static bool have_pwait2 = true;

/* epoll_wait with a nanosecond timeout (0: do not block; FERN_FOREVER:
 * none). Returns the number of events or -errno (errno untouched). */
static int poller_wait(struct epoll_event *evs, int max, int64_t timeout_ns)
{
    if (timeout_ns > 0 && timeout_ns != FERN_FOREVER && LOAD_RELAXED(&have_pwait2)) {
        struct timespec ts = {timeout_ns / 1000000000, timeout_ns % 1000000000};
        long n = arch_syscall6(SYS_epoll_pwait2, IO.epfd, (long)evs, max, (long)&ts, 0, 0);
        if (n != -ENOSYS)
            return (int)n;
        STORE_RELAXED(&have_pwait2, false);
    }
    int ms = timeout_ns == FERN_FOREVER ? -1 : (int)((timeout_ns + 999999) / 1000000);
    return (int)sys_epoll_wait(IO.epfd, evs, max, ms);
}

/* Poll and dispatch; timeout_ns 0 = do not block. Returns events handled. */
static int io_poll_for(int64_t timeout_ns, bool owner)
{
    struct epoll_event evs[64];
    int n = poller_wait(evs, 64, timeout_ns);
    int handled = 0;
    /* On a worker, the threads the events wake go to its `soon` list in
     * order, not its hand-off slot (sched/ready.c: ready_from): they run before
     * the queued threads, within its streak bound, and a batch does not
     * push out the thread a primitive's wake put there. From the monitor
     * (watch_poller), they go to their clusters' inboxes. */
    struct worker *self = n > 0 ? worker_self() : NULL;
    uint8_t was = self ? self->wake_from : WAKE_DIRECT;
    if (self)
        self->wake_from = WAKE_POLL;
    for (int i = 0; i < n; i++) {
        io_dispatch(&evs[i], owner);
        handled += evs[i].data.u64 != EV_WAKE;
    }
    if (self)
        self->wake_from = was;
    if (n > 0)
        TRACE(trace_event(self, TR_POLL, (uint64_t)handled, timeout_ns != 0, 0));
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
    STORE(&w->idle.in_epoll, 1);
    full_fence();
    if (!LOAD(&w->idle.sleep_word)) {
        STORE(&w->idle.in_epoll, 0);
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
    STORE(&w->idle.in_epoll, 0);
    STORE(&IO.poll_owner, 0);
    return true;
}

/* Interrupt the worker sleeping in epoll_wait (cluster_wake picked it). */
void io_wake(void)
{
    if (__atomic_exchange_n(&IO.wake_pending, 1, __ATOMIC_ACQ_REL))
        return;
    uint64_t one = 1;
    sys_write(IO.evfd, &one, sizeof one);
}

