/* SPDX-License-Identifier: MIT */
/*
 * fern_select: wait on channels, descriptors and timers at once (Go's
 * select, with poll(2)'s readiness and time.After / time.Ticker as cases),
 * and fern_ticker_wait, a select of one tick case. In io/ because it waits
 * on the poller; a channel's and a ticker's parts it needs are in
 * sync/chan.h and sync/ticker.h.
 *
 * A select of channel cases only takes select_chans, the round below
 * without its descriptor, timer and retry parts (what fern_select was
 * before it waited on anything else, at the same cost); any other case
 * makes it select_any.
 *
 * One round: register the descriptors (fdtab.c; the first time only),
 * snapshot their tick words, ask the kernel which are ready (one poll(2)
 * with a zero timeout, made only when there are descriptor cases), then lock
 * every object the cases name and try the cases in a random order: a
 * channel operation as fern_chan_try*, a descriptor that poll(2) reported, a
 * deadline that has passed, a ticker's pending tick. The first that can
 * proceed fires. Otherwise the select checks that no descriptor's tick word
 * moved since the snapshot (an edge between poll(2) and the locks would be
 * lost: then it unlocks and runs the round again, as fern-hook's poll does,
 * iohook.c), queues one waiter per case, all sharing one parker, and parks
 * with a timer at the earliest of its deadline, its deadline cases and its
 * tickers' pending ticks. The locks are released after the switch.
 *
 * Which waiters: a channel case waits in the channel's send or receive
 * queue, a ticker case in the ticker's queue, a descriptor case in the fd
 * entry's queue of any number of pollers (fdent.pq, which fern-hook uses
 * too), not in the one-reader/one-writer slots of the fern_* calls: every
 * edge claims every poller that wants its direction as well as the reader
 * or writer (poller.c), so a select does not take an edge from a fern_read
 * waiting on the same fd, nor it from the select, and a select on an fd
 * never sees EBUSY. A select consumes no readiness: it clears no READY
 * flag and marks nothing DRAINED (fdtab.c), so a fern_read after it makes
 * its system call or waits for the next edge exactly as it would have.
 *
 * Cancellation: the parker of a green thread's round is its cancellable
 * one (parker_cancellable, sync/wait.h), taken right before the park; a
 * cancel claims it (W_CANCELED) and the select unlinks every waiter and
 * returns -ECANCELED, from any round. A select that can fire without
 * waiting fires, cancelled or not.
 *
 * Waking. The first party to claim the parker decides (invariant 2,
 * docs/design.md): a channel's waker performed the operation; a close of
 * the fd (fern_close: EBADF) fires the case; an edge, a ticker's reset or
 * stop (TICKER_CHANGED) and the timer only make the select run another
 * round, which asks the kernel again (an edge may be stale: its data read
 * by someone else) and takes a tick only if it is there. So a descriptor
 * case fires only when poll(2) says the fd is ready, and a tick goes to
 * exactly one taker. On wake-up the select relocks every object where it
 * still has waiters and unlinks them: not the channel whose waker claimed
 * it, which may be destroyed by now (the destroy rule, sync/wait.c), nor
 * the ticker (the same rule; a ticker also counts the select in for its
 * whole call, ticker_enter, so that it outlives the rounds a reset or
 * stop causes); fd entries live as long as the runtime, and pollers that
 * an edge could not claim are unlinked by it anyway (pq_claim). Nothing
 * stays behind when a select returns through any case: no waiter, no count
 * in IO.waiters; the fd's registration is the one every fern_* call makes,
 * kept until fern_close.
 *
 * Lock order (docs/design.md, "Locks"): the channels' and tickers' locks in
 * address order, then the fd entries' locks in ascending fd order, as
 * fern__io_park takes them. Nothing takes a channel's or a ticker's lock
 * while it holds an fd entry's, and every other path holds one fd entry's
 * lock at a time, so no two of these can deadlock.
 *
 * The post-switch unlock releases the locks in reverse order, reading the
 * lock set in the parked select's frame before each release. The woken
 * select relocks in ascending order, skipping only the lock of the object
 * whose waker won it. So it first waits at lock 0, which the unlock
 * releases last, unless lock 0 is the skipped one: then its waker took lock
 * 0 to claim it, after the unlock's last release. Either way the unlock is
 * done with the frame before the select can return or run another round
 * (which refills the set). With no lock at all (deadline cases only) the
 * park gets no unlock to run.
 *
 * Memory ordering: as for the objects involved (chan.c, ticker.c,
 * fdtab.c); the tick snapshot is read with acquire and compared under the
 * entry's lock.
 */
