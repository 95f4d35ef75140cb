/* SPDX-License-Identifier: MIT */
/*
 * The M:N scheduler: clusters of workers, run queues, switching, idling.
 *
 * Where a runnable thread can be:
 *   - w->soon     threads whose timer this worker fired (its own heap, or
 *                 another worker's: timers_help), or that a descriptor
 *                 event it dispatched woke (a poll's batch, in order):
 *                 taken before `next` and the ring, so a sleeper or a
 *                 reader does not wait behind the queue
 *                 (issue 30; Go runs such a goroutine next, `runnext`). At
 *                 most SOON_STREAK_MAX in a row while it stays non-empty,
 *                 then one pick goes to `next` or the ring, so neither
 *                 starves; there is no time slice to inherit, as each
 *                 pick's streak is bounded instead. A FIFO under its spin
 *                 lock: thieves (soon_steal) and the monitor's rescue take
 *                 from it too. Not `next` for a poll's batch: each event
 *                 would push the previous thread (and one a primitive
 *                 handed off there) to the ring's tail.
 *   - w->next     the hand-off slot of the worker that woke it: a thread
 *                 woken by the running one runs next, so a ping-pong stays
 *                 on one core. NEXT_STREAK_MAX consecutive hand-offs at
 *                 most, then the local queue gets its turn. Taken by
 *                 exchange; a spinning idle worker steals it (CAS) only when
 *                 its worker has not switched for NEXT_STUCK_NS, i.e. is
 *                 busy with a long-running thread. Not for a joiner woken
 *                 by the exit of the thread it joins (sched_ready_tail): in
 *                 a fork-join it would run next only to find the following
 *                 child not yet run and park again, once per child; it
 *                 goes to the ring's tail, behind the children.
 *   - w->rq       the local ring (RUNQ_SIZE: a burst of a few thousand
 *                 spawns stays local and in order). The owner pushes at
 *                 the tail (plain store + release); the owner pops and
 *                 thieves steal half from the head with a CAS (threads that never
 *                 ran: fewer, while the thief's recent steals were of tiny
 *                 threads; see STEAL_SHORT_NS). Overflow spills half to the
 *                 cluster inbox.
 *                 A one-worker cluster's owner pops with plain stores, and
 *                 queues a yielder before its switch, while the monitor has
 *                 not marked the ring shared (ring_enter: the monitor's
 *                 rescue and a spare worker take from it too).
 *   - c->inbox    multi-producer FIFO for wake-ups from plain threads, other
 *                 clusters, migrations and spills. Checked when the local
 *                 queue is empty (then, unless the taker holds a lock, a
 *                 share of it moves to the ring: inbox_take) and every 61
 *                 ticks, so it cannot starve. A sleeper whose timer the
 *                 monitor fired goes to its front (inbox_push_wake).
 *
 * Switching: a thread that stops running (yield, park, exit, migrate) picks
 * its successor itself and switches straight to it; only when nothing is
 * runnable locally does it switch to the worker's idle context g0, which
 * steals, fires timers and sleeps. What must happen after the old context is
 * saved (requeue it, release a queue lock, free its stack) is left in
 * w->after and run by the new context (run_after) as its first act.
 *
 * No lost wake-ups (DESIGN invariant 3). A worker about to sleep lists itself
 * idle (nidle++ under idle_lock), issues a full fence, then re-checks the
 * inbox and every other worker's ring; only if all are empty does it
 * futex-wait on its sleep_word. A producer that makes work visible to other
 * workers (inbox push, or a ring push that should run in parallel) issues a
 * full fence after publishing, then reads nidle; if it is non-zero it pops an
 * idle worker, clears its sleep_word and futex-wakes it. With both fences,
 * either the producer sees nidle > 0 (and wakes a worker, which re-checks
 * everything) or the sleeper's re-check sees the work (store-buffer litmus:
 * two seq_cst fences forbid both reads missing). The futex compares the word
 * before sleeping, so a wake between the re-check and the wait is not lost.
 * Work on the running worker's own ring needs no wake for correctness: that
 * worker is awake and will run it (spawns still wake an idle worker, to run
 * in parallel). A hand-off into the running worker's `next` slot wakes an
 * idle worker unless one is already spinning: if the running thread keeps
 * the CPU, the spinner steals the hand-off once it has waited NEXT_STUCK_NS.
 * A worker that lists itself idle while some `next` slot is occupied sleeps
 * at most 1 ms, so a hand-off made just before it listed itself is looked at
 * again.
 *
 * The poller is never left without an owner (issue 30). While a thread
 * waits on a descriptor (io_active), one idle worker of the process, the
 * poll owner, sleeps in epoll_wait; every other idle worker sleeps on its
 * futex with no deadline (poller.c). So the invariant: while io_active(),
 * either some worker owns the poller, or some worker is awake and will pass
 * through its idle path (where it polls, and takes the role if it finds
 * nothing) or its 64-tick poll; a worker that sleeps on its futex counts
 * for nothing. The owner releases the role each time it leaves epoll_wait
 * and takes it again when it next sleeps, which holds the invariant as long
 * as it comes back: so every way of leaving for good hands the role over.
 *   - A spare that ends (SPARE_LINGER_NS idle) may have been the owner, the
 *     other workers asleep on their futexes behind it: it wakes one idle
 *     worker of its cluster (worker_leave), which takes the role. If none
 *     of them is idle, they are awake, or stuck: see the last case.
 *   - The workers of a destroyed cluster (cluster_stop): once they are
 *     joined, an idle worker of another cluster is woken (poll_rehome).
 *   - The owner leaves epoll_wait to run a thread that then blocks in the
 *     kernel, or every awake worker does: the monitor (monitor.c:
 *     watch_poller), awake while a worker is busy, wakes an idle worker, or
 *     polls itself, once the role has been vacant for POLL_ORPHAN_NS.
 * Each hand-over reads io_active and poll_owner after a full fence, after
 * its own release of the role; a worker that failed to take the role
 * listed itself idle (nidle, under idle_lock) before its CAS saw the role
 * held, so a hand-over that finds the role free sees it listed.
 *
 * Timers are fired by their owning worker at ticks and in the idle path; an
 * idle worker sleeps until its earliest deadline.
 *
 * Preempted threads (preempt.c) are not put on the ring, where thieves would
 * take them, but on the worker's pinned list: a thread interrupted at an
 * arbitrary instruction resumes on the kernel thread it left. The owner
 * takes from that list when its ring is empty and every 61 ticks.
 *
 * Compensation (monitor.c): a cluster's worker array has room for
 * SPARES_MAX extra workers beyond the ones asked for. The monitor starts
 * one when a stuck worker's queue cannot be served by the others; a spare
 * that finds nothing to do for SPARE_LINGER_NS hands its timers to worker 0
 * and ends. Slots are never removed (others iterate over them without
 * locks): an ended spare's slot stays, empty, and a later start reuses it.
 * c->nworkers only grows, published with release after the slot is filled.
 *
 * Memory ordering (each atomic here; reviewed for weakly ordered CPUs such as
 * aarch64, where x86's store order no longer hides a missing acquire or
 * release: see docs/platforms.md):
 *   rq_tail   release store by the owner after writing the slot; acquire
 *             loads by thieves and runq_empty, so a slot read after seeing
 *             the tail holds the thread written before it.
 *   rq_head   acq_rel CAS by owner and thieves. A thief reads the slots
 *             (relaxed) before its CAS, whose release half keeps those reads
 *             before the new head; the owner loads head with acquire before
 *             reusing a slot, so it never overwrites one still being read.
 *   rq[]      relaxed: published by rq_tail, retired by rq_head.
 *   ring_busy, ring_shared  (one-worker rings) the asymmetric handshake of
 *             ring_enter: ring_busy = 1 relaxed, a compiler barrier, an
 *             acquire load of ring_shared, membarrier on the monitor's side
 *             in place of the owner's StoreLoad fence; ring_busy = 0 is a
 *             release store and the monitor's wait an acquire load, so the
 *             section's plain pops (and the saved context of a yielder it
 *             queued) are visible before the monitor's CAS. ring_shared = 0
 *             is a release store after the last spare's exit was seen.
 *   next      exchange (acq_rel, seq_cst in sched_ready) by the owner, CAS
 *             after an acquire load by a stealing spinner: the thread's
 *             state, written before the hand-off, is seen by its taker.
 *   nidle, sleep_word, in_epoll (and the inbox and rings they guard): the
 *             store-buffer pattern above, a full_fence on each side
 *             (dmb ish on aarch64, arch.h). sleep_word is also stored with
 *             release before its futex wake. The loads of nidle and
 *             nspinning right after sched_ready's exchange are seq_cst: a
 *             relaxed load may be satisfied before an exclusive
 *             store-release is visible on aarch64, and the hand-off would
 *             wait for the 1 ms re-look (on x86 both compile to plain movs).
 *   nspinning relaxed increment (a hint for wakers), seq_cst decrement
 *             before the spinner's last look, ordered with hand-offs.
 *   n of a tqueue (pinned) or the inbox: relaxed, a hint read outside
 *             the queue's lock; the list or array itself is only touched
 *             under that (acquire/release) spin lock.
 *   soon      (a tqueue) under its lock; n is a relaxed hint read outside
 *             it. wake_from: the owner's only. timers.due: stored relaxed
 *             under the heap's lock, read relaxed by timers_help, which
 *             takes the lock before it fires anything.
 *   stopping, rt.running: release store, acquire loads: whoever sees the
 *             flag also sees what was set up or torn down before it.
 *   wakers    relaxed increment (the caller still holds the cluster), release
 *             decrement once the wake is done; cluster_stop's acquire load
 *             of 0 comes after every waker's last touch of the cluster.
 *   counters  (n_switches, n_steals, n_sleeps, n_migrations, live_delta,
 *             live_ext, spawned_ext; COUNT) relaxed: written by one worker,
 *             added atomically, or (live_ext) only under the inbox's lock;
 *             read by fern_stats, fern_dump and spinners as hints that
 *             tolerate stale values.
 *   run_state, stack (for fern_dump): relaxed, diagnostics only.
 */
#include "internal.h"
#include "probes.h"

#include <sched.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#ifdef FERN_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef FERN_TSAN
#include <sanitizer/tsan_interface.h>
#endif
#ifdef FERN_VALGRIND
#include <valgrind/valgrind.h>
#endif

struct runtime rt = {.boot_lock = PTHREAD_MUTEX_INITIALIZER};

/* The worker running the calling kernel thread; read by worker_self() in
 * internal.h, which explains why it is read through an asm statement. */
__thread struct worker *fern_tls_worker_ __attribute__((tls_model("initial-exec"), used));

int64_t fern_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The C++ runtime keeps the stack of caught exceptions (what `throw;` and
 * std::current_exception see) per kernel thread. A green thread that blocks
 * inside a catch handler would otherwise find another green thread's
 * exception there when it resumes, so each switch swaps those two words in
 * and out of the thread descriptors. Weak: C programs have no C++ runtime. */
extern uintptr_t *__cxa_get_globals(void) __attribute__((weak));

/* A plain thread's identity for mutex ownership (see self_token). */
__thread char fern_plain_token_ __attribute__((tls_model("initial-exec")));

/* errno lives at a per-kernel-thread address that glibc declares `const`, so
 * the compiler may reuse it across a switch: save and restore it in
 * functions of their own. */
__attribute__((noinline)) int errno_get(void)
{
    __asm__ volatile("" ::: "memory");
    return errno;
}
__attribute__((noinline)) void errno_set(int e)
{
    __asm__ volatile("" ::: "memory");
    errno = e;
}

/* ------------------------------------------------------------------------ */
/* Run queues                                                                */
/* ------------------------------------------------------------------------ */

/* Append t to the list *head..*tail linked through t->link. */
static inline void tlist_append(fern_thread **head, fern_thread **tail, fern_thread *t)
{
    t->link = NULL;
    if (*tail)
        (*tail)->link = t;
    else
        *head = t;
    *tail = t;
}

static void tqueue_push(struct tqueue *q, fern_thread *t)
{
    STORE_RELAXED(&t->run_state, T_RUNNABLE);
    spin_lock(&q->lock);
    tlist_append(&q->head, &q->tail, t);
    STORE_RELAXED(&q->n, q->n + 1);
    spin_unlock(&q->lock);
}

