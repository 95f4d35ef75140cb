/* SPDX-License-Identifier: MIT */
/*
 * fern_rwlock, a reader-writer lock for green and plain threads.
 */
#include "sync/sync.h"

/* Phases alternate so that neither side starves: while a writer waits, new
 * readers queue; a writer's unlock admits every queued reader at once; the
 * last reader out admits one writer. A waker grants the lock on the waiter's
 * behalf (readers_++ or writer_ = its token) before waking it. Each thread
 * remembers which read locks it holds, so unlocking one it does not hold is
 * EPERM rather than silent corruption. */

struct rdheld {
    const void *lock[FERN_RWLOCK_READS_MAX];
    uint32_t n;
};

static __thread struct rdheld plain_rdheld;

static struct rdheld *rdheld_get(bool create)
{
    fern_thread *t = thread_current();
    if (!t)
        return &plain_rdheld;
    if (!t->rdheld && create)
        t->rdheld = calloc(1, sizeof *t->rdheld);
    return t->rdheld;
}

static bool rdheld_has(struct rdheld *h, const void *rw)
{
    for (uint32_t i = 0; h && i < h->n; i++)
        if (h->lock[i] == rw)
            return true;
    return false;
}

static bool rdheld_remove(struct rdheld *h, const void *rw)
{
    for (uint32_t i = 0; h && i < h->n; i++)
        if (h->lock[i] == rw) {
            h->lock[i] = h->lock[--h->n];
            return true;
        }
    return false;
}

int fern_rwlock_init(fern_rwlock *rw)
{
    if (!rw)
        return EINVAL;
    memset(rw, 0, sizeof *rw);
    return 0;
}

int fern_rwlock_destroy(fern_rwlock *rw)
{
    if (!rw)
        return EINVAL;
    /* Held, or a thread blocked: EBUSY. A writer that timed out is still
     * linked until it relocks rw to unlink itself (and maybe admit the
     * readers it held back, who then hold rw): wait for it. A woken waiter
     * was granted the lock before its wake-up, so it shows as a holder. */
    for (unsigned n = 0;; destroy_backoff(&n)) {
        spin_lock(&rw->lock_);
        int rs = waitq_state(&rw->readq_), ws = waitq_state(&rw->writeq_);
        bool held = rw->readers_ || rw->writer_;
        spin_unlock(&rw->lock_);
        if (held || rs == WQ_BLOCKED || ws == WQ_BLOCKED)
            return EBUSY;
        if (rs == WQ_IDLE && ws == WQ_IDLE)
            return 0;
    }
}

/* Under lock_, with no writer: admit every queued reader. Returns the
 * claimed waiters, to release after unlocking. */
static struct waiter *rw_admit_readers(fern_rwlock *rw)
{
    struct waiter *all = waitq_claim_all(&rw->readq_);
    for (struct waiter *wt = all; wt; wt = wt->next)
        rw->readers_++;
    return all;
}

/* Under lock_, with no writer and no readers: admit one writer. */
static struct waiter *rw_admit_writer(fern_rwlock *rw)
{
    struct waiter *wt = waitq_claim_one(&rw->writeq_);
    if (!wt)
        return NULL;
    rw->writers_waiting_--;
    STORE_RELAXED(&rw->writer_, wt->token);
    wt->next = NULL;
    return wt;
}

static int rw_rdlock(fern_rwlock *rw, int64_t deadline, bool try_only)
{
    if (!rw || deadline < 0)
        return EINVAL;
    void *self = self_token();
    if (LOAD_RELAXED(&rw->writer_) == self)
        return try_only ? EBUSY : EDEADLK; /* a try never waits, so cannot deadlock */
    struct rdheld *h = rdheld_get(true);
    if (!h)
        return ENOMEM;
    if (h->n == FERN_RWLOCK_READS_MAX)
        return EAGAIN;
    spin_lock(&rw->lock_);
    if (!rw->writer_ && rw->writers_waiting_ == 0) {
        rw->readers_++;
        spin_unlock(&rw->lock_);
        h->lock[h->n++] = rw;
        return 0;
    }
    if (try_only || (deadline != FERN_FOREVER && fern_now_ns() >= deadline)) {
        spin_unlock(&rw->lock_);
        return try_only ? EBUSY : ETIMEDOUT;
    }
    if (queue_wait(&rw->readq_, &rw->lock_, self, "rwlock (read)", rw, deadline, false) == W_TIMEDOUT)
        return ETIMEDOUT;
    h = rdheld_get(true); /* the thread may have resumed elsewhere: same table */
    h->lock[h->n++] = rw;
    return 0;
}

