/* SPDX-License-Identifier: MIT */
/*
 * The idle path's search for work (find_work): the local queues, the
 * inbox, the other workers' rings (stealing) and stuck hand-off slots,
 * timers and the poller, spinning a while before sleeping (idle.c).
 */
#include "sched/sched.h"
#include "sched/trace.h"
#include "sched/switch.h"
#include "base/probes.h"

#include <sched.h>

/* Steal victim v's hand-off slot (the caller saw v stuck: switch_age). */
fern_thread *next_steal(struct worker *v)
{
    fern_thread *t = LOAD(&v->next);
    if (t && CAS(&v->next, &t, NULL))
        return t;
    return NULL;
}

bool any_next(struct worker *w)
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
 * steal.wait, which doubles from STEAL_WAIT_MIN to STEAL_WAIT_MAX while the
 * steals stay short. A steal whose threads all ended in under twice that
 * halves steal.wait (to none below STEAL_WAIT_MIN), so that a few such
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
 * without queueing another meanwhile (steal_some, stall_age). Parallel
 * work of 500 ns per thread or more is spread as before (a stolen thread of
 * that length measures ~800 ns).
 *
 * A worker whose thread keeps spawning does not switch either, but it is
 * not stuck: the threads it queues are for it to run in a moment. Judged
 * by switches alone, a spawner that the kernel kept off its CPU for a
 * millisecond in the middle of a batch (a loaded machine) looked stuck
 * from then on, and once it ran again the thief took nearly each new
 * thread as it was queued: 100-500 steals in such a batch of 1,000 trivial
 * threads (85-175 in most batches of Sched.TinyThreadsStayWithTheirSpawner
 * once, on a 2-core machine running another test beside it). A stall that
 * the ring's tail shows too costs 15-60 (the halves of what waited, then
 * the back-off again). */
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
    if (sw != w->watch.sw[i] || !w->watch.at[i]) {
        w->watch.sw[i] = sw;
        w->watch.at[i] = now;
        return 0;
    }
    return now - w->watch.at[i];
}

/* How long worker v has neither switched nor queued a thread on its ring,
 * as far as idle worker w has watched it (as switch_age): for the steal
 * back-off's STEAL_STALL_NS. Queued threads include wake-ups, which are
 * not fresh and not backed off from anyway. A tail that moved since w's
 * last look moved at most that long ago, and is dated then: a thief that
 * keeps looking sees a spawner at work, one that was away (asleep, or off
 * its CPU) for STEAL_STALL_NS cannot tell and judges by switches alone, as
 * it did before (dating the move at its return made a thief that the
 * kernel kept off its CPU wait 100 us more for threads queued behind a
 * computation, and miss a 3 ms one: TinyThreadsBehindALongOneAreStolen). */
static int64_t stall_age(struct worker *w, struct worker *v, int64_t now)
{
    int64_t sw = switch_age(w, v, now);
    unsigned i = v->index % WATCH_MAX;
    uint32_t tail = LOAD_RELAXED(&v->rq_tail);
    int64_t last = w->watch.look[i];
    w->watch.look[i] = now;
    if (tail != w->watch.tail[i] || !last) {
        w->watch.tail[i] = tail;
        w->watch.tail_at[i] = last ? last : now;
    }
    int64_t q = now - w->watch.tail_at[i];
    return q < sw ? q : sw;
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
    TRACE(trace_event(w, TR_STEAL, *got, trace_track(v), head->id));
    return head;
}

/* On entering the idle loop: judge the last steal (see above). */
static void steal_judge(struct worker *w)
{
    int64_t per = (fern_now_ns() - w->steal.at) / w->steal.stolen_n;
    bool ended = w->n_exited - w->steal.exited >= w->steal.stolen_n;
    if (ended && per < STEAL_SHORT_NS)
        w->steal.wait = w->steal.wait ? (w->steal.wait < STEAL_WAIT_MAX / 2 ? w->steal.wait * 2
                                                                            : STEAL_WAIT_MAX)
                                      : STEAL_WAIT_MIN;
    else if (ended && per < 2 * STEAL_SHORT_NS && w->steal.wait > STEAL_WAIT_MIN)
        w->steal.wait /= 2;
    else
        w->steal.wait = 0;
    w->steal.stolen_n = 0;
}

/* Steal from the other workers of w's cluster, the back-off applied: while
 * backed off, at most one never-run thread per steal.wait since the last
 * steal, unless its worker has been running one thread for STEAL_STALL_NS
 * and queued none meanwhile (stall_age).
 * Then what waits behind that thread is taken as usual (half the ring),
 * however short: the back-off is for a spawner that will run its threads
 * itself in a moment, not for threads stuck behind a long computation. */
static fern_thread *steal_some(struct worker *w, struct fern_cluster *c, unsigned nw)
{
    int64_t now = w->steal.wait ? fern_now_ns() : 0;
    fern_thread *t = NULL;
    for (unsigned i = 1; i < nw && !t; i++) {
        struct worker *v = c->workers[(w->index + i) % nw];
        uint32_t max = RUNQ_SIZE, got = 0;
        if (w->steal.wait && steal_head_fresh(v) && stall_age(w, v, now) < STEAL_STALL_NS) {
            if (now < w->steal.at + w->steal.wait)
                continue;
            max = 1;
        }
        if ((t = runq_steal(w, v, max, &got)) != NULL || (t = soon_steal(w, v, &got)) != NULL) {
            w->steal.at = now ? now : fern_now_ns();
            w->steal.stolen_n = got;
            w->steal.exited = w->n_exited;
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
        if (v != w && !v->alone && h != w->watch.ho[i]) {
            w->watch.ho[i] = h;
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
 * (sched.h's "never left without an owner"). Its own release of the role
 * (io_sleep) comes before the fence in cluster_wake. */
static void worker_leave(struct fern_cluster *c)
{
    full_fence();
    if (io_active() && !io_poll_owned())
        cluster_wake(c);
}

fern_thread *find_work(struct worker *w)
{
    struct fern_cluster *c = w->cluster;
    int64_t spin_until = 0;
    int64_t looked_at = 0;
    bool spinning = false;
    int64_t gap = SPIN_GAP_MIN_NS; /* between a spinner's looks */
    fern_thread *t = NULL;
    if (w->steal.stolen_n)
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
        w->trim.idle = false;
    return t;
}