static void tqueue_push_front(struct tqueue *q, fern_thread *t)
{
    STORE_RELAXED(&t->run_state, T_RUNNABLE);
    spin_lock(&q->lock);
    t->link = q->head;
    q->head = t;
    if (!q->tail)
        q->tail = t;
    STORE_RELAXED(&q->n, q->n + 1);
    spin_unlock(&q->lock);
}

static fern_thread *tqueue_pop(struct tqueue *q)
{
    if (tqueue_len(q) == 0)
        return NULL;
    spin_lock(&q->lock);
    fern_thread *t = q->head;
    if (t) {
        q->head = t->link;
        if (!q->head)
            q->tail = NULL;
        STORE_RELAXED(&q->n, q->n - 1);
    }
    spin_unlock(&q->lock);
    return t;
}

/* Empty q; returns its list (NULL if empty), *tail and *n set. */
static fern_thread *tqueue_take(struct tqueue *q, fern_thread **tail, uint32_t *n)
{
    spin_lock(&q->lock);
    fern_thread *head = q->head;
    *tail = q->tail;
    *n = q->n;
    q->head = q->tail = NULL;
    STORE_RELAXED(&q->n, 0);
    spin_unlock(&q->lock);
    return head;
}

/* ---- the cluster inbox (struct inbox, internal.h) ---- */
#define INBOX_CAP0 256u
/* An array larger than this (32 KiB) is freed when it empties: a burst of
 * a million wake-ups leaves no 8 MiB array behind. */
#define INBOX_KEEP 4096u

/* Room for m more threads in q's array (lock held), allocating it (there is
 * none before the first push, nor after a large one drained) or doubling it
 * as needed; false if it cannot grow. malloc under the spin lock: producers
 * wait for it once per doubling, and no code that holds malloc's lock takes
 * this one (preemption never stops a thread inside libc: preempt.c). */
static bool inbox_room(struct inbox *q, uint32_t m)
{
    if (q->cap - q->cnt >= m)
        return true;
    uint64_t cap = q->cap ? q->cap : INBOX_CAP0;
    while (cap - q->cnt < m)
        cap *= 2;
    fern_thread **slot = cap <= (uint64_t)1 << 31 ? malloc(cap * sizeof *slot) : NULL;
    if (!slot)
        return false;
    for (uint32_t i = 0; i < q->cnt; i++)
        slot[i] = q->slot[(q->head + i) & (q->cap - 1)];
    free(q->slot); /* may be NULL (above) */
    q->slot = slot;
    q->cap = (uint32_t)cap;
    q->head = 0;
    return true;
}

/* Append t to q (lock held): to the array, or behind the overflow list if
 * that is in use or the array cannot grow. */
static void inbox_add(struct inbox *q, fern_thread *t)
{
    if (!q->lhead && inbox_room(q, 1)) {
        q->slot[(q->head + q->cnt) & (q->cap - 1)] = t;
        q->cnt++;
    } else {
        tlist_append(&q->lhead, &q->ltail, t);
    }
    STORE_RELAXED(&q->n, q->n + 1);
}

/* Put the list head..tail of m threads at the front of q, in order. */
static void inbox_push_front(struct inbox *q, fern_thread *head, fern_thread *tail, uint32_t m)
{
    spin_lock(&q->lock);
    if (inbox_room(q, m)) {
        q->head = (q->head - m) & (q->cap - 1);
        fern_thread *x = head;
        for (uint32_t i = 0; i < m; i++, x = x->link)
            q->slot[(q->head + i) & (q->cap - 1)] = x;
        q->cnt += m;
    } else {
        /* No memory: the array's threads join the list, behind these. */
        fern_thread *x = tail;
        for (uint32_t i = 0; i < q->cnt; i++) {
            fern_thread *y = q->slot[(q->head + i) & (q->cap - 1)];
            x->link = y;
            x = y;
        }
        x->link = q->lhead;
        if (!q->lhead)
            q->ltail = x;
        q->lhead = head;
        q->cnt = 0;
    }
    STORE_RELAXED(&q->n, q->n + m);
    spin_unlock(&q->lock);
}

static fern_thread *inbox_pop_locked(struct inbox *q)
{
    fern_thread *t;
    if (q->cnt) {
        t = q->slot[q->head];
        q->head = (q->head + 1) & (q->cap - 1);
        q->cnt--;
    } else if ((t = q->lhead) != NULL) {
        q->lhead = t->link;
        if (!q->lhead)
            q->ltail = NULL;
    } else {
        return NULL;
    }
    STORE_RELAXED(&q->n, q->n - 1);
    return t;
}

/* Unlock q after taking from it; if that emptied an array larger than
 * INBOX_KEEP, free it (outside the lock): the next push allocates a small
 * one. */
static void inbox_unlock_taken(struct inbox *q)
{
    fern_thread **old = NULL;
    if (!q->cnt && q->cap > INBOX_KEEP) {
        old = q->slot;
        q->slot = NULL;
        q->cap = 0;
        q->head = 0;
    }
    spin_unlock(&q->lock);
    free(old);
}

static fern_thread *inbox_pop(struct inbox *q)
{
    if (inbox_len(q) == 0)
        return NULL;
    spin_lock(&q->lock);
    fern_thread *t = inbox_pop_locked(q);
    inbox_unlock_taken(q);
    return t;
}

/* Unlock c's inbox after adding threads to it, with the producer's side of
 * the no-lost-wake-up protocol (a full fence, then nidle) inside the lock
 * hold. If a worker is to be woken, c->wakers is raised before the lock is
 * dropped: until then no thread just added can run, finish and let its
 * cluster be destroyed, and cluster_stop waits for wakers to fall to 0.
 * The common case (nobody idle) costs the fence alone. */
static inline void inbox_unlock_added(struct fern_cluster *c)
{
    full_fence();
    bool wake = LOAD_RELAXED(&c->nidle) != 0;
    if (wake)
        ADD_RELAXED(&c->wakers, 1);
    spin_unlock(&c->inbox.lock);
    if (wake) {
        cluster_wake(c);
        __atomic_fetch_sub(&c->wakers, 1, __ATOMIC_RELEASE);
    }
}

/* Make t runnable on cluster c from outside c's workers and wake one of
 * them if any is idle. `gained`: t has just joined c (a migration): c's
 * live count goes up in the same lock hold, before t can run there, on the
 * line the lock has brought in (a separate atomic add cost a migration
 * a contended line and a second full fence). */
static inline void inbox_push(struct fern_cluster *c, fern_thread *t, bool gained)
{
    STORE_RELAXED(&t->run_state, T_RUNNABLE);
    spin_lock(&c->inbox.lock);
    if (gained) /* every change of live_ext is here, under the lock */
        STORE_RELAXED(&c->live_ext, c->live_ext + 1);
    inbox_add(&c->inbox, t);
    inbox_unlock_added(c);
}

__thread bool fern_tls_firing_ __attribute__((tls_model("initial-exec")));

/* Out of line: inlined into sched_ready, it made every hand-off on a
 * worker save and restore more registers (6 instructions a wake-up).
 * A sleeper whose timer the monitor fired (the owner had not switched for
 * a tick: fern_tls_firing_) goes to the inbox's front, not behind what a
 * rescue moved there: the monitor holds rt.boot_lock, so c stays while
 * cluster_wake runs after the push. */
__attribute__((noinline)) void inbox_push_wake(struct fern_cluster *c, fern_thread *t)
{
    if (unlikely(fern_tls_firing_)) {
        STORE_RELAXED(&t->run_state, T_RUNNABLE);
        inbox_push_front(&c->inbox, t, t, 1);
        cluster_wake(c);
        return;
    }
    inbox_push(c, t, false);
}

/* Move half of a full ring plus t to the inbox, so a burst of spawns does not
 * stay on one worker. */
static void runq_spill(struct worker *w, fern_thread *t, uint32_t head)
{
    uint32_t n = RUNQ_SIZE / 2;
    if (!CAS(&w->rq_head, &head, head + n)) {
        /* A thief took some meanwhile: the ring has room now. */
        uint32_t tail = w->rq_tail;
        STORE_RELAXED(&w->rq[tail % RUNQ_SIZE], t);
        STORE(&w->rq_tail, tail + 1);
        return;
    }
    /* The n slots behind the old head are ours now: thieves read only
     * between head and tail, and the owner reuses a slot only through its
     * own tail, which is still n slots short of them. */
    struct fern_cluster *c = w->cluster;
    spin_lock(&c->inbox.lock);
    for (uint32_t i = 0; i < n; i++)
        inbox_add(&c->inbox, LOAD_RELAXED(&w->rq[(head + i) % RUNQ_SIZE]));
    inbox_add(&c->inbox, t);
    inbox_unlock_added(c);
}

static inline void runq_put(struct worker *w, fern_thread *t)
{
    STORE_RELAXED(&t->run_state, T_RUNNABLE);
    for (;;) {
        uint32_t head = LOAD(&w->rq_head);
        uint32_t tail = w->rq_tail;
        if (likely(tail - head < RUNQ_SIZE)) {
            STORE_RELAXED(&w->rq[tail % RUNQ_SIZE], t);
            STORE(&w->rq_tail, tail + 1);
            return;
        }
        runq_spill(w, t, head);
        return;
    }
}

/* A one-worker cluster's ring has one taker, its owner, except while the
 * monitor rescues it or a spare runs beside it (ring_shared). The owner
 * then needs no locked CAS to take from it, provided it knows that nobody
 * else is taking: an asymmetric Dekker handshake as in bias.c. The owner
 * stores ring_busy = 1, then (a compiler barrier only) loads ring_shared;
 * if clear, it may take with plain stores until it clears ring_busy. The
 * monitor (ring_share) stores ring_shared = 1, runs membarrier_all() and
 * waits for ring_busy == 0: either the owner's load came after that
 * barrier and saw the flag, or its ring_busy = 1 came before it and the
 * monitor waits for the section to end. A section holds no lock and waits
 * for nothing. */
static inline bool ring_enter(struct worker *w)
{
    STORE_RELAXED(&w->ring_busy, 1);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (likely(!LOAD(&w->ring_shared)))
        return true;
    STORE_RELAXED(&w->ring_busy, 0);
    return false;
}

static inline void ring_leave(struct worker *w) { STORE(&w->ring_busy, 0); }

/* Monitor only (rt.boot_lock held, no spin lock): from now on w's owner
 * takes from its ring with a CAS. */
static void ring_share(struct worker *w)
{
    if (LOAD_RELAXED(&w->ring_shared))
        return;
    STORE_RELAXED(&w->ring_shared, 1);
    membarrier_all();
    unsigned spins = 0;
    while (LOAD(&w->ring_busy))
        spin_backoff(&spins);
}

/* A thread queued behind a few others may be cold: it migrated in, was
 * woken from another core, or last ran thousands of switches ago. Its
 * descriptor and the top of its saved stack (the switch frame and the few
 * frames above it, 256 bytes) are what resuming it reads first; on this
 * project's 2-vCPU test VM a line written by the other core takes ~200 ns
 * to arrive. So a pop from the ring prefetches, PREFETCH_STACK threads
 * ahead, the saved stack (its descriptor was prefetched earlier) and,
 * PREFETCH_DESC ahead, the descriptor: the misses overlap with the threads
 * run meanwhile instead of stalling each resume. Slots between head and
 * tail hold threads (a thief may be taking them: a prefetch of a stale
 * address is harmless, and descriptors are never unmapped).
 *
 * Each stack is a page of its own, and a prefetch that misses the TLB
 * holds up retirement until its page walk ends (two-dimensional on a VM):
 * one prefetch per pop took 80% of the samples of a migration's window
 * (bench/fern_migrate, 10,000 threads). So every PREFETCH_BURST pops the
 * first lines of the next PREFETCH_BURST stacks beyond are prefetched back
 * to back, their walks overlapping; the per-pop prefetch then finds its
 * page translated. Migrations, medians of 20-round runs: one worker per
 * cluster 9.8-13.4 -> 14.5-15.2 M/s, two 10.0-11.0 -> 12.0-12.3. */
