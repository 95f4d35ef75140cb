/* SPDX-License-Identifier: MIT */
/*
 * Channels and select, with Go's semantics.
 *
 * A channel is a ring of `cap` elements plus two wait queues (blocked senders,
 * blocked receivers) under one spin lock. Invariants under the lock: if
 * receivers wait, the ring is empty; if senders wait, the ring is full (or the
 * channel is unbuffered).
 *
 * Delivery is direct: a sender that finds a waiting receiver claims it (the
 * CAS on its parker: invariant 2, docs/design.md), copies the element into
 * the receiver's destination, then releases it; a receiver that empties a slot
 * pulls the first waiting sender's element into the ring. A claimed waiter
 * always gets its value; a waiter that timed out or whose select fired
 * elsewhere loses the claim and is skipped, so every element is delivered
 * exactly once.
 *
 * select: lock every distinct channel in address order (no lock-order
 * deadlock between two selects), poll the cases in a random order and fire the
 * first ready one; otherwise queue one waiter per case, all sharing one
 * parker, and park; the channel locks are released after the switch. The
 * first party to claim the parker decides which case fired (its waker
 * unlinks that waiter); on wake-up the select relocks the channels where it
 * still has waiters, not the one that fired (it may be destroyed already),
 * and unlinks them. Close and every waker leave a waiter they could not
 * claim linked, for its own thread to unlink: destroy waits until then.
 *
 * Biased channels. Like a mutex (bias.c), a channel used only by the green
 * threads of a one-worker cluster is biased to that worker: its operations
 * take no spin lock (a green thread is never preempted inside fern, and the
 * worker runs one green thread at a time), so a rendezvous makes no locked
 * instruction. On a Sapphire Rapids VM the one-worker round trip of
 * bench/fern_pingpong (four rendezvous) went from 55.5 to 39 ns without
 * them. The first use by anyone else (a plain thread, another worker)
 * revokes the bias once, and from then on the channel takes its lock.
 * select makes its channels shared first (it locks several at once, and a
 * revocation must not wait while holding a lock).
 *
 * Memory ordering: every field is read and written under the channel's spin
 * lock (acquire/release), or in plain mode by one worker; closed is stored
 * relaxed under it for lock-free readers, which only use it as a hint. The
 * wait_what/wait_obj notes are relaxed: fern_dump reads them for display
 * only.
 */
#include "sync/sync.h"

struct fern_chan {
    uint32_t lock;
    uint32_t bias_; /* see bias.c */
    uint32_t closed;
    size_t elem_size, cap;
    size_t head, count;
    fern_waitq recvq, sendq;
    char *buf;
};

int fern_chan_create(fern_chan **out, size_t elem_size, size_t capacity)
{
    size_t bytes;
    if (!out || elem_size == 0 || __builtin_mul_overflow(elem_size, capacity, &bytes))
        return EINVAL;
    fern_chan *ch = calloc(1, sizeof *ch);
    if (!ch)
        return ENOMEM;
    if (bytes) {
        ch->buf = malloc(bytes);
        if (!ch->buf) {
            free(ch);
            return ENOMEM;
        }
    }
    ch->elem_size = elem_size;
    ch->cap = capacity;
    *out = ch;
    return 0;
}

/* An operation's start for the calling thread (*me): ch's mode settled and
 * its lock taken in shared mode; returns true for plain mode. Every
 * operation so begun ends with chan_unlock, or parks (the post-switch
 * action then unlocks and ends it). */
static inline bool chan_lock(fern_chan *ch, struct caller *me)
{
    caller_get(me);
    bool plain = bias_enter(&ch->bias_, me);
    qlock(plain, &ch->lock);
    return plain;
}

static inline void chan_unlock(fern_chan *ch, bool plain, const struct caller *me)
{
    qunlock(plain, &ch->lock);
    bias_end(me);
}

int fern_chan_destroy(fern_chan *ch)
{
    if (!ch)
        return EINVAL;
    /* The destroy rule (wait.c): EBUSY while a sender, receiver or select
     * is blocked here; wait while one is only leaving (timed out, or its
     * select fired elsewhere: it relocks ch to unlink itself, and that
     * unlock is its last access). A thread inside an operation holds the
     * lock, so taking it waits for that one too. */
    for (unsigned n = 0;; destroy_backoff(&n)) {
        struct caller me;
        bool plain = chan_lock(ch, &me);
        int rs = waitq_state(&ch->recvq), ss = waitq_state(&ch->sendq);
        chan_unlock(ch, plain, &me);
        if (rs == WQ_BLOCKED || ss == WQ_BLOCKED)
            return EBUSY;
        if (rs == WQ_IDLE && ss == WQ_IDLE)
            break;
    }
    free(ch->buf);
    free(ch);
    return 0;
}

