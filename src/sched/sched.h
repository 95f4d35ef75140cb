/* SPDX-License-Identifier: MIT */
/*
 * sched/: the M:N scheduler, for sync/, thread/, io/, watch/ and runtime/.
 *   worker.h   the data model (runtime, cluster, worker, the queues'
 *              structs) and worker_self
 *   desc.h     the green thread's descriptor
 *   tqueue.h   the thread queue (a worker's pinned and soon lists)
 *   inbox.c    the cluster inbox (inbox.h)
 *   runq.c     the worker's ring run queue (runq.h)
 *   switch.c   leaving the CPU: picking the next thread, switching,
 *              parking, exiting, yielding, migrating (switch.h: what the
 *              idle loop shares of it)
 *   ready.c    making a thread runnable: wake-ups, hand-offs, the soon
 *              list, spawns
 *   idle.c     sleeping and waking idle workers (no lost wake-ups; idle.h)
 *   steal.c    the idle path's search: spinning, stealing, watching other
 *              workers' hand-offs (steal.h)
 *   worker.c   a worker's kernel thread and its main loop
 *   cluster.c  clusters: start, stop, the fern_cluster_* calls
 *   spare.c    compensation workers and rescuing a stuck worker's queue
 *   stats.c    the scheduler's part of fern_stats and fern_dump
 *   timer.c    per-worker timer heaps, and firing another worker's due
 *              timers (timer.h)
 *   hibernate.c  stack hibernation: parked threads' stacks copied out and
 *              their pages released, restored on resume or touch
 *              (hibernate.h; below the wait paths, driven by the monitor)
 * The design of the scheduler as a whole follows.
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
 * No lost wake-ups (invariant 3, docs/design.md). A worker about to sleep lists itself
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
 * futex with no deadline (io/poller.c). So the invariant: while io_active(),
 * either some worker owns the poller, or some worker is awake and will pass
 * through its idle path (where it polls, and takes the role if it finds
 * nothing) or its 64-tick poll; a worker that sleeps on its futex counts
 * for nothing. The owner releases the role each time it leaves epoll_wait
 * and takes it again when it next sleeps, which holds the invariant as long
 * as it comes back: so every way of leaving for good hands the role over.
 *   - A spare that ends (SPARE_LINGER_NS idle) may have been the owner, the
 *     other workers asleep on their futexes behind it: it wakes one idle
 *     worker of its cluster (worker_leave, steal.c), which takes the role.
 *     If none of them is idle, they are awake, or stuck: see the last case.
 *   - The workers of a destroyed cluster (cluster_stop): once they are
 *     joined, an idle worker of another cluster is woken (poll_rehome).
 *   - The owner leaves epoll_wait to run a thread that then blocks in the
 *     kernel, or every awake worker does: the monitor (watch/monitor.c:
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
 * Preempted threads (watch/preempt.c) are not put on the ring, where thieves would
 * take them, but on the worker's pinned list: a thread interrupted at an
 * arbitrary instruction resumes on the kernel thread it left. The owner
 * takes from that list when its ring is empty and every 61 ticks.
 *
 * Compensation (watch/monitor.c): a cluster's worker array has room for
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
 *   run_state, stack (for fern_dump): relaxed, diagnostics only; but
 *             T_PARKED is stored with release by the park's post-switch
 *             action (sync/wait.c), and a canceller's acquire load of it
 *             tells it the thread is saved (invariant 1, thread/cancel.c).
 *
 * Below it: stack/, base/, arch/. The few things the scheduler needs from
 * the layers above are declared at the end of this header, each with the
 * file that provides it, so that includes point one way.
 */
#ifndef FERN_SCHED_H
#define FERN_SCHED_H

#include "sched/inbox.h"
#include "sched/runq.h"
#include "sched/tqueue.h"
#include "sched/worker.h"
#include "sched/hibernate.h"

int64_t cluster_live(struct fern_cluster *c);
void sched_park(after_fn fn, void *arg);
void sched_ready(fern_thread *t);
/* sched_ready, but behind the threads already queued here: for a party
 * that has no reason to run before them (a joiner woken by an exit). */
void sched_ready_tail(fern_thread *t);
void sched_yield_green(struct worker *w);
/* Queue t on w's pinned list (owner only): it resumes on w; first if
 * `front` (its slice is not over). */
void sched_pin(struct worker *w, fern_thread *t, bool front);
void sched_exit(after_fn fn, void *arg) __attribute__((noreturn));
/* A new thread t is runnable: count it and queue it (thread/ spawn), with
 * the tracer's spawn event; sched_spawned_plain without it, for a caller
 * that found fern_slow clear (base/slow.h: no trace records). */
void sched_spawned(fern_thread *t);
void sched_spawned_plain(fern_thread *t);
/* Run the pending post-switch action (a fresh thread's first act). */
void sched_after_switch(void);
void sched_stats(struct fern_stats *s);
void sched_dump_clusters(FILE *f);
/* Yield from a preempted thread: it goes on w's pinned list. */
void sched_yield_pinned(struct worker *w);

void fern_yield_body(void);