#define PREFETCH_STACK 3u
#define PREFETCH_BURST 4u
#define PREFETCH_DESC 8u
static inline void runq_prefetch(struct worker *w, uint32_t head, uint32_t tail)
{
    /* PREFETCH_STACK < tail - head <= RUNQ_SIZE (more is a torn read of a
     * thief's view), in one unsigned comparison. */
    uint32_t left = tail - head;
    if (left - (PREFETCH_STACK + 1) >= RUNQ_SIZE - PREFETCH_STACK)
        return;
    fern_thread *a = LOAD_RELAXED(&w->rq[(head + PREFETCH_STACK) % RUNQ_SIZE]);
    char *sp = LOAD_RELAXED(&a->sp);
    /* A thread that never ran has no saved stack; its descriptor was just
     * written by its spawner, most likely on this core: a ring of new
     * threads (a fork-join) is left alone. */
    if (!sp)
        return;
    if (head % PREFETCH_BURST == 0)
        for (uint32_t i = PREFETCH_STACK + 1; i <= PREFETCH_STACK + PREFETCH_BURST && i < left; i++) {
            char *bsp = LOAD_RELAXED(&LOAD_RELAXED(&w->rq[(head + i) % RUNQ_SIZE])->sp);
            if (bsp)
                prefetch_w(bsp);
        }
    prefetch_w(sp);
    prefetch_w(sp + 64);
    prefetch_w(sp + 128);
    prefetch_w(sp + 192);
    if (left > PREFETCH_DESC)
        prefetch_w(LOAD_RELAXED(&w->rq[(head + PREFETCH_DESC) % RUNQ_SIZE]));
}

/* `owned`: the caller is inside a ring section (ring_enter returned true).
 * `prefetch`: look ahead in the ring (runq_prefetch). */
static inline fern_thread *runq_get(struct worker *w, bool owned, bool prefetch)
{
    if (w->alone) {
        /* In the caller's section (a yield), or in one of its own. */
        bool own = !owned;
        if (owned || ring_enter(w)) {
            uint32_t head = LOAD_RELAXED(&w->rq_head);
            fern_thread *t = NULL;
            if (head != w->rq_tail) {
                t = LOAD_RELAXED(&w->rq[head % RUNQ_SIZE]);
                STORE_RELAXED(&w->rq_head, head + 1);
                if (prefetch)
                    runq_prefetch(w, head, w->rq_tail);
            }
            if (own)
                ring_leave(w);
            return t;
        }
    }
    for (;;) {
        uint32_t head = LOAD(&w->rq_head);
        uint32_t tail = w->rq_tail;
        if (head == tail)
            return NULL;
        fern_thread *t = LOAD_RELAXED(&w->rq[head % RUNQ_SIZE]);
        if (CAS(&w->rq_head, &head, head + 1)) {
            if (prefetch)
                runq_prefetch(w, head, tail);
            return t;
        }
    }
}

static inline bool runq_empty(struct worker *w)
{
    return LOAD(&w->rq_head) == LOAD(&w->rq_tail);
}

/* Steal half of victim's ring, at most max threads, into w's (empty) ring;
 * returns one to run and stores how many were taken in *got. */
static fern_thread *runq_steal(struct worker *w, struct worker *v, uint32_t max, uint32_t *got)
{
    for (;;) {
        uint32_t head = LOAD(&v->rq_head);
        uint32_t tail = LOAD(&v->rq_tail);
        uint32_t n = tail - head;
        if (n == 0 || n > RUNQ_SIZE)
            return NULL; /* empty, or a torn read: retry later */
        n -= n / 2;
        if (n > max)
            n = max;
        uint32_t mytail = w->rq_tail;
        for (uint32_t i = 0; i < n; i++)
            STORE_RELAXED(&w->rq[(mytail + i) % RUNQ_SIZE],
                          LOAD_RELAXED(&v->rq[(head + i) % RUNQ_SIZE]));
        if (!CAS(&v->rq_head, &head, head + n))
            continue;
        *got = n;
        n--;
        fern_thread *t = LOAD_RELAXED(&w->rq[(mytail + n) % RUNQ_SIZE]);
        if (n)
            STORE(&w->rq_tail, mytail + n);
        STORE_RELAXED(&w->n_steals, w->n_steals + 1);
        PROBE3(steal, t->id, w->index, v->index);
        return t;
    }
}

/* ------------------------------------------------------------------------ */
/* Idle workers                                                              */
/* ------------------------------------------------------------------------ */

void cluster_wake(struct fern_cluster *c)
{
    full_fence();
    if (LOAD_RELAXED(&c->nidle) == 0)
        return;
    struct worker *pick = NULL;
    unsigned n = LOAD(&c->nworkers);
    spin_lock(&c->idle_lock);
    for (unsigned i = 0; i < n; i++) {
        struct worker *v = c->workers[i];
        if (v->idle_listed) {
            v->idle_listed = 0;
            STORE_RELAXED(&c->nidle, c->nidle - 1);
            STORE(&v->sleep_word, 0);
            pick = v;
            break;
        }
    }
    spin_unlock(&c->idle_lock);
    if (pick) {
        futex_wake(&pick->sleep_word, 1);
        full_fence(); /* sleep_word = 0 before reading in_epoll: see io_sleep */
        if (LOAD(&pick->in_epoll))
            io_wake();
    }
}

static void cluster_wake_all(struct fern_cluster *c)
{
    unsigned n = LOAD(&c->nworkers);
    spin_lock(&c->idle_lock);
    for (unsigned i = 0; i < n; i++) {
        struct worker *v = c->workers[i];
        if (v->idle_listed) {
            v->idle_listed = 0;
            STORE_RELAXED(&c->nidle, c->nidle - 1);
        }
        STORE(&v->sleep_word, 0);
        futex_wake(&v->sleep_word, 1);
    }
    spin_unlock(&c->idle_lock);
    io_wake();
}

static bool cluster_has_work(struct worker *w)
{
    struct fern_cluster *c = w->cluster;
    if (inbox_len(&c->inbox) || LOAD_RELAXED(&c->stopping))
        return true;
    unsigned n = LOAD(&c->nworkers);
    for (unsigned i = 0; i < n; i++)
        if (!runq_empty(c->workers[i]) || tqueue_len(&c->workers[i]->soon))
            return true;
    return false;
}

static bool any_next(struct worker *w);

/* How long a compensation worker stays with nothing to do before it ends. */
#define SPARE_LINGER_NS 50000000

static void worker_kick(struct worker *v);

/* Trimming pooled stacks (stack_trim_some: a mincore per stack, perhaps an
 * madvise) is work, and the moments a busy worker has nothing to run are
 * not free time: with more workers than CPUs, the CPU a worker trims on is
 * one another worker waits for. Threads migrating between two clusters of
 * two workers on two CPUs (bench/fern_migrate, k = 2) went 25% slower when
 * the workers trimmed the stacks of 10,000 threads that had just ended in
 * their brief idle moments. So a worker trims at most one batch per
 * TRIM_GAP_NS until it has slept TRIM_IDLE_NS with nobody waking it and
 * nothing else due (a timer of its own ends such a sleep first); from then
 * on, until it finds work, batch after batch. Memory comes back
 * TRIM_IDLE_NS after a burst, and within 1 s per 3,200 stacks (a batch of
 * 32 every 10 ms) on a worker that is never idle that long. */
#define TRIM_IDLE_NS 5000000
#define TRIM_GAP_NS 10000000

/* Sleep until woken or the earliest deadline (nap: one more, FERN_FOREVER
 * for none). Returns true if a spare w timed out idle and may end: still
 * listed idle (nobody woke it), no timers left, no work in sight after it
 * unlisted itself. *woken: someone picked it (cluster_wake, worker_kick). */
static bool worker_sleep(struct worker *w, int64_t nap, bool *woken_out)
{
    struct fern_cluster *c = w->cluster;
    bool linger_over = false;
    /* see TRIM_IDLE_NS; FERN_FOREVER unless the sleep lasts until then */
    int64_t trim_at = FERN_FOREVER;
    *woken_out = false;
    /* Trimming is done before listing ourselves idle, or every wake-up
     * meanwhile would pick us and pay a futex call for a worker that is
     * not asleep. */
    if (stack_trim_pending(w)) {
        int64_t now = fern_now_ns();
        if (w->trim_idle || now >= w->trim_next) {
            w->trim_next = now + TRIM_GAP_NS;
            if (stack_trim_some(w))
                return false;
        } else {
            trim_at = now + TRIM_IDLE_NS;
        }
    }
    spin_lock(&c->idle_lock);
    w->idle_listed = 1;
    STORE_RELAXED(&w->sleep_word, 1);
    STORE_RELAXED(&c->nidle, c->nidle + 1);
    spin_unlock(&c->idle_lock);
    STORE_RELAXED(&w->mon_idle, 1);
    full_fence();
    if (!cluster_has_work(w)) {
        int64_t deadline = timers_next(w);
        if (w->spare) {
            /* Once no worker of the cluster is stuck, a spare's sleepers go
             * back to worker 0, so the spare can end. */
            if (deadline != FERN_FOREVER && !LOAD_RELAXED(&c->stuck)) {
                timers_move(w, c->workers[0]);
                worker_kick(c->workers[0]);
                deadline = timers_next(w);
            }
            int64_t end = fern_now_ns() + SPARE_LINGER_NS;
            if (end < deadline) {
                deadline = end;
                linger_over = true;
            }
        }
        /* A hand-off waiting behind a busy worker gets a look every 1 ms.
         * (Checked after listing idle + fence: a hand-off made later sees
         * nidle > 0 in sched_ready and wakes us.) */
        if (any_next(w)) {
            int64_t soon = fern_now_ns() + 1000000;
            if (soon < deadline)
                deadline = soon;
        }
        if (nap < deadline) {
            deadline = nap;
            linger_over = false;
        }
        if (trim_at < deadline) {
            deadline = trim_at;
            linger_over = false;
        } else {
            trim_at = FERN_FOREVER;
        }
        STORE_RELAXED(&w->n_sleeps, w->n_sleeps + 1);
        if (!io_sleep(w, deadline))
            futex_wait(&w->sleep_word, 1, deadline);
    } else {
        linger_over = false;
    }
    bool woken;
    spin_lock(&c->idle_lock);
    woken = !w->idle_listed;
    if (w->idle_listed) {
        w->idle_listed = 0;
        STORE_RELAXED(&c->nidle, c->nidle - 1);
    }
    spin_unlock(&c->idle_lock);
    /* Idle TRIM_IDLE_NS: nobody woke us and nothing else (a timer, a
     * look at a pending hand-off) was due before the trim deadline. A
     * sleep that ended late because the kernel ran something else instead
     * does not count. */
    if (!woken && fern_now_ns() >= trim_at)
        w->trim_idle = true;
    *woken_out = woken;
    monitor_worker_busy(w);
    /* A spare ends only if nobody picked it and, after it unlisted itself
     * (the fence in monitor_worker_busy), no work is in sight: a producer
     * that saw it listed woke it, one that did not made its work visible
     * before this check. */
    return linger_over && !woken && LOAD_RELAXED(&w->timers.n) == 0 && !cluster_has_work(w);
}

/* Wake worker v if it sleeps (it recomputes its deadline). */
static void worker_kick(struct worker *v)
{
    struct fern_cluster *c = v->cluster;
    bool listed;
    spin_lock(&c->idle_lock);
    listed = v->idle_listed;
    if (listed) {
        v->idle_listed = 0;
        STORE_RELAXED(&c->nidle, c->nidle - 1);
        STORE(&v->sleep_word, 0);
    }
    spin_unlock(&c->idle_lock);
    if (listed) {
        futex_wake(&v->sleep_word, 1);
        full_fence(); /* as in cluster_wake */
        if (LOAD(&v->in_epoll))
            io_wake();
    }
}

/* ------------------------------------------------------------------------ */
/* Switching                                                                 */
/* ------------------------------------------------------------------------ */

static inline void run_after(struct worker *w)
{
    after_fn fn = w->after;
    if (fn) {
        w->after = NULL;
        fn(w, w->after_prev, w->after_arg);
    }
    /* A yielder queued before its switch (sched_yield_green) is saved now. */
    if (LOAD_RELAXED(&w->ring_busy))
        ring_leave(w);
}

/* A preempted thread goes back first when it made way for a woken one
 * (it keeps the rest of its slice: preempt.c), else last. */
void sched_pin(struct worker *w, fern_thread *t, bool front)
{
    if (front)
        tqueue_push_front(&w->pinned, t);
    else
        tqueue_push(&w->pinned, t);
}

/* Most threads taken from the inbox at once (see inbox_take): their
 * pointers are copied under its lock, 16 lines at most. */