static int rw_wrlock(fern_rwlock *rw, int64_t deadline, bool try_only)
{
    if (!rw || deadline < 0)
        return EINVAL;
    void *self = self_token();
    if (LOAD_RELAXED(&rw->writer_) == self || rdheld_has(rdheld_get(false), rw))
        return try_only ? EBUSY : EDEADLK;
    spin_lock(&rw->lock_);
    if (!rw->writer_ && rw->readers_ == 0) {
        STORE_RELAXED(&rw->writer_, self);
        spin_unlock(&rw->lock_);
        return 0;
    }
    if (try_only || (deadline != FERN_FOREVER && fern_now_ns() >= deadline)) {
        spin_unlock(&rw->lock_);
        return try_only ? EBUSY : ETIMEDOUT;
    }
    struct waiter wt;
    waiter_init(&wt);
    wt.token = self;
    rw->writers_waiting_++;
    waitq_push(&rw->writeq_, &wt);
    wait_note("rwlock (write)", rw);
    int st = waiter_wait(&wt, &rw->lock_, deadline);
    wait_note(NULL, NULL);
    if (st == W_WOKEN)
        return 0;
    spin_lock(&rw->lock_);
    waitq_unlink(&wt);
    rw->writers_waiting_--;
    /* Readers may have queued only because this writer waited. */
    struct waiter *admitted = NULL;
    if (!rw->writer_ && rw->writers_waiting_ == 0)
        admitted = rw_admit_readers(rw);
    spin_unlock(&rw->lock_);
    waiters_release(admitted, 0);
    return ETIMEDOUT;
}

int fern_rwlock_rdlock(fern_rwlock *rw) { return rw_rdlock(rw, FERN_FOREVER, false); }
int fern_rwlock_tryrdlock(fern_rwlock *rw) { return rw_rdlock(rw, FERN_FOREVER, true); }
int fern_rwlock_timedrdlock(fern_rwlock *rw, int64_t d) { return rw_rdlock(rw, d, false); }
int fern_rwlock_wrlock(fern_rwlock *rw) { return rw_wrlock(rw, FERN_FOREVER, false); }
int fern_rwlock_trywrlock(fern_rwlock *rw) { return rw_wrlock(rw, FERN_FOREVER, true); }
int fern_rwlock_timedwrlock(fern_rwlock *rw, int64_t d) { return rw_wrlock(rw, d, false); }

int fern_rwlock_unlock(fern_rwlock *rw)
{
    if (!rw)
        return EINVAL;
    void *self = self_token();
    spin_lock(&rw->lock_);
    struct waiter *admitted = NULL;
    if (rw->writer_ == self) {
        STORE_RELAXED(&rw->writer_, NULL);
        if (!waitq_empty(&rw->readq_))
            admitted = rw_admit_readers(rw);
        if (rw->readers_ == 0)
            admitted = rw_admit_writer(rw);
        spin_unlock(&rw->lock_);
        waiters_release(admitted, 0);
        return 0;
    }
    if (rw->readers_ > 0 && rdheld_remove(rdheld_get(false), rw)) {
        if (--rw->readers_ == 0 && !(admitted = rw_admit_writer(rw)))
            admitted = rw_admit_readers(rw);
        spin_unlock(&rw->lock_);
        waiters_release(admitted, 0);
        return 0;
    }
    spin_unlock(&rw->lock_);
    return EPERM;
}
