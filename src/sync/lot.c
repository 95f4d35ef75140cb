/* SPDX-License-Identifier: MIT */
/*
 * The parking lot: wait queues keyed by an address, for objects whose memory
 * fern does not own (a pthread_mutex_t, a pthread_cond_t, a sem_t of the
 * program: fern-hook's lock families, hook/lock.h). The object keeps its
 * own words; the lot only holds the parties blocked on it.
 *
 * Layout. A fixed table of buckets, each a spin lock and one wait queue;
 * an address hashes to one bucket, and the waiters of every address that
 * hashes there share its queue (each waiter records its address in
 * `data`). No allocation, nothing to set up, nothing to tear down: an
 * object unknown to the lot costs nothing, and one destroyed with nobody
 * parked leaves nothing behind.
 *
 * Protocol (the lost-wake-up rule). A parker calls lot_park with a
 * validation function; it runs under the bucket's lock and the party parks
 * only if it says the object still needs waiting for (a lock word still
 * held, a sequence word unchanged). A waker changes the object's word
 * FIRST and then calls lot_unpark, which takes the same bucket lock: either
 * the parker validated before the change and is queued (the waker finds
 * it), or it validates after and sees the change (it does not park). Both
 * kinds of party may be green threads or plain threads: a waiter is fern's
 * ordinary waiter, parked or on its futex (sync/wait.c), and wakes exactly
 * once (invariant 2, docs/design.md), so a timed-out waiter is never
 * counted as woken.
 *
 * lot_nwait counts the parties inside lot_park (incremented before the
 * validation, with a full fence). A waker that changed the word and then,
 * after a full fence, reads 0 knows nobody validated before its change
 * (the store-buffer argument of invariant 3), and skips the bucket lock:
 * code whose waiters are all elsewhere (plain threads on glibc's futex)
 * pays one load.
 *
 * Lock order: a bucket's lock is an object lock (level 3 of
 * docs/design.md's order); nothing is taken under it but the scheduler's
 * locks of a parking green thread, as under any wait queue's lock.
 */
#include "sync/sync.h"

#define LOT_BUCKETS 512 /* a power of two */

struct lot_bucket {
    uint32_t lock;
    fern_waitq q;
} __attribute__((aligned(64)));

static struct lot_bucket LOT[LOT_BUCKETS];
/* Exported under fern-hook's name (io/hookapi.h): its plain-thread unlock
 * reads it without a call. */
__attribute__((visibility("default"))) uint32_t fern__lot_nwait;
#define lot_nwait fern__lot_nwait

/* The bucket lock, with its hand-over announced to ThreadSanitizer too
 * (TSAN_RELEASE, wait.h: a wait may come through one of TSan's blocking
 * interceptors, where it ignores atomics). */
static inline void lot_lock(struct lot_bucket *b)
{
    spin_lock(&b->lock);
    TSAN_ACQUIRE(&b->lock);
}
static inline void lot_unlock(struct lot_bucket *b)
{
    TSAN_RELEASE(&b->lock);
    spin_unlock(&b->lock);
}
#ifdef FERN_TSAN
static void lot_unlock_fn(void *b) { lot_unlock(b); }
#endif

static struct lot_bucket *bucket_of(const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    /* Objects are at least 4-byte aligned and often a cache line apart:
     * mix the bits above the low two. */
    a ^= a >> 17;
    a *= 0x9e3779b97f4a7c15ull;
    return &LOT[(a >> 40) & (LOT_BUCKETS - 1)];
}

int lot_park(const void *addr, int (*valid)(const void *, void *), void *arg, const char *what,
             int64_t deadline)
{
    struct lot_bucket *b = bucket_of(addr);
    struct waiter wt;
    waiter_init(&wt);
    wt.data = (void *)addr;
    wt.token = arg; /* what lot_unpark_filter's chooser sees of this party */
    __atomic_fetch_add(&lot_nwait, 1, __ATOMIC_SEQ_CST);
    full_fence();
    lot_lock(b);
    int ret;
    if (!valid(addr, arg)) {
        lot_unlock(b);
        ret = LOT_INVALID;
    } else if (deadline != FERN_FOREVER && fern_now_ns() >= deadline) {
        lot_unlock(b);
        ret = LOT_TIMEDOUT;
    } else {
        waitq_push(&b->q, &wt);
        wait_note(what, addr);
#ifdef FERN_TSAN
        int st = parker_wait(wt.p, lot_unlock_fn, b, deadline);
#else
        int st = waiter_wait(&wt, &b->lock, deadline);
#endif
        wait_note(NULL, NULL);
        if (st == W_TIMEDOUT) {
            /* Still linked: only its own thread unlinks a waiter it was
             * not woken from (the destroy rule, wait.c). */
            lot_lock(b);
            waitq_unlink(&wt);
            lot_unlock(b);
            ret = LOT_TIMEDOUT;
        } else {
            ret = LOT_WOKEN;
        }
    }
    __atomic_fetch_sub(&lot_nwait, 1, __ATOMIC_RELEASE);
    return ret;
}

int lot_unpark(const void *addr, int n)
{
    full_fence();
    if (!__atomic_load_n(&lot_nwait, __ATOMIC_RELAXED))
        return 0;
    struct lot_bucket *b = bucket_of(addr);
    struct waiter *chain = NULL, **tail = &chain;
    int k = 0;
    lot_lock(b);
    for (struct waiter *wt = b->q.head, *next; wt && k < n; wt = next) {
        next = wt->next;
        if (wt->data != addr || !waiter_claim(wt))
            continue;
        waitq_unlink(wt);
        *tail = wt;
        tail = &wt->next;
        k++;
    }
    lot_unlock(b);
    /* Released after the unlock: a woken party may free the object (and
     * its own waiter, on its stack) at once. */
    waiters_release(chain, 0);
    return k;
}

int lot_unpark_filter(const void *addr, int (*fn)(void *, int, void *), void *arg)
{
    struct lot_bucket *b = bucket_of(addr);
    struct waiter *chain = NULL, **tail = &chain;
    int k = 0;
    lot_lock(b);
    for (struct waiter *wt = b->q.head; wt; wt = wt->next)
        if (wt->data == addr)
            fn(arg, LOT_SEE, wt->token);
    do {
        for (struct waiter *wt = b->q.head, *next; wt; wt = next) {
            next = wt->next;
            if (wt->data != addr || !fn(arg, LOT_PICK, wt->token) || !waiter_claim(wt))
                continue;
            fn(arg, LOT_TAKEN, wt->token);
            waitq_unlink(wt);
            *tail = wt;
            tail = &wt->next;
            k++;
        }
    } while (fn(arg, LOT_DONE, NULL));
    lot_unlock(b);
    waiters_release(chain, 0);
    return k;
}

int lot_queued(const void *addr)
{
    struct lot_bucket *b = bucket_of(addr);
    int k = 0;
    lot_lock(b);
    for (struct waiter *wt = b->q.head; wt; wt = wt->next)
        k += wt->data == addr;
    lot_unlock(b);
    return k;
}