#define INBOX_BATCH 128u
/* Descriptors of a batch's first threads prefetched (runq_prefetch looks
 * after the rest): as far as its first pop's stack burst reaches
 * (PREFETCH_STACK + PREFETCH_BURST), with room. */
#define INBOX_PREFETCH 12u

/* The inbox's next thread for w, whose ring is empty: with it, a share of
 * what waits there moves into the ring, so a worker fed through the inbox
 * (threads migrating in, wake-ups from plain threads or other clusters)
 * takes the inbox's lock once per batch rather than once per thread, and
 * the line holding it stays with the producers. A share: the inbox's
 * length over the cluster's workers (all of it for a one-worker cluster),
 * at most INBOX_BATCH. Only the array's threads are batched (the overflow
 * list, used only when memory ran out, gives one at a time). */
static __attribute__((noinline)) fern_thread *inbox_take(struct worker *w)
{
    struct fern_cluster *c = w->cluster;
    struct inbox *q = &c->inbox;
    if (inbox_len(q) == 0)
        return NULL;
    uint32_t nw = LOAD_RELAXED(&c->nworkers);
    spin_lock(&q->lock);
    uint32_t n = q->n;
    fern_thread *t = inbox_pop_locked(q);
    uint32_t more = (nw > 1 ? n / nw + 1 : n) - 1;
    if (more > INBOX_BATCH - 1)
        more = INBOX_BATCH - 1;
    if (more > q->cnt)
        more = q->cnt;
    /* The ring was empty when pick_next looked and only its owner adds to
     * it, so they fit. */
    uint32_t tail = w->rq_tail;
    for (uint32_t i = 0; i < more; i++)
        STORE_RELAXED(&w->rq[(tail + i) % RUNQ_SIZE], q->slot[(q->head + i) & (q->cap - 1)]);
    q->head = (q->head + more) & (q->cap - 1);
    q->cnt -= more;
    STORE_RELAXED(&q->n, q->n - more);
    inbox_unlock_taken(q);
    if (!more)
        return t;
    STORE(&w->rq_tail, tail + more);
    for (uint32_t i = 0; i < more && i < INBOX_PREFETCH; i++)
        prefetch_w(LOAD_RELAXED(&w->rq[(tail + i) % RUNQ_SIZE]));
    /* The threads moved from the inbox to the ring, which a worker going
     * to sleep may have looked at before they arrived: the producer's side
     * of the no-lost-wake-up protocol for them, once per batch. */
    if (nw > 1)
        cluster_wake(c);
    return t;
}

/* Make w's next pick_next look at its `soon` list: that look is part of
 * the every-61-ticks block, so the switch paths pay nothing for it while
 * the list is empty; a push moves the tick to just before the block. */
static inline void soon_rearm(struct worker *w)
{
    w->tick += 60 - w->tick % 61;
}

/* Fire the due timers of one other worker of w's cluster, a different one
 * each call: its owner may be idle but waiting for a CPU (a loaded
 * machine), or busy between its own 61-tick looks, while w runs. The
 * sleepers go to w's `soon` list (timers_run). Called every 61 ticks and
 * from the idle loop: a relaxed load of the other heap's earliest deadline,
 * compared with `now`, the caller's clock reading (0: not read, as w has
 * no timer; then read here only if the other heap has one). */
static __attribute__((noinline)) void timers_help(struct worker *w, int64_t now)
{
    struct fern_cluster *c = w->cluster;
    unsigned nw = LOAD(&c->nworkers);
    if (nw < 2)
        return;
    struct worker *v = c->workers[(w->index + 1 + w->help_next++ % (nw - 1)) % nw];
    int64_t due = LOAD_RELAXED(&v->timers.due);
    if (due && due <= (now ? now : (now = fern_now_ns())))
        timers_run(v, now);
}

/* pick_next's every-61-ticks look at the timers: w's own heap, and one
 * other's (timers_help). At most one clock read, for both heaps, and none
 * while neither has a timer; a heap's lock only when its earliest deadline
 * is due. With `soon` non-empty every pick comes here (soon_rearm). Out of
 * line: inlined, it made the switch paths' code larger (about 4 instructions
 * per ping-pong round trip, callgrind). */
static __attribute__((noinline)) void timers_tick(struct worker *w)
{
    int64_t now = 0, due = LOAD_RELAXED(&w->timers.due);
    if (due && due <= (now = fern_now_ns()))
        timers_run(w, now);
    if (!w->alone)
        timers_help(w, now);
}

/* Pick the next thread to run without blocking; NULL if none. Inlined into
 * the switch paths: it is on every park and yield. `owned` as in runq_get.
 * `batch`: the caller holds no lock, so an empty ring may be refilled from
 * the inbox (inbox_take: a copy of up to INBOX_BATCH pointers, perhaps a
 * free and a futex wake). A thread parking on a wait queue still holds the
 * queue's spin lock (released by its after-switch function): it takes one
 * thread from the inbox, as before. `prefetch` as in runq_get: not on
 * the exit path, where the ring is most often a fork-join's new threads,
 * written on this core (12 instructions per spawn+join for nothing). */
static inline __attribute__((always_inline)) fern_thread *pick_next(struct worker *w, bool owned,
                                                                     bool batch, bool prefetch)
{
    fern_thread *t;
    uint32_t tick = ++w->tick;
    if (unlikely(tick % 61 == 0)) {
        timers_tick(w);
        if (tqueue_len(&w->soon)) {
            if (w->soon_streak < SOON_STREAK_MAX && (t = tqueue_pop(&w->soon)) != NULL) {
                /* A burst ends when `soon` empties: the next one gets its
                 * own SOON_STREAK_MAX. */
                if (tqueue_len(&w->soon)) {
                    w->soon_streak++;
                    soon_rearm(w);
                } else {
                    w->soon_streak = 0;
                }
                return t;
            }
            /* This pick is the hand-off slot's or the ring's; the next one
             * is `soon`'s again. */
            w->soon_streak = 0;
            soon_rearm(w);
        }
        if ((t = tqueue_pop(&w->pinned)) != NULL)
            return t;
        if ((t = inbox_pop(&w->cluster->inbox)) != NULL)
            return t;
    }
    if ((t = LOAD_RELAXED(&w->next)) != NULL && w->next_streak < NEXT_STREAK_MAX) {
        if (w->alone) /* no thief can take it meanwhile */
            STORE_RELAXED(&w->next, NULL);
        else
            t = __atomic_exchange_n(&w->next, NULL, __ATOMIC_ACQ_REL);
        if (t) {
            w->next_streak++;
            return t;
        }
    }
    w->next_streak = 0;
    if ((t = runq_get(w, owned, prefetch)) != NULL)
        return t;
    if ((t = tqueue_pop(&w->pinned)) != NULL)
        return t;
    if ((t = tqueue_pop(&w->soon)) != NULL) { /* its streak was over */
        if (!tqueue_len(&w->soon))
            w->soon_streak = 0;
        return t;
    }
    if (LOAD_RELAXED(&w->next) && (t = __atomic_exchange_n(&w->next, NULL, __ATOMIC_ACQ_REL)))
        return t;
    return batch ? inbox_take(w) : inbox_pop(&w->cluster->inbox);
}

/* Switch from cur to next on w. Returns on cur's context when it is resumed,
 * possibly on another worker. `dying` marks a context that never resumes. */
/* A thread leaving the CPU: on a canary-guarded stack, check the canaries
 * and that its stack pointer (this frame's) is still inside the stack. */
static inline void canary_check(fern_thread *t, struct stack *s)
{
    if (s && unlikely(s->guard == FERN_GUARD_CANARY) &&
        !stack_canary_intact(s, __builtin_frame_address(0)))
        overflow_report(t, s->lo);
}

/* Make next w's running thread: its C++ exception state, state, counters,
 * and (TSan) its fiber. The caller has saved what the old thread keeps. */
static inline void enter_thread(struct worker *w, fern_thread *next)
{
    if (w->eh) {
        w->eh[0] = next->eh[0];
        w->eh[1] = next->eh[1];
    }
    STORE_RELAXED(&w->cur, next); /* read by the monitor */
    STORE_RELAXED(&next->run_state, T_RUNNING);
    STORE_RELAXED(&w->n_switches, w->n_switches + 1);
#ifdef FERN_TSAN
    __tsan_switch_to_fiber(next->tsan_fiber, 0);
#endif
}

static void switch_to(struct worker *w, fern_thread *cur, fern_thread *next, bool dying)
{
    canary_check(cur, cur->stack);
    cur->saved_errno = *w->errno_loc;
    if (w->eh) {
        cur->eh[0] = w->eh[0];
        cur->eh[1] = w->eh[1];
    }
    PROBE2(switch, cur->id, next->id);
    enter_thread(w, next);
#ifdef FERN_ASAN
    if (next == &w->g0)
        __sanitizer_start_switch_fiber(dying ? NULL : &cur->asan_fake, w->g0_lo, w->g0_size);
    else
        __sanitizer_start_switch_fiber(dying ? NULL : &cur->asan_fake, next->stack->lo,
                                       next->stack->size);
#endif
    fern_ctx_switch(&cur->sp, next->sp, NULL);
#ifdef FERN_ASAN
    {
        const void *ob;
        size_t os;
        __sanitizer_finish_switch_fiber(cur->asan_fake, &ob, &os);
    }
#endif
    w = worker_self();
    run_after(w);
    /* A busy worker still serves ready fds: poll now and then, here where
     * the resumed thread holds no queue locks (a parking thread does, so
     * pick_next must not dispatch events). */
    if (unlikely((w->tick & 63) == 0) && io_active() && !io_poll_owned())
        io_poll_nonblocking();
    *w->errno_loc = cur->saved_errno;
}

/* Give up the CPU: run `fn(arg)` after the switch, then whatever is next.
 * `unlocked`: the caller holds no lock (see pick_next's `batch`). */
static inline __attribute__((always_inline)) void park(after_fn fn, void *arg, bool unlocked)
{
    struct worker *w = worker_self();
    fern_thread *cur = w->cur;
    fern_thread *next;
    STORE_RELAXED(&cur->run_state, T_PARKED);
    PROBE2(park, cur->id, cur->wait_what);
    w->after = fn;
    w->after_prev = cur;
    w->after_arg = arg;
    next = pick_next(w, false, unlocked, true);
    if (next && !next->sp && !(stack_ready(w, next->stack_cls) && stack_bind(w, next))) {
        /* Binding a stack that is not in the cache may fault in a page and
         * take a system call, which must not happen while the parking
         * thread's queue lock is still held (it is released in `fn`): that
         * first run goes through g0. */
        w->start = next;
        next = NULL;
    }
    switch_to(w, cur, next ? next : &w->g0, false);
}

void sched_park(after_fn fn, void *arg) { park(fn, arg, false); }

/* Exit into a thread that has not run yet and wants a stack of the same
 * class: hand it the exiting thread's stack, hot in the cache, instead of
 * returning the stack to the pool, switching to g0 to bind one, and switching
 * again. The exiting thread's after-action runs here, still on its stack:
 * nothing else owns that stack, and the action touches only the descriptor
 * (which it may free, or hand to a joiner), never the stack. Then the new
 * thread starts on a fresh frame at the top, abandoning the old frames. */
static void sched_relay(struct worker *w, fern_thread *cur, fern_thread *next, after_fn fn,
                        void *arg) __attribute__((noreturn));
static void sched_relay(struct worker *w, fern_thread *cur, fern_thread *next, after_fn fn,
                        void *arg)
{
    struct stack *s = cur->stack;
    canary_check(cur, s);
    STORE_RELAXED(&cur->stack, NULL);
    STORE_RELAXED(&next->stack, s);
    /* Before fn: under TSan, fn may free cur and with it cur's fiber. */
    PROBE2(switch, cur->id, next->id);
    enter_thread(w, next);
    fn(w, cur, arg); /* cur may be freed from here on */
#ifdef FERN_ASAN
    __sanitizer_start_switch_fiber(NULL, s->lo, s->size);
    /* The old frames left their redzones poisoned. */
    ASAN_UNPOISON_MEMORY_REGION(s->lo, s->size - sizeof *s);
#endif
    fern_ctx_start((void *)((uintptr_t)s & ~(uintptr_t)15), next);
}