int fern_chan_close(fern_chan *ch)
{
    if (!ch)
        return EINVAL;
    struct caller me;
    bool plain = chan_lock(ch, &me);
    if (ch->closed) {
        chan_unlock(ch, plain, &me);
        return EPIPE;
    }
    STORE_RELAXED(&ch->closed, 1);
    struct waiter *r = waitq_claim_all(&ch->recvq);
    struct waiter *w = waitq_claim_all(&ch->sendq);
    chan_unlock(ch, plain, &me);
    waiters_release(r, EPIPE);
    waiters_release(w, EPIPE);
    return 0;
}

size_t fern_chan_len(fern_chan *ch)
{
    if (!ch)
        return 0;
    struct caller me;
    bool plain = chan_lock(ch, &me);
    size_t n = ch->count;
    chan_unlock(ch, plain, &me);
    return n;
}

size_t fern_chan_cap(fern_chan *ch) { return ch ? ch->cap : 0; }

static inline char *slot(fern_chan *ch, size_t i) { return ch->buf + (i % ch->cap) * ch->elem_size; }

/* Copy one element; the common small sizes without a call. */
static inline void elem_copy(fern_chan *ch, void *dst, const void *src)
{
    switch (ch->elem_size) {
    case 8:
        memcpy(dst, src, 8);
        break;
    case 4:
        memcpy(dst, src, 4);
        break;
    case 16:
        memcpy(dst, src, 16);
        break;
    default:
        memcpy(dst, src, ch->elem_size);
    }
}

static inline void copy_out(fern_chan *ch, void *dst, const void *src)
{
    if (dst)
        elem_copy(ch, dst, src);
}

/* Under the lock: try to send now. Returns 0 (sent), EPIPE (closed) or
 * EAGAIN (would wait). *wake is a claimed receiver to release after unlock. */
static inline __attribute__((always_inline)) int try_send_locked(fern_chan *ch, const void *elem, struct waiter **wake)
{
    if (ch->closed)
        return EPIPE;
    struct waiter *r = waitq_claim_one(&ch->recvq);
    if (r) {
        copy_out(ch, r->data, elem);
        *wake = r;
        return 0;
    }
    if (ch->count < ch->cap) {
        elem_copy(ch, slot(ch, ch->head + ch->count), elem);
        ch->count++;
        return 0;
    }
    return EAGAIN;
}

/* Under the lock: try to receive now. Returns 0, EPIPE (closed and drained)
 * or EAGAIN. *wake is a claimed sender to release after unlock. */
static inline __attribute__((always_inline)) int try_recv_locked(fern_chan *ch, void *elem, struct waiter **wake)
{
    if (ch->count > 0) {
        copy_out(ch, elem, slot(ch, ch->head));
        ch->head = (ch->head + 1) % ch->cap;
        ch->count--;
        struct waiter *s = waitq_claim_one(&ch->sendq);
        if (s) {
            elem_copy(ch, slot(ch, ch->head + ch->count), s->data);
            ch->count++;
            *wake = s;
        }
        return 0;
    }
    struct waiter *s = waitq_claim_one(&ch->sendq);
    if (s) {
        copy_out(ch, elem, s->data);
        *wake = s;
        return 0;
    }
    return ch->closed ? EPIPE : EAGAIN;
}

/* chan_op once the attempt under the lock found nothing to do now: the
 * caller holds ch's lock; q is the queue to wait in (sendq or recvq) and
 * `what` the note for fern_dump. Out of line, so that the immediate
 * hand-over (the other side waits) saves no registers and keeps no waiter
 * frame, and one function for both directions, taking q and the note
 * instead of testing `send`: its call of sched_park is then the one place
 * where every channel operation parks, so a thread resumed after another
 * thread's park in the other direction finds the same return addresses on
 * the CPU's return stack (docs/switch.md). Split per direction, it made
 * the capacity-1 producer/consumer 1 ns per item slower, with fewer
 * instructions. */
