/* SPDX-License-Identifier: MIT */
/*
 * sync/: the blocking primitives, for io/, thread/ and the layers above.
 *   wait.c     waiters, parkers, wait queues (wait.h)
 *   bias.c     biased objects (bias.h)
 *   mutex.c    fern_mutex
 *   cond.c     fern_cond
 *   sem.c      fern_sem
 *   rwlock.c   fern_rwlock
 *   barrier.c  fern_barrier
 *   wg.c       fern_wg
 *   once.c     fern_call_once
 *   chan.c     fern_chan (chan.h: its layout and attempts, for fern_select)
 *   ticker.c   fern_ticker (ticker.h: its layout and take, for fern_select)
 *   lot.c      the parking lot: wait queues keyed by an address (fern-hook)
 */
#ifndef FERN_SYNC_H
#define FERN_SYNC_H

#include "sync/bias.h"
#include "sync/wait.h"

/* The C bodies of the public entry points that arch/<arch>/switch.S defines
 * as jump_return trampolines where ARCH_JUMP_RETURN is 1 (same contract as
 * the public function); elsewhere each file defines the public call as a
 * plain call of its body. */
int fern_chan_send_body(fern_chan *ch, const void *elem);
int fern_chan_recv_body(fern_chan *ch, void *elem);
int fern_cond_wait_body(fern_cond *c, fern_mutex *m);

/* The destroy of an object whose only inhabitants are waiters on q
 * (guarded by *lock) and, if count is not NULL, the users a nonzero *count
 * stands for (a wait group's; read under the lock): EBUSY while a thread is
 * blocked on it or *count is not 0, a wait while threads are only leaving q
 * (the destroy rule, wait.c), 0 once it is idle. */
int queue_destroy(uint32_t *lock, const fern_waitq *q, const int64_t *count);

/* The parking lot (lot.c has the protocol). lot_park queues the caller on
 * addr if valid(addr, arg), run under the bucket's lock, says so, and parks
 * or blocks until lot_unpark or the deadline (fern_now_ns based,
 * FERN_FOREVER): LOT_WOKEN, LOT_TIMEDOUT, or LOT_INVALID (valid said no: it
 * did not wait). lot_unpark wakes up to n parties queued on addr and
 * returns how many; the caller changed the object's word before calling.
 * lot_queued counts them (tests and diagnostics). fern__lot_nwait: parties
 * inside lot_park (exported for fern-hook, io/hookapi.h). */
enum { LOT_TIMEDOUT = 0, LOT_WOKEN = 1, LOT_INVALID = 2 };
int lot_park(const void *addr, int (*valid)(const void *, void *), void *arg, const char *what,
             int64_t deadline);
int lot_unpark(const void *addr, int n);
/* lot_unpark with the choice left to the caller, all under the bucket's
 * lock, so that the object's word can be handed over in the same step (a
 * read-write lock's hand-over, hook/rwlock.c): fn(arg, LOT_SEE, token)
 * for every party queued on addr, oldest first (token: the arg it parked
 * with); then fn(arg, LOT_PICK, token) for each, nonzero to wake it, and
 * fn(arg, LOT_TAKEN, token) for each one claimed (a party whose wait has
 * just timed out cannot be, and is not woken); then fn(arg, LOT_DONE,
 * NULL), where the word is stored: nonzero runs the PICK pass again over
 * those still queued. Returns how many it woke. Takes the lock even with
 * nobody parked (LOT_DONE always runs). */
enum { LOT_SEE = 0, LOT_PICK = 1, LOT_TAKEN = 2, LOT_DONE = 3 };
int lot_unpark_filter(const void *addr, int (*fn)(void *, int, void *), void *arg);
int lot_queued(const void *addr);
extern uint32_t fern__lot_nwait;

/* ---- what sync/ needs from the layers above ---- */
/* Under ThreadSanitizer the handler cannot redirect the thread (it gets a
 * copy of the context): fern_mutex_lock and the channel operations call
 * preempt_point() at their start, where the caller holds no fern lock, and
 * yield there. Empty in other builds. */
#ifdef FERN_TSAN
void preempt_point_slow(struct worker *w);
static inline void preempt_point(void)
{
    struct worker *w = worker_self();
    if (w && LOAD_RELAXED(&w->preempt.soft) && w->cur != &w->g0)
        preempt_point_slow(w);
}
#else
static inline void preempt_point(void) {}
#endif

#endif