#include "io.h"
#include "sync/chan.h"
#include "sync/ticker.h"

#include <poll.h>

struct lockset {
    uint32_t *l[FERN_SELECT_MAX];
    size_t n;
};

static void lockset_unlock(void *arg)
{
    struct lockset *ls = arg;
    for (size_t i = ls->n; i-- > 0;)
        spin_unlock(ls->l[i]);
}

static void lockset_lock(struct lockset *ls)
{
    for (size_t i = 0; i < ls->n; i++)
        spin_lock(ls->l[i]);
}

/* Insert lock l into the sorted, distinct run ls->l[lo..n) whose sort keys
 * are key[] (the lock's address for objects, the fd for fd entries). By
 * hand, not memmove: a select has a few cases, and this is on its path. */
static inline void lockset_add(struct lockset *ls, uintptr_t *key, size_t lo, uint32_t *l, uintptr_t k)
{
    size_t j = lo;
    while (j < ls->n && key[j] < k)
        j++;
    if (j < ls->n && ls->l[j] == l)
        return;
    for (size_t i = ls->n; i > j; i--) {
        ls->l[i] = ls->l[i - 1];
        key[i] = key[i - 1];
    }
    ls->l[j] = l;
    key[j] = k;
    ls->n++;
}

static uint64_t rand_next(void)
{
    static __thread uint64_t x;
    if (!x)
        x = (uint64_t)fern_now_ns() ^ (uint64_t)(uintptr_t)&x ^ 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

/* A uniformly random order of n cases (Fisher-Yates). */
static inline void shuffle(uint8_t *order, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t j = (size_t)(rand_next() % (i + 1));
        order[i] = (uint8_t)i;
        uint8_t x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
}

static inline bool is_chan_op(fern_select_op op) { return op == FERN_SEND || op == FERN_RECV; }
static inline bool is_fd_op(fern_select_op op)
{
    return op == FERN_FD_READABLE || op == FERN_FD_WRITABLE;
}

/* Per-case state of a select's descriptor cases. */
struct fdcase {
    struct fdent *e;   /* registered entry; NULL: never ready (fd < 0) or failed */
    int err;           /* registration failed: the case fires with this */
    uint32_t tick;     /* the direction's tick word at the snapshot */
    uint32_t gen;
    bool ready;        /* poll(2) said ready (or it is not pollable) */
};

/* One round's look at the descriptors: register, snapshot, poll(2).
 * Returns true if any case is ready (or failed). */
static bool fd_round(fern_select_case *cases, size_t n, struct fdcase *fc)
{
    struct pollfd pf[FERN_SELECT_MAX];
    uint8_t at[FERN_SELECT_MAX];
    size_t np = 0;
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (!is_fd_op(cases[i].op))
            continue;
        fc[i].ready = false;
        fc[i].e = NULL;
        fc[i].err = 0;
        if (cases[i].fd < 0)
            continue;
        struct fdent *e = io_register(cases[i].fd, true);
        if (!e) {
            fc[i].err = errno_get(); /* the loop spans parks (base/base.h) */
            any = true;
            continue;
        }
        fc[i].e = e;
        if (!LOAD_RELAXED(&e->pollable)) {
            fc[i].ready = any = true; /* a regular file: always ready */
            continue;
        }
        bool rd = cases[i].op == FERN_FD_READABLE;
        fc[i].gen = LOAD_RELAXED(&e->gen);
        fc[i].tick = LOAD(rd ? &e->rst : &e->wst) & ~ST_FLAGS;
        pf[np].fd = cases[i].fd;
        pf[np].events = rd ? POLLIN | POLLRDHUP : POLLOUT;
        pf[np].revents = 0;
        at[np++] = (uint8_t)i;
    }
    if (np && sys_poll(pf, (unsigned)np, 0) > 0) {
        for (size_t k = 0; k < np; k++) {
            short rv = pf[k].revents;
            if (!rv)
                continue;
            fern_select_case *c = &cases[at[k]];
            if (rv & POLLNVAL) {
                fc[at[k]].err = EBADF; /* closed with close(2), not fern_close */
                any = true;
                continue;
            }
            short want = c->op == FERN_FD_READABLE ? POLLIN | POLLRDHUP | POLLHUP | POLLERR
                                                   : POLLOUT | POLLHUP | POLLERR;
            if (rv & want)
                fc[at[k]].ready = any = true;
        }
    }
    return any;
}