#define WAIT_TRY 1   /* chan_wait's flags: a try operation, */
#define WAIT_PLAIN 2 /* the channel in plain mode (six arguments: a tail call) */
static __attribute__((noinline)) int chan_wait(fern_chan *ch, void *elem, fern_waitq *q,
                                               const char *what, int64_t deadline, int flags)
{
    bool try_only = flags & WAIT_TRY, plain = flags & WAIT_PLAIN;
    if (try_only || (deadline != FERN_FOREVER && fern_now_ns() >= deadline)) {
        struct caller me; /* the operation's, not parked since */
        caller_get(&me);
        chan_unlock(ch, plain, &me);
        return try_only ? EAGAIN : ETIMEDOUT;
    }
    struct waiter wt;
    fern_thread *self = thread_current();
    if (unlikely(!waiter_init_cancellable(&wt, self))) {
        struct caller me;
        caller_get(&me);
        chan_unlock(ch, plain, &me);
        return ECANCELED;
    }
    wt.data = elem;
    waitq_push(q, &wt);
    if (self) {
        STORE_RELAXED(&self->wait_what, what);
        STORE_RELAXED(&self->wait_obj, ch);
    }
    /* Ends the operation. */
    int st = waiter_wait_as(&wt, self, plain ? NULL : &ch->lock, deadline);
    if (self)
        STORE_RELAXED(&self->wait_what, NULL);
    if (st == W_WOKEN)
        return wt.p->result;
    /* Timed out or cancelled: a new operation (the thread may run on another
     * worker, and the bias may have been revoked meanwhile). */
    struct caller again;
    plain = chan_lock(ch, &again);
    waitq_unlink(&wt);
    chan_unlock(ch, plain, &again);
    return st == W_CANCELED ? ECANCELED : ETIMEDOUT;
}

static inline int chan_wait_dir(fern_chan *ch, void *elem, bool send, int64_t deadline,
                                bool try_only, bool plain)
{
    return chan_wait(ch, elem, send ? &ch->sendq : &ch->recvq, send ? "chan send" : "chan recv",
                     deadline, (try_only ? WAIT_TRY : 0) | (plain ? WAIT_PLAIN : 0));
}

/* chan_op under ch's lock (or in plain mode): the attempt, then the wait or
 * the unlock, the operation's end and the claimed waiter's wake-up (a
 * claimed waiter means success), `inline_wake` on the fast path only. */
static inline __attribute__((always_inline)) int chan_op_locked(fern_chan *ch, void *elem, bool send,
                                                                int64_t deadline, bool try_only,
                                                                bool inline_wake, bool plain,
                                                                struct caller me)
{
    struct waiter *wake = NULL;
    int r = send ? try_send_locked(ch, elem, &wake) : try_recv_locked(ch, elem, &wake);
    if (r == EAGAIN)
        return chan_wait_dir(ch, elem, send, deadline, try_only, plain);
    chan_unlock(ch, plain, &me);
    if (wake) {
        if (inline_wake)
            waiter_release_inline(wake, 0, false);
        else
            waiter_release(wake, 0);
        return 0;
    }
    return r;
}

/* The whole of chan_op but its argument checks, out of line: the cases
 * chan_op leaves to it. `how` is SLOW_HOW(mode, locked): `mode` as
 * bias_try returned it, < 0 if the bias is to be settled first (nothing
 * begun), else the operation is open in that mode and `locked` says whether
 * the caller holds ch's lock (shared mode) already. One argument for both:
 * six in all, so that chan_op's calls are tail calls. */
#define SLOW_HOW(mode, locked) (((mode) + 1) * 2 + (locked))
static __attribute__((noinline)) int chan_op_slow(fern_chan *ch, void *elem, bool send,
                                                  int64_t deadline, bool try_only, int how)
{
    int mode = how / 2 - 1;
    struct caller me; /* the same as chan_op's: no park in between */
    caller_get(&me);
    bool plain = mode >= 0 ? mode : bias_enter(&ch->bias_, &me);
    if (!(how & 1))
        qlock(plain, &ch->lock);
    return chan_op_locked(ch, elem, send, deadline, try_only, false, plain, me);
}

/* Inlined into each entry point, so that send and recv each get their own
 * code with `send`, the deadline and try_only known. The common case
 * stays here: the lock free at once (claiming the other side's waiter, of
 * any kind, makes no call: waitq_claim_one); then the only calls left are
 * tail calls (the wait, the slow cases), the final wake-up and memcpy for
 * elements of other sizes than 4, 8 and 16 bytes. */
static inline __attribute__((always_inline)) int chan_op(fern_chan *ch, void *elem, bool send,
                                                         int64_t deadline, bool try_only)
{
    if (!ch || (send && !elem) || deadline < 0)
        return EINVAL;
    struct caller me;
    caller_get(&me);
    int mode = bias_try(&ch->bias_, &me);
    if (unlikely(mode < 0) || (!mode && unlikely(!spin_trylock(&ch->lock))))
        return chan_op_slow(ch, elem, send, deadline, try_only, SLOW_HOW(mode, 0));
    /* Whatever the other side's first waiter (solo, timed or a select's):
     * waitq_claim_one claims any without a call. */
    return chan_op_locked(ch, elem, send, deadline, try_only, true, mode, me);
}

