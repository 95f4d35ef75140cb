/* SPDX-License-Identifier: MIT */
/*
 * Idle workers: how a worker with nothing to run goes to sleep, and how
 * one is woken when work appears, without a lost wake-up (invariant 3,
 * docs/design.md; argued in full in sched.h's opening). A worker that owns
 * the poll sleeps in the poller (sched.h: io_sleep) rather than on its
 * futex.
 */
#include "sched/sched.h"

#include <sched.h>

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
        if (v->idle.listed) {
            v->idle.listed = 0;
            STORE_RELAXED(&c->nidle, c->nidle - 1);
            STORE(&v->idle.sleep_word, 0);
            pick = v;
            break;
        }
    }
    spin_unlock(&c->idle_lock);
    if (pick) {
        futex_wake(&pick->idle.sleep_word, 1);
        full_fence(); /* sleep_word = 0 before reading in_epoll: see io_sleep */
        if (LOAD(&pick->idle.in_epoll))
            io_wake();
    }
}

void cluster_wake_all(struct fern_cluster *c)
{
    unsigned n = LOAD(&c->nworkers);
    spin_lock(&c->idle_lock);
    for (unsigned i = 0; i < n; i++) {
        struct worker *v = c->workers[i];
        if (v->idle.listed) {
            v->idle.listed = 0;
            STORE_RELAXED(&c->nidle, c->nidle - 1);
        }
        STORE(&v->idle.sleep_word, 0);
        futex_wake(&v->idle.sleep_word, 1);
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
bool worker_sleep(struct worker *w, int64_t nap, bool *woken_out)
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
        if (w->trim.idle || now >= w->trim.next) {
            w->trim.next = now + TRIM_GAP_NS;
            if (stack_trim_some(w))
                return false;
        } else {
            trim_at = now + TRIM_IDLE_NS;
        }
    }
    spin_lock(&c->idle_lock);
    w->idle.listed = 1;
    STORE_RELAXED(&w->idle.sleep_word, 1);
    STORE_RELAXED(&c->nidle, c->nidle + 1);
    spin_unlock(&c->idle_lock);
    STORE_RELAXED(&w->mon.idle, 1);
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
            futex_wait(&w->idle.sleep_word, 1, deadline);
    } else {
        linger_over = false;
    }
    bool woken;
    spin_lock(&c->idle_lock);
    woken = !w->idle.listed;
    if (w->idle.listed) {
        w->idle.listed = 0;
        STORE_RELAXED(&c->nidle, c->nidle - 1);
    }
    spin_unlock(&c->idle_lock);
    /* Idle TRIM_IDLE_NS: nobody woke us and nothing else (a timer, a
     * look at a pending hand-off) was due before the trim deadline. A
     * sleep that ended late because the kernel ran something else instead
     * does not count. */
    if (!woken && fern_now_ns() >= trim_at)
        w->trim.idle = true;
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
    listed = v->idle.listed;
    if (listed) {
        v->idle.listed = 0;
        STORE_RELAXED(&c->nidle, c->nidle - 1);
        STORE(&v->idle.sleep_word, 0);
    }
    spin_unlock(&c->idle_lock);
    if (listed) {
        futex_wake(&v->idle.sleep_word, 1);
        full_fence(); /* as in cluster_wake */
        if (LOAD(&v->idle.in_epoll))
            io_wake();
    }
}