/* Exit path: never returns. */
void sched_exit(after_fn fn, void *arg) __attribute__((noreturn));
void sched_exit(after_fn fn, void *arg)
{
    struct worker *w = worker_self();
    fern_thread *cur = w->cur;
    fern_thread *next;
    STORE_RELAXED(&cur->run_state, T_EXITING);
    PROBE1(exit, cur->id);
    next = pick_next(w, false, true, false);
    /* Not while threads wait for a stack (stack_starved): the stack goes
     * back through the pool, which serves them first. */
    if (next && !next->sp && cur->stack && next->stack_cls == cur->stack_cls &&
        !LOAD_RELAXED(&stack_starved))
        sched_relay(w, cur, next, fn, arg);
    w->after = fn;
    w->after_prev = cur;
    w->after_arg = arg;
    if (next && !next->sp) {
        /* Through g0, after `fn` returned our stack to the pool: the new
         * thread reuses it while it is hot. */
        w->start = next;
        next = NULL;
    }
    switch_to(w, cur, next ? next : &w->g0, true);
    __builtin_unreachable();
}

static void after_requeue(struct worker *w, fern_thread *prev, void *arg)
{
    runq_put(w, prev);
}

void sched_yield_green(struct worker *w)
{
    fern_thread *cur = w->cur;
    /* Alone in its cluster and not shared with the monitor or a spare, the
     * worker queues cur before the switch, with no after-switch call: the
     * ring section (ring_enter) lasts until the next context's run_after,
     * so nobody else takes cur from the ring before its context is saved
     * (invariant 1). */
    bool owned = w->alone && ring_enter(w);
    fern_thread *next = pick_next(w, owned, true, true);
    if (!next) {
        if (owned)
            ring_leave(w);
        owned = false;
        /* Alone on this worker: still serve fds now and then, or a thread
         * that only yields would keep parked readers waiting. */
        if ((w->tick & 63) == 0 && io_active() && !io_poll_owned()) {
            io_poll_nonblocking();
            next = pick_next(w, false, true, true);
        }
        if (!next)
            return;
    }
    if (!next->sp && !(stack_ready(w, next->stack_cls) && stack_bind(w, next))) {
        w->start = next;
        next = &w->g0;
    }
    if (owned) {
        runq_put(w, cur);
    } else {
        w->after = after_requeue;
        w->after_prev = cur;
        w->after_arg = NULL;
        STORE_RELAXED(&cur->run_state, T_RUNNABLE);
    }
    switch_to(w, cur, next, false);
}

static void after_pin(struct worker *w, fern_thread *prev, void *arg)
{
    sched_pin(w, prev, arg != NULL);
}

/* A preempted thread gives up the worker. Preemptions are rare (one per
 * slice, or per wake-up beside a busy thread), so first the worker's due
 * timers and the inbox get a look: a thread a timer woke must not wait
 * behind pinned spinners for the 61-tick inbox check. A thread preempted
 * for a woken one before its slice ended (w->pin_front, preempt.c) goes to
 * the front of the pinned list: it resumes as soon as the woken threads
 * park, and its slice goes on. */
void sched_yield_pinned(struct worker *w)
{
    fern_thread *cur = w->cur;
    bool front = w->pin_front;
    w->pin_front = 0;
    if (LOAD_RELAXED(&w->timers.n))
        timers_run(w, fern_now_ns());
    fern_thread *next = inbox_pop(&w->cluster->inbox);
    if (!next) /* preempted outside fern: no fern lock held (preempt.c) */
        next = pick_next(w, false, true, true);
    if (!next)
        return;
    if (!next->sp && !(stack_ready(w, next->stack_cls) && stack_bind(w, next))) {
        w->start = next;
        next = &w->g0;
    }
    w->after = after_pin;
    w->after_prev = cur;
    w->after_arg = front ? cur : NULL;
    STORE_RELAXED(&cur->run_state, T_RUNNABLE);
    switch_to(w, cur, next, false);
}

static void ready_last(struct worker *w, fern_thread *t);

/* t was woken by a timer that w fired (wake_from WAKE_TIMER) or by a
 * descriptor event that w dispatched (WAKE_POLL): onto w's `soon` list,
 * which w serves before its hand-off slot and ring (pick_next), so it does
 * not wait behind the threads queued there. A poll's whole batch goes
 * there, in its order, not just its first thread: the rest would wait
 * behind the ring as before, and the batch cannot starve the ring, as
 * `soon` gives up every SOON_STREAK_MAX+1-th pick to `next` or the ring.
 * Not the hand-off slot: each event would push the previous thread (and
 * what a primitive's wake put there) to the ring's tail. An idle worker,
 * if one is listed and none spins, is woken to share the work (it steals
 * from `soon` too: steal_some); not needed for correctness, w is awake
 * and runs both. Out of line: the hand-off path does not pay for it. */
static __attribute__((noinline)) void ready_from(struct worker *w, fern_thread *t)
{
    tqueue_push(&w->soon, t);
    soon_rearm(w);
    struct fern_cluster *c = w->cluster;
    if (!w->alone && LOAD_RELAXED(&c->nidle) && !LOAD_RELAXED(&c->nspinning))
        cluster_wake(c);
}

void sched_ready(fern_thread *t)
{
    struct worker *w = worker_self();
    PROBE1(wake, t->id);
    if (w && w->cluster == t->cluster) {
        if (unlikely(w->wake_from)) {
            ready_from(w, t);
            return;
        }
        STORE_RELAXED(&t->run_state, T_RUNNABLE);
        if (w->alone) {
            /* No thieves, and this worker is awake: nobody to wake. */
            fern_thread *old = LOAD_RELAXED(&w->next);
            STORE_RELAXED(&w->next, t);
            if (old)
                runq_put(w, old);
            return;
        }
        STORE_RELAXED(&w->n_handoffs, w->n_handoffs + 1);
        fern_thread *old = __atomic_exchange_n(&w->next, t, __ATOMIC_SEQ_CST);
        if (old)
            runq_put(w, old);
        /* An idle worker watches for a hand-off that waits too long behind
         * a busy thread (see find_work); one spinner or one napping watcher
         * (WATCH_NAP_NS) is enough. seq_cst loads: ordered after the
         * exchange's store (see the header). */
        struct fern_cluster *c = w->cluster;
        if (__atomic_load_n(&c->nidle, __ATOMIC_SEQ_CST) &&
            !__atomic_load_n(&c->nspinning, __ATOMIC_SEQ_CST) &&
            !__atomic_load_n(&c->watching, __ATOMIC_SEQ_CST))
            cluster_wake(c);
        return;
    }
    inbox_push_wake(t->cluster, t);
}

/* Queue t behind the threads already queued on w (its ring, waking an idle
 * worker to share the work) if w runs t's cluster, else on the cluster's
 * inbox. */
static void ready_last(struct worker *w, fern_thread *t)
{
    struct fern_cluster *c = t->cluster; /* before t is visible: it may migrate */
    if (w && w->cluster == c) {
        runq_put(w, t);
        if (LOAD_RELAXED(&c->nidle))
            cluster_wake(c);
        return;
    }
    inbox_push_wake(c, t);
}

/* t is runnable again, after the threads already queued here (not in the
 * hand-off slot): for a joiner woken by an exit, which would otherwise run
 * next only to wait for the following thread. */
void sched_ready_tail(fern_thread *t)
{
    PROBE1(wake, t->id);
    ready_last(worker_self(), t);
}

/* A thread spawned from outside its cluster: counted in the cluster's
 * live_ext by the push. Out of line: inlined, it made sched_spawned save
 * more registers on every spawn (6 instructions, callgrind). */
static __attribute__((noinline)) void inbox_push_gained(struct fern_cluster *c, fern_thread *t)
{
    inbox_push(c, t, true);
}

/* A new thread, counted and made runnable: spawned by a worker of its
 * cluster, in that worker's counts and onto its ring (or, from the idle
 * context, the inbox); else onto the cluster's inbox, counted in live_ext
 * by the push. */
void sched_spawned(fern_thread *t)
{
    struct worker *w = worker_self();
    struct fern_cluster *c = t->cluster;
    if (unlikely(!w || w->cluster != c)) {
        ADD_RELAXED(&rt.spawned_ext, 1);
        inbox_push_gained(c, t);
        return;
    }
    COUNT(&w->n_spawned, 1);
    COUNT(&w->live_delta, 1);
    ready_last(w->cur != &w->g0 ? w : NULL, t);
}

static void after_migrate(struct worker *w, fern_thread *prev, void *arg)
{
    inbox_push(arg, prev, true);
}

int fern_migrate(fern_cluster *c)
{
    fern_thread *self = thread_current();
    if (!self)
        return EPERM;
    if (!c || LOAD(&c->stopping))
        return EINVAL;
    if (self->cluster == c)
        return 0;
    struct worker *w = worker_self();
    COUNT(&w->live_delta, -1);
    self->cluster = c;
    /* Per worker: a shared counter cost every migration a contended
     * cache line. */
    COUNT(&w->n_migrations, 1);
    park(after_migrate, c, true);
    return 0;
}

void fern_yield_body(void)
{
    struct worker *w = worker_self();
    if (w && w->cur != &w->g0)
        sched_yield_green(w);
    else
        sched_yield();
}

/* ------------------------------------------------------------------------ */
/* Workers                                                                   */
/* ------------------------------------------------------------------------ */

/* Steal victim v's hand-off slot (the caller saw v stuck: switch_age). */
static fern_thread *next_steal(struct worker *v)
{
    fern_thread *t = LOAD(&v->next);
    if (t && CAS(&v->next, &t, NULL))
        return t;
    return NULL;
}

static bool any_next(struct worker *w)
{
    struct fern_cluster *c = w->cluster;
    unsigned n = LOAD(&c->nworkers);
    for (unsigned i = 0; i < n; i++)
        if (c->workers[i] != w && !c->workers[i]->alone && LOAD_RELAXED(&c->workers[i]->next))
            return true;
    return false;
}

/* The idle path. A worker that finds nothing spins for up to SPIN_NS
 * (counted in nspinning, so wakers do not wake a second one) watching the
 * other workers: a thread left in a hand-off slot of a worker that has not
 * switched for NEXT_STUCK_NS is stolen. Then it sleeps: on its futex, or in
 * epoll_wait as the poll owner; with a timeout if a hand-off is pending
 * elsewhere, so a stuck one is looked at again.
 *
 * A spinner's looks are spaced SPIN_GAP_MIN_NS apart at first, twice as far
 * after each look that found nothing, up to SPIN_GAP_MAX_NS. Each look reads
 * the lines the other workers' rings live on (head, tail, the thread at the
 * head), and each owner's next write to them then waits for the line to
 * come back from the spinner's core. Looking every ~0.7 us, as a fixed 64
 * pauses did on a Sapphire Rapids VM (a pause is 10 ns there), cost a
 * fork-join of trivial threads (bench/fern_spawn) on two workers 10-15 ns a
 * thread with no steal at all (55-57 against 40-44 ns when the spinner
 * looked every 50 us). Work that appears on another worker's ring waits at
 * most one gap for a spinner (a sleeping worker is woken at once:
 * cluster_wake); the spinner's own inbox is watched between looks. */
#define SPIN_NS 50000
#define NEXT_STUCK_NS 10000
#define SPIN_GAP_MIN_NS 500
#define SPIN_GAP_MAX_NS 4000

/* Stealing threads that have never run. A thread spawned on one worker and
 * stolen by another is started there: its descriptor, written by the
 * spawner, and its stack move to the thief's core, and its joiner reads the
 * descriptor back. That is ~300 ns here, more than a short thread runs.
 * In a fork-join of tiny threads (bench/fern_spawn: 1,000 trivial threads
 * spawned and joined per batch) a spinning thief took each new thread as
 * it appeared, 10-25% of them, and spawn+join cost twice what it costs on
 * one worker.
 *
 * So a thief judges what it stole: when it is back in its idle loop, if
 * every stolen thread ended and they took under STEAL_SHORT_NS each
 * (migration included), stealing them did not pay. It then backs off for
 * threads that have never run: at most one per steal, at most one per
 * steal_wait, which doubles from STEAL_WAIT_MIN to STEAL_WAIT_MAX while the
 * steals stay short. A steal whose threads all ended in under twice that
 * halves steal_wait (to none below STEAL_WAIT_MIN), so that a few such
 * steals in a row, not one, end the back-off: a backed-off steal takes one
 * thread, and its time carries the whole cost of moving it, which on a
 * Sapphire Rapids VM was 600-1,000 ns for a third of the trivial threads of
 * bench/fern_spawn (against ~310 ns on the EPYC VM the threshold was set
 * on); ending the back-off at each of those had the thief take half the
 * ring again, 20% of all the threads. A longer steal, or one whose threads
 * park, ends the back-off at once (halving it for threads of 1 us made a
 * fork-join of 1,000 of them up to 17% slower, 0.58-0.71 against 0.56-0.62
 * ms). Once the back-off ends, half a ring is taken again. Threads that
 * have run before (woken, preempted) are stolen as ever, and so are fresh
 * ones queued on a worker that has run one thread for STEAL_STALL_NS
 * (steal_some). Parallel work of 500 ns per thread or more is spread as
 * before (a stolen thread of that length measures ~800 ns). */
