/* SPDX-License-Identifier: MIT */
/*
 * Channels, with Go's semantics. fern_select, which waits on channels among
 * other things, is in io/select.c; what it needs of a channel (the layout,
 * the attempts under the lock) is in chan.h.
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
 * A select (io/select.c) queues one waiter per case, sharing one parker:
 * close and every waker leave a waiter they could not claim linked, for its
 * own thread to unlink, and destroy waits until then.
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
#include "sync/chan.h"

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
/* chan_wait's wait, for the calling thread self (NULL: a plain thread):
 * inlined twice, so that the green thread's wait tests self once. */
static inline __attribute__((always_inline)) int chan_wait_as(fern_chan *ch, void *elem,
                                                             fern_waitq *q, const char *what,
                                                             int64_t deadline, bool plain,
                                                             fern_thread *self)
{
    struct waiter wt;
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
    fern_thread *self = thread_current();
    if (likely(self != NULL))
        return chan_wait_as(ch, elem, q, what, deadline, plain, self);
    return chan_wait_as(ch, elem, q, what, deadline, plain, NULL);
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

#if !ARCH_JUMP_RETURN
/* Where switch.S has no jump_return trampolines (arch.h: ARCH_JUMP_RETURN),
 * the public call is a plain call of its body. */
int fern_chan_send(fern_chan *ch, const void *elem) { return fern_chan_send_body(ch, elem); }
int fern_chan_recv(fern_chan *ch, void *elem) { return fern_chan_recv_body(ch, elem); }
#endif