/* Under the entries' locks: did any descriptor see an edge (or a close)
 * since its snapshot? */
static bool fd_moved(const fern_select_case *cases, size_t n, const struct fdcase *fc)
{
    for (size_t i = 0; i < n; i++) {
        const struct fdent *e = fc[i].e;
        if (!is_fd_op(cases[i].op) || !e)
            continue;
        bool rd = cases[i].op == FERN_FD_READABLE;
        if (!e->registered || e->gen != fc[i].gen ||
            (LOAD(rd ? &e->rst : &e->wst) & ~ST_FLAGS) != fc[i].tick)
            return true;
    }
    return false;
}

/* Under the locks: is a case other than a channel's ready? Its result
 * (0 or an errno value: the case fires) or EAGAIN. A tick is taken here. */
static __attribute__((noinline)) int other_ready(fern_select_case *c, const struct fdcase *f,
                                                 bool fd_any, int64_t now)
{
    switch (c->op) {
    case FERN_FD_READABLE:
    case FERN_FD_WRITABLE:
        return fd_any && (f->ready || f->err) ? f->err : EAGAIN;
    case FERN_DEADLINE:
        return c->deadline != FERN_FOREVER && now >= c->deadline ? 0 : EAGAIN;
    case FERN_TICK:
        return c->ticker && ticker_take_locked(c->ticker, now, c->elem) ? 0 : EAGAIN;
    default:
        return EAGAIN;
    }
}