#define STEAL_SHORT_NS 600
#define STEAL_WAIT_MIN 1000
#define STEAL_WAIT_MAX 128000
#define STEAL_STALL_NS 100000

/* How long worker v has been running the same thread, as far as idle
 * worker w has watched it: 0 when w first sees v's current switch count,
 * then the time since. For the hand-off slot of a busy worker (stolen after
 * NEXT_STUCK_NS) and the steal back-off (STEAL_STALL_NS). */
static int64_t switch_age(struct worker *w, struct worker *v, int64_t now)
{
    unsigned i = v->index % WATCH_MAX;
    uint64_t sw = LOAD_RELAXED(&v->n_switches);
    if (sw != w->watch_sw[i] || !w->watch_at[i]) {
        w->watch_sw[i] = sw;
        w->watch_at[i] = now;
        return 0;
    }
    return now - w->watch_at[i];
}

/* The thread at the head of v's ring has never run. A hint: the slot and the
 * descriptor may change under us (descriptors are never unmapped). */
static bool steal_head_fresh(struct worker *v)
{
    uint32_t head = LOAD(&v->rq_head);
    if (head == LOAD(&v->rq_tail))
        return false;
    fern_thread *t = LOAD_RELAXED(&v->rq[head % RUNQ_SIZE]);
    return t && LOAD_RELAXED(&t->sp) == NULL;
}


/* Steal half of victim v's `soon` list (at least one thread): one to run,
 * the rest onto w's ring, which is empty (the caller found nothing to run),
 * in their order. They have run before, so the back-off for fresh threads
 * does not apply. */
static fern_thread *soon_steal(struct worker *w, struct worker *v, uint32_t *got)
{
    struct tqueue *q = &v->soon;
    if (!tqueue_len(q))
        return NULL;
    spin_lock(&q->lock);
    uint32_t n = q->n - q->n / 2;
    if (n > RUNQ_SIZE)
        n = RUNQ_SIZE;
    fern_thread *head = q->head, *x = head;
    for (uint32_t i = 1; i < n && x; i++)
        x = x->link;
    if (x) {
        q->head = x->link;
        if (!q->head)
            q->tail = NULL;
        x->link = NULL;
        STORE_RELAXED(&q->n, q->n - n);
    }
    spin_unlock(&q->lock);
    if (!x)
        return NULL; /* emptied meanwhile */
    *got = n;
    /* Each link is read before its thread is queued: once in the ring, a
     * thief may take and run it, and its link is reused. */
    for (fern_thread *y = head->link, *nx; y; y = nx) {
        nx = y->link;
        runq_put(w, y);
    }
    STORE_RELAXED(&w->n_steals, w->n_steals + 1);
    PROBE3(steal, head->id, w->index, v->index);
    return head;
}

/* On entering the idle loop: judge the last steal (see above). */
static void steal_judge(struct worker *w)
{
    int64_t per = (fern_now_ns() - w->steal_at) / w->stolen_n;
    bool ended = w->n_exited - w->steal_exited >= w->stolen_n;
    if (ended && per < STEAL_SHORT_NS)
        w->steal_wait = w->steal_wait ? (w->steal_wait < STEAL_WAIT_MAX / 2 ? w->steal_wait * 2 : STEAL_WAIT_MAX)
                                      : STEAL_WAIT_MIN;
    else if (ended && per < 2 * STEAL_SHORT_NS && w->steal_wait > STEAL_WAIT_MIN)
        w->steal_wait /= 2;
    else
        w->steal_wait = 0;
    w->stolen_n = 0;
}

/* Steal from the other workers of w's cluster, the back-off applied: while
 * backed off, at most one never-run thread per steal_wait since the last
 * steal, unless its worker has been running one thread for STEAL_STALL_NS.
 * Then what waits behind that thread is taken as usual (half the ring),
 * however short: the back-off is for a spawner that will run its threads
 * itself in a moment, not for threads stuck behind a long computation. */
static fern_thread *steal_some(struct worker *w, struct fern_cluster *c, unsigned nw)
{
    int64_t now = w->steal_wait ? fern_now_ns() : 0;
    fern_thread *t = NULL;
    for (unsigned i = 1; i < nw && !t; i++) {
        struct worker *v = c->workers[(w->index + i) % nw];
        uint32_t max = RUNQ_SIZE, got = 0;
        if (w->steal_wait && steal_head_fresh(v) && switch_age(w, v, now) < STEAL_STALL_NS) {
            if (now < w->steal_at + w->steal_wait)
                continue;
            max = 1;
        }
        if ((t = runq_steal(w, v, max, &got)) != NULL || (t = soon_steal(w, v, &got)) != NULL) {
            w->steal_at = now ? now : fern_now_ns();
            w->stolen_n = got;
            w->steal_exited = w->n_exited;
        }
    }
    return t;
}

/* Napping watchers. A hand-off into a busy worker's `next` wakes an idle
 * worker (sched_ready) to steal it should the running thread keep the CPU;
 * but where hand-offs follow each other all the time (a chain of them: a
 * broadcast's heirs, each handing the mutex to the next), the woken worker
 * spins SPIN_NS, finds the hand-offs taken by their owner every time,
 * sleeps, and the next hand-off wakes it again: a futex wake, a system call
 * of a few microseconds, on the busy worker every ~75 us. Wake-all of a
 * million parked threads (bench/fern_million) took 0.283-0.294 s so, and
 * 0.250-0.264 s with no hand-off waking anyone (interleaved runs).
 *
 * So an idle worker that saw hand-offs made (handoffs_moved) while it
 * looked for work sleeps instead as the cluster's one watcher (`watching`),
 * for at most WATCH_NAP_NS, and while it does, hand-offs wake nobody. Each
 * time its nap ends it steals the hand-off of a worker that has not switched
 * through the nap (switch_age, as a spinner does), then naps again if more
 * hand-offs were made, or sleeps as usual (the next hand-off wakes it).
 * Only hand-offs are left to it: every other wake-up picks it as any idle
 * worker. A hand-off behind a thread that keeps the CPU so waits up to
 * WATCH_NAP_NS, twice that at most, for a thief (10-50 us with a spinner).
 * The watcher's naps cost its own idle CPU a timer wake-up each.
 *
 * A hand-off that saw `watching` set while the watcher was leaving wakes no
 * one, but then the watcher sees the hand-off count moved and naps again:
 * the hand-off stores its count, then exchanges `next` (seq_cst) and reads
 * `watching`; the watcher clears `watching`, fences (watch_end), then reads
 * the counts, so one of the two sees the other's store. A watcher that
 * leaves anyway sleeps at most 1 ms while a `next` slot is occupied
 * (worker_sleep). The hand-off runs on its own worker regardless: a
 * watcher is only ever about latency. */
#define WATCH_NAP_NS 200000

/* Whether any other worker of c made a hand-off since w last looked. */
static bool handoffs_moved(struct worker *w, struct fern_cluster *c)
{
    bool moved = false;
    unsigned n = LOAD(&c->nworkers), nwatch = n < WATCH_MAX ? n : WATCH_MAX;
    for (unsigned i = 0; i < nwatch; i++) {
        struct worker *v = c->workers[i];
        uint32_t h = LOAD_RELAXED(&v->n_handoffs);
        if (v != w && !v->alone && h != w->watch_ho[i]) {
            w->watch_ho[i] = h;
            moved = true;
        }
    }
    return moved;
}

/* Become c's watcher (if there is none yet): note when each worker was
 * last seen switching (switch_age). */