int fern_chan_send_body(fern_chan *ch, const void *elem)
{
    preempt_point();
    return chan_op(ch, (void *)elem, true, FERN_FOREVER, false);
}
int fern_chan_trysend(fern_chan *ch, const void *elem)
{
    return chan_op(ch, (void *)elem, true, FERN_FOREVER, true);
}
int fern_chan_timedsend(fern_chan *ch, const void *elem, int64_t deadline_ns)
{
    return chan_op(ch, (void *)elem, true, deadline_ns, false);
}
int fern_chan_recv_body(fern_chan *ch, void *elem)
{
    preempt_point();
    return chan_op(ch, elem, false, FERN_FOREVER, false);
}
int fern_chan_tryrecv(fern_chan *ch, void *elem) { return chan_op(ch, elem, false, FERN_FOREVER, true); }
int fern_chan_timedrecv(fern_chan *ch, void *elem, int64_t deadline_ns)
{
    return chan_op(ch, elem, false, deadline_ns, false);
}

/* ------------------------------------------------------------------------ */
/* select                                                                    */
/* ------------------------------------------------------------------------ */

struct lockset {
    fern_chan *ch[FERN_SELECT_MAX];
    size_t n;
};

static void lockset_unlock(void *arg)
{
    struct lockset *ls = arg;
    for (size_t i = ls->n; i-- > 0;)
        spin_unlock(&ls->ch[i]->lock);
}

static void lockset_lock(struct lockset *ls)
{
    for (size_t i = 0; i < ls->n; i++)
        spin_lock(&ls->ch[i]->lock);
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

int fern_select(fern_select_case *cases, size_t n, int64_t deadline_ns)
{
    if ((!cases && n) || n > FERN_SELECT_MAX || deadline_ns < 0)
        return -EINVAL;
    struct lockset ls;
    uint8_t order[FERN_SELECT_MAX];
    ls.n = 0;
    for (size_t i = 0; i < n; i++) {
        if (cases[i].op != FERN_SEND && cases[i].op != FERN_RECV)
            return -EINVAL;
        if (cases[i].op == FERN_SEND && cases[i].chan && !cases[i].elem)
            return -EINVAL;
        cases[i].result = 0;
        fern_chan *c = cases[i].chan;
        if (!c)
            continue;
        /* insertion into the sorted, distinct lock order */
        size_t j = 0;
        while (j < ls.n && ls.ch[j] < c)
            j++;
        if (j < ls.n && ls.ch[j] == c)
            continue;
        memmove(&ls.ch[j + 1], &ls.ch[j], (ls.n - j) * sizeof ls.ch[0]);
        ls.ch[j] = c;
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
    for (size_t k = 0; k < ls.n; k++)
        bias_settle(&ls.ch[k]->bias_, 0);
    /* Poll in a uniformly random order (Fisher-Yates). */
    for (size_t i = 0; i < n; i++) {
        size_t j = (size_t)(rand_next() % (i + 1));
        order[i] = (uint8_t)i;
        uint8_t x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
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
    /* Unlink the waiters nobody won (the destroy rule, wait.c). The case
     * that fired was unlinked by its waker, and its channel may be closed
     * and destroyed by now: relock it only if another case still waits
     * there. A lockset of its own: the post-switch unlock may still be
     * reading ls (it releases the locks one by one, and we may have been
     * woken through one already released); it is done with a channel once
     * it has unlocked it, and we relock every other one. */
    int fired = st == W_WOKEN ? p->index : -1;
    fern_chan *fc = fired >= 0 ? cases[fired].chan : NULL;
    for (size_t i = 0; fc && i < n; i++)
        if ((int)i != fired && cases[i].chan == fc)
            fc = NULL; /* another case waits there too */
    struct lockset left;
    left.n = 0;
    for (size_t k = 0; k < ls.n; k++)
        if (ls.ch[k] != fc)
            left.ch[left.n++] = ls.ch[k];
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

#if !ARCH_JUMP_RETURN
/* Where switch.S has no jump_return trampolines (arch.h: ARCH_JUMP_RETURN),
 * the public call is a plain call of its body. */
int fern_chan_send(fern_chan *ch, const void *elem) { return fern_chan_send_body(ch, elem); }
int fern_chan_recv(fern_chan *ch, void *elem) { return fern_chan_recv_body(ch, elem); }
#endif
