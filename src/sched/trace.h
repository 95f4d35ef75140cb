/* SPDX-License-Identifier: MIT */
/*
 * The tracer's event points, for the scheduler and the layers above it:
 * declared here, provided by debug/trace.c (a lower layer declares what it
 * needs from a higher one, docs/design.md). Each is called through TRACE()
 * (base/trace.h), so with tracing off an event point costs a load and a
 * branch. They record into the calling worker's buffer (w->trace); w NULL
 * (a plain thread, the monitor, a blocking-pool helper) records into the
 * shared one.
 */
#ifndef FERN_SCHED_TRACE_H
#define FERN_SCHED_TRACE_H

#include "base/trace.h"
#include "sched/worker.h"

/* w switches from cur to next (either may be w's idle context g0): cur's
 * run_state says why it stops (T_PARKED: its wait_what and wait_obj say on
 * what; T_EXITING; else a yield). Returns next->sp (see switch_to). */
void *trace_switch(struct worker *w, fern_thread *cur, fern_thread *next);
/* t is made runnable by the caller (worker w or NULL); `tail` for
 * sched_ready_tail. Before t is published: t's next run ends this flow. */
void trace_wake(struct worker *w, fern_thread *t, bool tail);
/* t was just created by the caller. Before t is published. */
void trace_spawn(struct worker *w, fern_thread *t);
/* Any other event (TR_PREEMPT, TR_STEAL, ... base/trace.h) with its a, b, c. */
void trace_event(struct worker *w, unsigned type, uint64_t a, uint64_t b, uint64_t c);
/* n hibernated stacks, the first of thread `first`, were restored because
 * a thread touched one: recorded from the fault handler, so with atomics
 * only (async-signal-safe), not into the caller's buffer. */
void trace_touch(uint64_t n, uint64_t first);
/* A worker's track number, for TR_STEAL and the monitor's events. */
static inline uint64_t trace_track(const struct worker *w)
{
    struct trace_buf *b = LOAD(&w->trace);
    return b ? LOAD_RELAXED(&b->track) : 0;
}

#endif