int cluster_start(struct fern_cluster **out, unsigned nworkers);
void cluster_stop(struct fern_cluster *c);
/* cluster_stop, waiting for each worker until `deadline` only: returns how
 * many still ran then (reported on stderr, left running; the cluster is
 * then taken off the list but not freed), else 0 (cluster.c). */
unsigned cluster_stop_by(struct fern_cluster *c, int64_t deadline);
/* cluster_stop_by in two steps, for fern_shutdown, which halts every
 * cluster before it frees any (a thread migrating from a running cluster
 * pushes itself into another's inbox): cluster_halt_by stops and joins c's
 * workers (returns the stuck ones), cluster_retire takes c off the list
 * and frees it, unless `keep` (a stuck worker may still use it). */
unsigned cluster_halt_by(struct fern_cluster *c, int64_t deadline);
void cluster_retire(struct fern_cluster *c, bool keep);
void inbox_push_wake(struct fern_cluster *c, fern_thread *t);

/* A compensation worker's life (worker.spare). Started by the monitor
 * (spare_start), it ends itself when idle (EXITED) and is joined by the
 * monitor or cluster_stop (DORMANT), whose slot a later start reuses. */
enum { SPARE_NO = 0, SPARE_RUNNING = 1, SPARE_EXITED = 2, SPARE_DORMANT = 3 };
#define SPARES_MAX 4u            /* compensation workers per cluster at most */
/* More only to run a thread rescued from a worker asleep in the kernel
 * when every worker, spares included, sleeps there too (watch/monitor.c): it may
 * hold the lock they all wait for. */
#define RESCUE_SPARES_MAX 4u
/* Start a spare for c: 0, EAGAIN at the limit (SPARES_MAX, or with rescue
 * SPARES_MAX + RESCUE_SPARES_MAX) or if it could not launch, ENOMEM, or
 * EINVAL if c is stopping. */
int spare_start(struct fern_cluster *c, bool rescue);
void spares_reap(struct fern_cluster *c);
/* A worker that held the poller stopped: wake an idle worker of some
 * cluster to take the role (rt.boot_lock held). */
void poll_rehome(void);
/* Wake an idle worker of the first cluster that has one (rt.boot_lock
 * held); false if no cluster has an idle worker. */
bool wake_an_idle_cluster(void);
/* Move what waits on a stuck worker v (its ring, hand-off slot, and with
 * pinned_too its pinned threads) to its cluster's inbox; returns how many
 * threads moved. */
unsigned rescue_worker(struct worker *v, bool pinned_too);
/* The thread at the front of c's inbox was put there by rescue_worker
 * (monitor thread). */
bool inbox_front_rescued(struct fern_cluster *c);
/* v has something runnable waiting (ring, hand-off, pinned). */
bool worker_has_queued(struct worker *v);


/* ---- between sched/'s own files ---- */
/* worker.c */
struct worker *worker_new(struct fern_cluster *c, unsigned index, bool alone);
void worker_free(struct worker *w);
int worker_launch(struct worker *w);
/* idle.c and steal.c: idle.h, steal.h */

/* ---- what the scheduler needs from the layers above ---- */

/* The poller (io/poller.c implements it): the idle loop sleeps in it when a
 * worker owns the poll, and a waker that finds no idle worker on the futex
 * interrupts it. */
bool io_active(void);
bool io_poll_owned(void);
int io_poll_nonblocking(void);
bool io_sleep(struct worker *w, int64_t deadline);
void io_wake(void);


/* The monitor (watch/monitor.c). */
void monitor_kick(void);
extern uint32_t monitor_sleeping __attribute__((visibility("hidden")));
/* A worker leaving its sleep: the monitor must be awake while it is busy. */
static inline void monitor_worker_busy(struct worker *w)
{
    STORE_RELAXED(&w->mon.idle, 0);
    full_fence(); /* mon.idle = 0 before reading monitor_sleeping: see watch/monitor.c */
    if (LOAD_RELAXED(&monitor_sleeping))
        monitor_kick();
}


/* Preemption (watch/preempt.c), started and stopped on each worker's own
 * kernel thread. */
bool preempt_enabled(void);
void preempt_worker_start(struct worker *w);
void preempt_worker_stop(struct worker *w);

/* Per-worker signal stacks and the overflow report (debug/debug.c). */
int altstack_setup(struct worker *w);
void altstack_free(struct worker *w);
void overflow_report(fern_thread *t, const void *addr) __attribute__((noreturn));

/* Bias slots for one-worker clusters (sync/bias.c). */
uint32_t bias_slot_take(void);
void bias_slot_give(uint32_t id);
#define BIAS_SLOTS 64u
struct bias_slot {
    uint32_t busy; /* the owner is inside a plain-mode operation */
} __attribute__((aligned(64)));
extern struct bias_slot bias_slots[BIAS_SLOTS] __attribute__((visibility("hidden")));
/* The busy flag of the slot whose objects carry `tag`. */
static inline uint32_t *bias_busy(uint32_t tag) { return &bias_slots[tag >> 2].busy; }

#endif