static bool watch_begin(struct worker *w, struct fern_cluster *c)
{
    uint32_t none = 0;
    if (!__atomic_compare_exchange_n(&c->watching, &none, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
        return false;
    int64_t now = fern_now_ns();
    unsigned n = LOAD(&c->nworkers), nwatch = n < WATCH_MAX ? n : WATCH_MAX;
    for (unsigned i = 0; i < nwatch; i++)
        if (c->workers[i] != w)
            (void)switch_age(w, c->workers[i], now);
    return true;
}

/* The watcher's nap is over: stop watching, and steal the hand-off of a
 * worker that has not switched since it began (or NULL). */
static fern_thread *watch_end(struct worker *w, struct fern_cluster *c)
{
    __atomic_store_n(&c->watching, 0, __ATOMIC_SEQ_CST);
    full_fence(); /* before handoffs_moved reads the counts again */
    int64_t now = fern_now_ns();
    unsigned n = LOAD(&c->nworkers), nwatch = n < WATCH_MAX ? n : WATCH_MAX;
    fern_thread *t = NULL;
    for (unsigned i = 0; i < nwatch && !t; i++) {
        struct worker *v = c->workers[i];
        if (v != w && !v->alone && LOAD_RELAXED(&v->next) && switch_age(w, v, now) >= NEXT_STUCK_NS &&
            (t = next_steal(v)) != NULL)
            PROBE3(steal, t->id, w->index, v->index);
    }
    return t;
}

/* A worker of c leaves its idle loop for good (a spare that ends): if it
 * held the poller (or anyone did who has let go since) and a thread still
 * waits on a descriptor, wake an idle worker of c to take the role over
 * (the header's "never left without an owner"). Its own release of the
 * role (io_sleep) comes before the fence in cluster_wake. */
static void worker_leave(struct fern_cluster *c)
{
    full_fence();
    if (io_active() && !io_poll_owned())
        cluster_wake(c);
}

static fern_thread *find_work(struct worker *w)
{
    struct fern_cluster *c = w->cluster;
    int64_t spin_until = 0;
    int64_t looked_at = 0;
    bool spinning = false;
    int64_t gap = SPIN_GAP_MIN_NS; /* between a spinner's looks */
    fern_thread *t = NULL;
    if (w->stolen_n)
        steal_judge(w);
    for (;;) {
        run_after(w);
        if (w->start) {
            t = w->start;
            w->start = NULL;
            break;
        }
        if (LOAD(&c->stopping))
            break;
        if (LOAD_RELAXED(&w->timers.n) && timers_run(w, fern_now_ns()))
            continue;
        timers_help(w, 0);
        if ((t = pick_next(w, false, true, true)) != NULL)
            break;
        unsigned nw = LOAD(&c->nworkers);
        if (nw > 1 && (t = steal_some(w, c, nw)) != NULL)
            break;
        if (io_poll_nonblocking())
            continue;
        int64_t now = fern_now_ns();
        if (spinning && now < spin_until && nw > 1) {
            if (now - looked_at >= NEXT_STUCK_NS / 2) {
                /* Not from a one-worker cluster's worker (`alone`, which
                 * can have a spare beside it): it uses its slot with plain
                 * loads and stores. */
                unsigned nwatch = nw < WATCH_MAX ? nw : WATCH_MAX;
                for (unsigned i = 0; i < nwatch && !t; i++) {
                    struct worker *v = c->workers[i];
                    if (v != w && !v->alone && switch_age(w, v, now) >= NEXT_STUCK_NS &&
                        (t = next_steal(v)) != NULL)
                        PROBE3(steal, t->id, w->index, v->index);
                }
                if (t)
                    break;
                looked_at = now;
            }
            /* Its own inbox (threads migrating in, wake-ups from other
             * clusters and plain threads) is still watched closely. */
            int64_t until = now + gap;
            do {
                for (int k = 0; k < 16; k++)
                    cpu_relax();
            } while (!inbox_len(&c->inbox) && fern_now_ns() < until);
            if (gap < SPIN_GAP_MAX_NS)
                gap *= 2;
            continue;
        }
        if (spinning) {
            spinning = false;
            __atomic_fetch_sub(&c->nspinning, 1, __ATOMIC_SEQ_CST);
            continue; /* one more look after leaving the spinners */
        }
        bool watch = !w->spare && nw > 1 && handoffs_moved(w, c) && watch_begin(w, c);
        bool woken;
        bool spare_end = worker_sleep(w, watch ? fern_now_ns() + WATCH_NAP_NS : FERN_FOREVER, &woken);
        if (watch) {
            t = watch_end(w, c);
            if (t)
                break;
            if (!woken)
                continue; /* no spin: look for work, then nap or sleep again */
        }
        if (spare_end) {
            worker_leave(c); /* a spare with nothing to do ends (t is NULL) */
            break;
        }
        spinning = true;
        ADD_RELAXED(&c->nspinning, 1);
        spin_until = fern_now_ns() + SPIN_NS;
        gap = SPIN_GAP_MIN_NS;
    }
    if (spinning)
        __atomic_fetch_sub(&c->nspinning, 1, __ATOMIC_SEQ_CST);
    if (t)
        w->trim_idle = false;
    return t;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    fern_tls_worker_ = w;
    pthread_setname_np(pthread_self(), "fern-worker"); /* for top, gdb and perf */
    STORE_RELAXED(&w->tid, (int32_t)gettid());
    STORE_RELAXED(&w->cur, &w->g0);
    monitor_worker_busy(w); /* the monitor may sleep: it watches us from now */
    w->errno_loc = &errno; /* this kernel thread's errno, for switch_to */
    if (__cxa_get_globals)
        w->eh = __cxa_get_globals();
    altstack_setup(w);
    preempt_worker_start(w);
#ifdef FERN_TSAN
    w->g0.tsan_fiber = __tsan_get_current_fiber();
#endif
#ifdef FERN_ASAN
    {
        pthread_attr_t a;
        void *addr;
        size_t sz;
        pthread_getattr_np(pthread_self(), &a);
        pthread_attr_getstack(&a, &addr, &sz);
        pthread_attr_destroy(&a);
        w->g0_lo = addr;
        w->g0_size = sz;
    }
#endif
    for (;;) {
        fern_thread *t = find_work(w);
        if (!t)
            break;
        if (!t->sp && !stack_bind(w, t))
            continue;
        switch_to(w, &w->g0, t, false);
    }
    run_after(w);
    stack_cache_flush(w);
    preempt_worker_stop(w);
    altstack_free(w);
    fern_tls_worker_ = NULL;
    STORE_RELAXED(&w->tid, 0); /* the monitor skips a worker without a kernel thread */
    STORE_RELAXED(&w->mon_idle, 1);
    if (w->spare)
        STORE(&w->spare, SPARE_EXITED);
    return NULL;
}

/* A worker that has stopped (or never started): its bias slot goes back. */
static void worker_free(struct worker *w)
{
    timers_free(w);
    bias_slot_give(w->bias_tag >> 2);
    free(w);
}

static struct worker *worker_new(struct fern_cluster *c, unsigned index, bool alone)
{
    struct worker *w;
    if (posix_memalign((void **)&w, 64, sizeof *w))
        return NULL;
    memset(w, 0, sizeof *w);
    w->cluster = c;
    w->index = index;
    w->alone = alone;
    w->ring_shared = !alone || !membarrier_ready();
    w->bias_tag = alone ? bias_slot_take() << 2 : 0;
    w->bias_busy = bias_busy(w->bias_tag);
    w->g0.alloc = A_LIVE;
    return w;
}

static int worker_launch(struct worker *w)
{
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, (size_t)256 * 1024);
    int r = pthread_create(&w->os, &a, worker_main, w);
    pthread_attr_destroy(&a);
    return r;
}

int cluster_start(struct fern_cluster **out, unsigned n)
{
    /* On a line of its own (aligned_alloc's size: a multiple of 64). */
    size_t size =
        (sizeof(struct fern_cluster) + (n + SPARES_MAX + RESCUE_SPARES_MAX) * sizeof(struct worker *) + 63) &
        ~(size_t)63;
    struct fern_cluster *c = aligned_alloc(64, size);
    if (!c)
        return ENOMEM;
    memset(c, 0, size);
    c->nworkers = n;
    c->nbase = n;
    for (unsigned i = 0; i < n; i++) {
        struct worker *w = worker_new(c, i, n == 1);
        if (!w) {
            for (unsigned j = 0; j < i; j++)
                worker_free(c->workers[j]);
            free(c);
            return ENOMEM;
        }
        c->workers[i] = w;
    }
    for (unsigned i = 0; i < n; i++) {
        int r = worker_launch(c->workers[i]);
        if (r) {
            STORE(&c->stopping, 1);
            cluster_wake_all(c);
            for (unsigned j = 0; j < i; j++)
                pthread_join(c->workers[j]->os, NULL);
            for (unsigned j = 0; j < n; j++)
                worker_free(c->workers[j]);
            free(c);
            return EAGAIN;
        }
    }
    pthread_mutex_lock(&rt.boot_lock);
    c->next_cluster = rt.clusters;
    rt.clusters = c;
    rt.nclusters++;
    rt.nworkers += n;
    pthread_mutex_unlock(&rt.boot_lock);
    *out = c;
    return 0;
}

/* Threads belonging to c: those gained from outside plus what each of its
 * workers gained (spawns) minus lost (exits, migrations away). Exact when no
 * thread of c is being spawned or migrated at the moment of the call. */
int64_t cluster_live(struct fern_cluster *c)
{
    int64_t n = LOAD_RELAXED(&c->live_ext);
    unsigned nw = LOAD(&c->nworkers);
    for (unsigned i = 0; i < nw; i++)
        n += LOAD_RELAXED(&c->workers[i]->live_delta);
    return n;
}

/* Start a compensation worker in c: a dormant slot's, or a new one while
 * there is room. Called by the monitor with rt.boot_lock held (so c is not
 * being stopped: cluster_stop sets `stopping` and then takes that lock
 * before it counts the workers it joins). */
int spare_start(struct fern_cluster *c, bool rescue)
{
    if (LOAD(&c->stopping))
        return EINVAL;
    struct worker *w = NULL;
    unsigned n = c->nworkers;
    /* Slots past SPARES_MAX are the rescue spares': an ordinary start
     * does not reuse them. */
    unsigned limit = c->nbase + SPARES_MAX + (rescue ? RESCUE_SPARES_MAX : 0);
    for (unsigned i = c->nbase; i < n && i < limit && !w; i++)
        if (LOAD(&c->workers[i]->spare) == SPARE_DORMANT)
            w = c->workers[i];
    if (!w) {
        if (n >= limit)
            return EAGAIN;
        if (!(w = worker_new(c, n, false)))
            return ENOMEM;
        w->spare = SPARE_DORMANT;
        c->workers[n] = w;
        STORE(&c->nworkers, n + 1); /* the slot is filled before it is counted */
    }
    if (c->nbase == 1)
        ring_share(c->workers[0]); /* the spare steals from it */
    STORE_RELAXED(&w->mon_idle, 0);
    STORE(&w->spare, SPARE_RUNNING);
    if (worker_launch(w)) {
        STORE_RELAXED(&w->mon_idle, 1);
        STORE(&w->spare, SPARE_DORMANT);
        return EAGAIN;
    }
    return 0;
}

/* Join the spares of c that ended by themselves (rt.boot_lock held). Once
 * none runs and the last tick found no worker stuck, a one-worker
 * cluster's ring is its owner's alone again: every steal by a spare came
 * before the spare's release of SPARE_EXITED, which the acquire load here
 * saw; the release store of ring_shared passes that on to the owner. */
void spares_reap(struct fern_cluster *c)
{
    bool running = false;
    for (unsigned i = c->nbase; i < c->nworkers; i++) {
        struct worker *w = c->workers[i];
        uint32_t state = LOAD(&w->spare);
        if (state == SPARE_EXITED) {
            pthread_join(w->os, NULL);
            STORE(&w->spare, SPARE_DORMANT);
        }
        running |= state == SPARE_RUNNING;
    }
    struct worker *w0 = c->workers[0];
    if (w0->alone && !running && !LOAD_RELAXED(&c->stuck) && LOAD_RELAXED(&w0->ring_shared) &&
        membarrier_ready())
        STORE(&w0->ring_shared, 0);
}

bool worker_has_queued(struct worker *v)
{
    return !runq_empty(v) || LOAD_RELAXED(&v->next) || tqueue_len(&v->pinned) || tqueue_len(&v->soon);
}

unsigned rescue_worker(struct worker *v, bool pinned_too)
{
    fern_thread *batch[RUNQ_SIZE + 1];
    unsigned n = 0;
    ring_share(v);
    for (;;) {
        uint32_t head = LOAD(&v->rq_head);
        uint32_t tail = LOAD(&v->rq_tail);
        uint32_t k = tail - head;
        if (k == 0 || k > RUNQ_SIZE)
            break;
        for (uint32_t i = 0; i < k; i++)
            batch[i] = LOAD_RELAXED(&v->rq[(head + i) % RUNQ_SIZE]);
        if (CAS(&v->rq_head, &head, head + k)) {
            n = k;
            break;
        }
    }
    /* A one-worker cluster's hand-off slot is its owner's alone (plain
     * stores): it stays. */
    if (!v->alone) {
        fern_thread *t = next_steal(v);
        if (t)
            batch[n++] = t;
    }
    fern_thread *pinned = NULL, *pinned_tail = NULL, *soon = NULL, *soon_tail;
    uint32_t npinned = 0, nsoon = 0;
    if (pinned_too && tqueue_len(&v->pinned))
        pinned = tqueue_take(&v->pinned, &pinned_tail, &npinned);
    if (tqueue_len(&v->soon))
        soon = tqueue_take(&v->soon, &soon_tail, &nsoon);
    if (n + npinned + nsoon == 0)
        return 0;
    /* Its preempted threads go to the front of the inbox: v sleeps in the
     * kernel, quite possibly on a pthread mutex (or another kernel-side
     * lock) that one of them holds, and every thread that ran before it
     * could block there too. Behind a long inbox, the spares (at most
     * SPARES_MAX) could all block on that lock before the holder's turn:
     * a hang seen under qemu-user with 100 threads sharing a std::mutex.
     * The rest, queued but not yet run, go to the back as usual. */
    if (pinned) {
        /* ...and each runs, where it lands, until it leaves the CPU by
         * itself: preempted again for the next woken thread, a holder
         * would hand its new worker to a thread that blocks on its lock,
         * and so on through every spare. (A true spinner so rescued is
         * stopped by compensation instead: monitor.c.) */
        for (fern_thread *x = pinned; x; x = x->link) {
            x->rescued_sw = UINT64_MAX;
            x->rescued = 1;
        }
        inbox_push_front(&v->cluster->inbox, pinned, pinned_tail, npinned);
    }
    if (n + nsoon) {
        /* Those woken by a timer or an event first, as v would have run
         * them first. */
        struct inbox *q = &v->cluster->inbox;
        spin_lock(&q->lock);
        for (fern_thread *x = soon, *y; x; x = y) {
            y = x->link;
            inbox_add(q, x);
        }
        for (unsigned i = 0; i < n; i++)
            inbox_add(q, batch[i]);
        spin_unlock(&q->lock);
    }
    cluster_wake(v->cluster);
    return n + npinned + nsoon;
}

/* Is the thread at the front of c's inbox one rescue_worker took from a
 * worker asleep in the kernel (monitor thread, which set the flag)? */
bool inbox_front_rescued(struct fern_cluster *c)
{
    struct inbox *q = &c->inbox;
    if (!inbox_len(q))
        return false;
    spin_lock(&q->lock);
    fern_thread *t = q->cnt ? q->slot[q->head] : q->lhead;
    bool r = t && t->rescued;
    spin_unlock(&q->lock);
    return r;
}

/* The poller may have no owner, while threads wait on descriptors, because
 * a worker that held it has stopped (cluster_stop, after joining them):
 * wake an idle worker of some cluster, which takes the role. rt.boot_lock
 * held (the clusters stay linked). With none idle, the awake workers poll
 * (and the monitor watches: watch_poller). */
void poll_rehome(void)
{
    full_fence();
    if (!io_active() || io_poll_owned())
        return;
    wake_an_idle_cluster();
}

/* Wake an idle worker of the first cluster that has one, to take the
 * poller; false if none is idle. rt.boot_lock held (the clusters stay
 * linked): poll_rehome and the monitor's watch_poller. */
bool wake_an_idle_cluster(void)
{
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster)
        if (LOAD_RELAXED(&c->nidle)) {
            cluster_wake(c);
            return true;
        }
    return false;
}