/* The general select: any mix of cases (header comment). */
static __attribute__((noinline)) int select_any(fern_select_case *cases, size_t n, int64_t deadline_ns)
{
    struct lockset ls;
    uintptr_t keys[FERN_SELECT_MAX];
    uint32_t *lk[FERN_SELECT_MAX]; /* each case's channel or ticker lock, or NULL */
    uint8_t order[FERN_SELECT_MAX];
    ls.n = 0;
    bool waitable = false, fds = false, timers = deadline_ns != FERN_FOREVER;
    for (size_t i = 0; i < n; i++) {
        fern_select_case *c = &cases[i];
        c->result = 0;
        lk[i] = NULL;
        if (likely(is_chan_op(c->op))) { /* the common case first */
            if (!c->chan)
                continue;
            if (c->op == FERN_SEND && !c->elem)
                return -EINVAL;
            lk[i] = &c->chan->lock;
            lockset_add(&ls, keys, 0, lk[i], (uintptr_t)lk[i]);
            waitable = true;
            continue;
        }
        switch (c->op) {
        case FERN_FD_READABLE:
        case FERN_FD_WRITABLE:
            fds |= c->fd >= 0;
            waitable |= c->fd >= 0;
            break;
        case FERN_DEADLINE:
            if (c->deadline < 0)
                return -EINVAL;
            timers |= c->deadline != FERN_FOREVER;
            waitable |= c->deadline != FERN_FOREVER;
            break;
        case FERN_TICK:
            timers |= c->ticker != NULL;
            if (c->ticker) {
                lk[i] = &c->ticker->lock;
                lockset_add(&ls, keys, 0, lk[i], (uintptr_t)lk[i]);
                waitable = true;
            }
            break;
        default:
            return -EINVAL;
        }
    }
    size_t nobj = ls.n;
    if (!waitable) {
        if (deadline_ns == FERN_FOREVER)
            return -EINVAL;
        fern_sleep_until(deadline_ns);
        return -ETIMEDOUT;
    }
    /* Its channels in shared mode for good, before any lock is taken (a
     * revocation waits for the owner's operation to end): it locks them
     * all, and its waiters sit on several at once. */
    for (size_t i = 0; i < n; i++)
        if (lk[i] && is_chan_op(cases[i].op))
            bias_settle(&cases[i].chan->bias_, 0);
    shuffle(order, n);
    /* Every ticker counts this select in until it returns: a reset or stop
     * wakes it between rounds, when it has no waiter linked there, and
     * destroy must not free the ticker then (ticker.c). */
    for (size_t i = 0; i < n; i++)
        if (cases[i].op == FERN_TICK && cases[i].ticker)
            ticker_enter(cases[i].ticker);
    int ret;
    struct fdcase fc[FERN_SELECT_MAX];
    for (;;) {
        bool fd_any = false;
        if (fds) {
            fd_any = fd_round(cases, n, fc);
            /* The entries' locks after every object's, in fd order. */
            ls.n = nobj;
            for (size_t i = 0; i < n; i++)
                if (is_fd_op(cases[i].op) && fc[i].e && LOAD_RELAXED(&fc[i].e->pollable))
                    lockset_add(&ls, keys, nobj, &fc[i].e->lock, (uintptr_t)cases[i].fd);
        }
        lockset_lock(&ls);
        int64_t now = timers ? fern_now_ns() : 0;
        for (size_t k = 0; k < n; k++) {
            fern_select_case *c = &cases[order[k]];
            struct waiter *wake = NULL;
            int r = EAGAIN;
            if (c->op == FERN_RECV) {
                if (c->chan)
                    r = try_recv_locked(c->chan, c->elem, &wake);
            } else if (c->op == FERN_SEND) {
                if (c->chan)
                    r = try_send_locked(c->chan, c->elem, &wake);
            } else {
                r = other_ready(c, &fc[order[k]], fd_any, now);
            }
            if (r == EAGAIN)
                continue;
            lockset_unlock(&ls);
            if (wake)
                waiter_release(wake, 0);
            c->result = r;
            ret = order[k];
            goto out;
        }
        if (deadline_ns != FERN_FOREVER && now >= deadline_ns) {
            lockset_unlock(&ls);
            ret = -ETIMEDOUT;
            goto out;
        }
        if (fds && fd_moved(cases, n, fc)) {
            lockset_unlock(&ls);
            continue; /* an edge since the snapshot: ask the kernel again */
        }
        /* The timer: the earliest of the deadline, the deadline cases and
         * the tickers' pending ticks. */
        int64_t tdl = deadline_ns;
        for (size_t i = 0; timers && i < n; i++) {
            if (cases[i].op == FERN_DEADLINE && cases[i].deadline < tdl)
                tdl = cases[i].deadline;
            else if (cases[i].op == FERN_TICK && cases[i].ticker && cases[i].ticker->next < tdl)
                tdl = cases[i].ticker->next;
        }
        struct waiter stackw[8];
        struct waiter *w = n <= 8 ? stackw : malloc(n * sizeof *w);
        if (!w) {
            lockset_unlock(&ls);
            ret = -ENOMEM;
            goto out;
        }
        /* Cancellation (thread/cancel.c) claims the caller's own parker:
         * taken last, right before the park, holding the locks. */
        fern_thread *self = thread_current();
        struct parker own, *p;
        parker_init(&own);
        if (!(p = parker_cancellable(self, &own))) {
            lockset_unlock(&ls);
            if (w != stackw)
                free(w);
            ret = -ECANCELED;
            goto out;
        }
        bool fdw = false;
        for (size_t i = 0; i < n; i++) {
            fern_select_case *c = &cases[i];
            waiter_init(&w[i]);
            fern_waitq *q = NULL;
            if (is_chan_op(c->op)) {
                if (!c->chan)
                    continue;
                q = c->op == FERN_SEND ? &c->chan->sendq : &c->chan->recvq;
                w[i].data = c->elem;
            } else if (c->op == FERN_TICK && c->ticker) {
                q = &c->ticker->waiters;
            } else if (fds && is_fd_op(c->op) && fc[i].e) {
                q = &fc[i].e->pq;
                w[i].data = (void *)(intptr_t)(c->op == FERN_FD_READABLE ? FERN_READ : FERN_WRITE);
                fdw = true;
            }
            if (!q)
                continue;
            w[i].p = p;
            w[i].index = (int32_t)i;
            waitq_push(q, &w[i]);
        }
        if (self) {
            STORE_RELAXED(&self->wait_what, "select");
            STORE_RELAXED(&self->wait_obj, cases);
        }
        if (fdw) {
            ADD_RELAXED(&IO.waiters, 1);
            if (!self && !io_poll_owned()) {
                /* As io_wait (io.c): a plain thread waits on its futex; an
                 * idle worker becomes the poll owner now that io_active(). */
                full_fence();
                struct fern_cluster *cl = fern_cluster_default();
                if (cl)
                    cluster_wake(cl);
            }
        }
        int st = ls.n ? parker_wait(p, lockset_unlock, &ls, tdl) : parker_wait(p, NULL, NULL, tdl);
        if (fdw)
            __atomic_fetch_sub(&IO.waiters, 1, __ATOMIC_RELAXED);
        if (self)
            STORE_RELAXED(&self->wait_what, NULL);
        /* Unlink the waiters nobody won. A lockset of its own: the
         * post-switch unlock may still be reading ls (header comment). The
         * object whose waker won is skipped unless another case waits
         * there too: it may be gone. */
        int fired = st == W_WOKEN ? p->index : -1;
        uint32_t *skip = fired >= 0 ? lk[fired] : NULL;
        for (size_t i = 0; skip && i < n; i++)
            if ((int)i != fired && lk[i] == skip)
                skip = NULL;
        struct lockset left;
        left.n = 0;
        for (size_t k = 0; k < ls.n; k++)
            if (ls.l[k] != skip)
                left.l[left.n++] = ls.l[k];
        lockset_lock(&left);
        for (size_t i = 0; i < n; i++)
            if ((int)i != fired)
                waitq_unlink(&w[i]);
        lockset_unlock(&left);
        if (w != stackw)
            free(w);
        if (st == W_TIMEDOUT)
            continue; /* a timer case may be due: the next round sees */
        if (st == W_CANCELED) {
            ret = -ECANCELED;
            goto out;
        }
        fern_select_case *c = &cases[fired];
        if (is_chan_op(c->op) || (is_fd_op(c->op) && p->result)) {
            c->result = p->result;
            ret = fired;
            goto out;
        }
        /* An edge (ask the kernel again) or a ticker reset or stopped. */
    }
out:
    for (size_t i = 0; i < n; i++)
        if (cases[i].op == FERN_TICK && cases[i].ticker)
            ticker_leave(cases[i].ticker);
    return ret;
}