/* Stop and join c's workers and free it. Caller checked it is unused. */
void cluster_stop(struct fern_cluster *c)
{
    STORE(&c->stopping, 1);
    /* No spare starts after this: spare_start runs under boot_lock and
     * checks `stopping`. */
    pthread_mutex_lock(&rt.boot_lock);
    pthread_mutex_unlock(&rt.boot_lock);
    cluster_wake_all(c);
    for (unsigned i = 0; i < c->nbase; i++)
        pthread_join(c->workers[i]->os, NULL);
    pthread_mutex_lock(&rt.boot_lock);
    for (unsigned i = c->nbase; i < c->nworkers; i++) {
        struct worker *w = c->workers[i];
        if (LOAD(&w->spare) != SPARE_DORMANT) {
            pthread_join(w->os, NULL);
            STORE(&w->spare, SPARE_DORMANT);
        }
    }
    pthread_mutex_unlock(&rt.boot_lock);
    while (LOAD(&c->wakers))
        sched_yield(); /* a waker is still inside cluster_wake(c) */
    pthread_mutex_lock(&rt.boot_lock);
    for (struct fern_cluster **p = &rt.clusters; *p; p = &(*p)->next_cluster)
        if (*p == c) {
            *p = c->next_cluster;
            break;
        }
    rt.nclusters--;
    rt.nworkers -= c->nbase;
    poll_rehome();
    for (unsigned i = 0; i < c->nworkers; i++) {
        struct worker *w = c->workers[i];
        rt.retired_spawned += w->n_spawned;
        rt.retired_exited += w->n_exited;
        rt.retired_bound += w->n_bound;
        rt.retired_unbound += w->n_unbound;
        rt.migrations += w->n_migrations;
    }
    pthread_mutex_unlock(&rt.boot_lock);
    for (unsigned i = 0; i < c->nworkers; i++)
        worker_free(c->workers[i]);
    free(c->inbox.slot);
    free(c);
}

int fern_cluster_create(fern_cluster **c, unsigned workers)
{
    if (!c || workers == 0 || workers > FERN_WORKERS_MAX)
        return EINVAL;
    int r = runtime_start("fern_cluster_create");
    if (r)
        return r;
    return cluster_start(c, workers);
}

int fern_cluster_destroy(fern_cluster *c)
{
    if (!c || c == rt.dflt)
        return EINVAL;
    struct worker *w = worker_self();
    if (w && w->cluster == c)
        return EBUSY;
    if (cluster_live(c) != 0)
        return EBUSY;
    cluster_stop(c);
    return 0;
}

fern_cluster *fern_cluster_default(void) { return LOAD(&rt.running) ? rt.dflt : NULL; }

fern_cluster *fern_current_cluster(void)
{
    fern_thread *t = thread_current();
    return t ? t->cluster : NULL;
}

/* The workers asked for; compensation workers come and go (fern_stats). */
unsigned fern_cluster_workers(const fern_cluster *c) { return c ? c->nbase : 0; }

/* Start the runtime with cfg. `implicit_by` names the call that starts it
 * with the defaults (runtime_start), or is NULL for fern_init itself. */
static int runtime_init(const fern_config *cfg, const char *implicit_by)
{
    struct config c;
    int r = config_load(cfg, &c);
    if (r)
        return r;
    /* Green threads switch stacks under the CPU's feet and return with
     * jumps (docs/switch.md): a hardware shadow stack would fault. */
    if (arch_shadow_stack_active())
        return ENOTSUP;

    /* A reference, so a static link keeps the debugger's map (and the
     * embedded gdb extension) although nothing reads them in-process. */
    __asm__ volatile("" : : "r"(&fern_debug_map));
    pthread_mutex_lock(&rt.boot_lock);
    if (rt.running) {
        /* An explicit fern_init that comes after an implicit start would
         * otherwise fail with a bare EBUSY while the program believes its
         * configuration is in force: say which call started the runtime. */
        const char *by = rt.started_by;
        pthread_mutex_unlock(&rt.boot_lock);
        if (!implicit_by && by)
            fprintf(stderr,
                    "fern: fern_init: the runtime is already running: %s started it with the "
                    "default configuration; call fern_init before the first such call\n",
                    by);
        return EBUSY;
    }
    config = c;
    r = stack_init();
    if (r == 0)
        r = signals_install();
    if (r == 0)
        r = crash_start();
    if (r == 0)
        r = io_init();
    rt.default_cls = stack_class(c.stack_size, NULL);
    pthread_mutex_unlock(&rt.boot_lock);
    if (r) {
        crash_stop();
        return r;
    }
    /* Before the workers start: each arms its own preemption tick. */
    r = c.preempt ? preempt_init(c.slice_ns) : 0;
    struct fern_cluster *d = NULL;
    if (r == 0)
        r = cluster_start(&d, c.workers);
    if (r) {
        preempt_fini();
        crash_stop();
        io_fini();
        stack_fini();
        return r;
    }
    r = monitor_start(c.slice_ns, preempt_enabled());
    if (r) {
        cluster_stop(d);
        preempt_fini();
        crash_stop();
        io_fini();
        stack_fini();
        return r;
    }
    pthread_mutex_lock(&rt.boot_lock);
    rt.dflt = d;
    rt.started_by = implicit_by;
    STORE(&rt.running, 1);
    pthread_mutex_unlock(&rt.boot_lock);
    return 0;
}

int fern_init(const fern_config *cfg) { return runtime_init(cfg, NULL); }

int runtime_start(const char *by)
{
    if (LOAD(&rt.running))
        return 0;
    int r = runtime_init(NULL, by);
    return r == EBUSY ? 0 : r;
}

int fern_shutdown(void)
{
    if (thread_current() || worker_self())
        return EPERM;
    pthread_mutex_lock(&rt.boot_lock);
    if (!rt.running) {
        pthread_mutex_unlock(&rt.boot_lock);
        return EINVAL;
    }
    STORE(&rt.running, 0);
    pthread_mutex_unlock(&rt.boot_lock);
    crash_stop(); /* no dump in flight while the runtime is torn down */
    monitor_stop();
    for (;;) {
        pthread_mutex_lock(&rt.boot_lock);
        struct fern_cluster *c = rt.clusters;
        pthread_mutex_unlock(&rt.boot_lock);
        if (!c)
            break;
        cluster_stop(c);
    }
    preempt_fini(); /* after the workers: their handlers read its table */
    blocking_fini();
    uint64_t abandoned = 0;
    threads_fini(&abandoned);
    io_fini();
    stack_fini();
    if (abandoned)
        fprintf(stderr, "fern: shutdown destroyed %llu green thread(s) that had not finished\n",
                (unsigned long long)abandoned);
    pthread_mutex_lock(&rt.boot_lock);
    rt.dflt = NULL;
    rt.started_by = NULL;
    rt.spawned_ext = rt.retired_spawned = rt.retired_exited = 0;
    rt.retired_bound = rt.retired_unbound = 0;
    stack_starved = 0;
    pthread_mutex_unlock(&rt.boot_lock);
    return 0;
}

void sched_stats(struct fern_stats *s)
{
    uint64_t spawned, exited, bound, unbound;
    pthread_mutex_lock(&rt.boot_lock);
    spawned = rt.retired_spawned + LOAD_RELAXED(&rt.spawned_ext);
    exited = rt.retired_exited;
    bound = rt.retired_bound;
    unbound = rt.retired_unbound;
    s->migrations = rt.migrations;
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster) {
        s->clusters++;
        for (unsigned i = 0; i < c->nworkers; i++) {
            struct worker *w = c->workers[i];
            s->workers += i < c->nbase || LOAD(&w->spare) == SPARE_RUNNING;
            s->preemptions += LOAD_RELAXED(&w->n_preempts);
            s->preemptions_deferred += LOAD_RELAXED(&w->n_preempts_deferred);
            s->switches += LOAD_RELAXED(&w->n_switches);
            s->steals += LOAD_RELAXED(&w->n_steals);
            s->worker_sleeps += LOAD_RELAXED(&w->n_sleeps);
            s->migrations += LOAD_RELAXED(&w->n_migrations);
            spawned += LOAD_RELAXED(&w->n_spawned);
            exited += LOAD_RELAXED(&w->n_exited);
            bound += LOAD_RELAXED(&w->n_bound);
            unbound += LOAD_RELAXED(&w->n_unbound);
        }
    }
    pthread_mutex_unlock(&rt.boot_lock);
    s->threads_spawned = spawned;
    s->threads_live = spawned - exited;
    s->stacks_in_use = bound - unbound;
}

/* The workers of c that count (as in sched_stats and the lines below):
 * its base workers and the spares running now. c->nworkers counts slots,
 * which stay after their spares end. */
static bool worker_counts(struct fern_cluster *c, unsigned i, uint32_t *spare_state)
{
    *spare_state = i < c->nbase ? SPARE_RUNNING : LOAD(&c->workers[i]->spare);
    return *spare_state == SPARE_RUNNING;
}

void sched_dump_clusters(FILE *f)
{
    pthread_mutex_lock(&rt.boot_lock);
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster) {
        /* Each spare's state is read once, for both the count and its
         * line: one that ends meanwhile is in neither or in both. */
        uint32_t state[FERN_WORKERS_MAX + SPARES_MAX + RESCUE_SPARES_MAX];
        unsigned nw = LOAD(&c->nworkers), live = 0, spares = 0;
        for (unsigned i = 0; i < nw; i++)
            if (worker_counts(c, i, &state[i])) {
                live++;
                spares += i >= c->nbase;
            }
        /* Idle counts listed workers, which are running ones; a spare that
         * has just been counted out may still be listed for a moment. */
        unsigned idle = LOAD_RELAXED(&c->nidle);
        if (idle > live)
            idle = live;
        fprintf(f, "cluster %p%s: %u workers", (void *)c, c == rt.dflt ? " (default)" : "", live);
        if (spares)
            fprintf(f, " (%u spare%s)", spares, spares == 1 ? "" : "s");
        fprintf(f, ", %u idle, %u spinning, %u threads, inbox %u\n", idle,
                LOAD_RELAXED(&c->nspinning), (unsigned)cluster_live(c), inbox_len(&c->inbox));
        for (unsigned i = 0; i < nw; i++) {
            struct worker *w = c->workers[i];
            uint32_t q = LOAD_RELAXED(&w->rq_tail) - LOAD_RELAXED(&w->rq_head);
            fern_thread *nx = LOAD_RELAXED(&w->next);
            if (state[i] != SPARE_RUNNING)
                continue;
            fprintf(f, "  worker %u%s: runq %u, next %llu, soon %u, pinned %u, timers %u, switches %llu, "
                       "steals %llu, sleeps %llu",
                    i, i >= c->nbase ? " (spare)" : "", q, nx ? (unsigned long long)nx->id : 0ull,
                    tqueue_len(&w->soon), tqueue_len(&w->pinned), LOAD_RELAXED(&w->timers.n),
                    (unsigned long long)LOAD_RELAXED(&w->n_switches),
                    (unsigned long long)LOAD_RELAXED(&w->n_steals),
                    (unsigned long long)LOAD_RELAXED(&w->n_sleeps));
            /* How long the running thread has run: since the monitor first
             * saw this worker's switch count (its tick is the resolution). */
            fern_thread *cur = LOAD_RELAXED(&w->cur);
            if (cur && cur != &w->g0 && !LOAD_RELAXED(&w->mon_idle)) {
                int64_t since = LOAD_RELAXED(&w->mon_since);
                bool same = LOAD_RELAXED(&w->mon_switches) == LOAD_RELAXED(&w->n_switches);
                if (same && since)
                    fprintf(f, ", running thread %llu for %lld ms", (unsigned long long)cur->id,
                            (long long)((fern_now_ns() - since) / 1000000));
                else
                    fprintf(f, ", running thread %llu for < 1 monitor tick",
                            (unsigned long long)cur->id);
            }
            fputc('\n', f);
        }
    }
    pthread_mutex_unlock(&rt.boot_lock);
}

void sched_after_switch(void) { run_after(worker_self()); }