/* A select of channel cases only: the general round without its
 * descriptor, timer and retry parts, kept apart so that a channel select
 * costs what it did before select waited on anything else (bench figures in
 * the commit that split them). */
static inline __attribute__((always_inline)) int select_chans(fern_select_case *cases, size_t n,
                                                             int64_t deadline_ns)
{
    struct lockset ls;
    uint8_t order[FERN_SELECT_MAX];
    ls.n = 0;
    for (size_t i = 0; i < n; i++) {
        if (cases[i].op == FERN_SEND && cases[i].chan && !cases[i].elem)
            return -EINVAL;
        cases[i].result = 0;
        fern_chan *c = cases[i].chan;
        if (!c)
            continue;
        /* insertion into the sorted, distinct lock order */
        uint32_t *l = &c->lock;
        size_t j = 0;
        while (j < ls.n && ls.l[j] < l)
            j++;
        if (j < ls.n && ls.l[j] == l)
            continue;
        for (size_t k = ls.n; k > j; k--)
            ls.l[k] = ls.l[k - 1];
        ls.l[j] = l;
        ls.n++;
    }
    if (ls.n == 0) {
        if (deadline_ns == FERN_FOREVER)
            return -EINVAL;
        fern_sleep_until(deadline_ns);
        return -ETIMEDOUT;
    }
    /* Its channels in shared mode for good, before any lock is taken (a
     * revocation waits for the owner's operation to end): it locks them
     * all, and its waiters sit on several at once. */
    for (size_t i = 0; i < n; i++)
        if (cases[i].chan)
            bias_settle(&cases[i].chan->bias_, 0);
    shuffle(order, n);
    lockset_lock(&ls);
    for (size_t k = 0; k < n; k++) {
        fern_select_case *c = &cases[order[k]];
        if (!c->chan)
            continue;
        struct waiter *wake = NULL;
        int r = c->op == FERN_SEND ? try_send_locked(c->chan, c->elem, &wake)
                                   : try_recv_locked(c->chan, c->elem, &wake);
        if (r == EAGAIN)
            continue;
        lockset_unlock(&ls);
        if (wake)
            waiter_release(wake, 0);
        c->result = r;
        return order[k];
    }
    if (deadline_ns != FERN_FOREVER && fern_now_ns() >= deadline_ns) {
        lockset_unlock(&ls);
        return -ETIMEDOUT;
    }
    struct waiter stackw[8];
    struct waiter *w = n <= 8 ? stackw : malloc(n * sizeof *w);
    if (!w) {
        lockset_unlock(&ls);
        return -ENOMEM;
    }
    struct parker own, *p;
    parker_init(&own);
    fern_thread *self = thread_current();
    if (!(p = parker_cancellable(self, &own))) {
        lockset_unlock(&ls);
        if (w != stackw)
            free(w);
        return -ECANCELED;
    }
    for (size_t i = 0; i < n; i++) {
        waiter_init(&w[i]);
        if (!cases[i].chan)
            continue;
        w[i].p = p;
        w[i].index = (int32_t)i;
        w[i].data = cases[i].elem;
        waitq_push(cases[i].op == FERN_SEND ? &cases[i].chan->sendq : &cases[i].chan->recvq,
                   &w[i]);
    }
    if (self) {
        STORE_RELAXED(&self->wait_what, "select");
        STORE_RELAXED(&self->wait_obj, cases);
    }
    int st = parker_wait(p, lockset_unlock, &ls, deadline_ns);
    if (self)
        STORE_RELAXED(&self->wait_what, NULL);
    /* As select_any: relock all but the fired case's channel (unless
     * another case waits there too) and unlink. */
    int fired = st == W_WOKEN ? p->index : -1;
    uint32_t *fc = fired >= 0 ? &cases[fired].chan->lock : NULL;
    for (size_t i = 0; fc && i < n; i++)
        if ((int)i != fired && cases[i].chan && &cases[i].chan->lock == fc)
            fc = NULL;
    struct lockset left;
    left.n = 0;
    for (size_t k = 0; k < ls.n; k++)
        if (ls.l[k] != fc)
            left.l[left.n++] = ls.l[k];
    lockset_lock(&left);
    for (size_t i = 0; i < n; i++)
        if ((int)i != fired)
            waitq_unlink(&w[i]);
    lockset_unlock(&left);
    if (w != stackw)
        free(w);
    if (st == W_TIMEDOUT)
        return -ETIMEDOUT;
    if (st == W_CANCELED)
        return -ECANCELED;
    cases[p->index].result = p->result;
    return p->index;
}

int fern_select(fern_select_case *cases, size_t n, int64_t deadline_ns)
{
    if ((!cases && n) || n > FERN_SELECT_MAX || deadline_ns < 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!is_chan_op(cases[i].op))
            return select_any(cases, n, deadline_ns);
    return select_chans(cases, n, deadline_ns);
}

int fern_ticker_wait(fern_ticker *t, uint64_t *ticks, int64_t deadline_ns)
{
    if (!t || deadline_ns < 0)
        return EINVAL;
    fern_select_case c = {.ticker = t, .op = FERN_TICK, .elem = ticks, .result = 0};
    int r = fern_select(&c, 1, deadline_ns);
    return r < 0 ? -r : 0;
}
