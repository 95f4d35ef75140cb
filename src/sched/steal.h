/* SPDX-License-Identifier: MIT */
/*
 * The idle path's search for work (steal.c): its per-worker state and what
 * the rest of sched/ calls.
 */
#ifndef FERN_SCHED_STEAL_H
#define FERN_SCHED_STEAL_H

#include "base/base.h"

struct worker;

#define WATCH_MAX 64u /* other workers an idle worker watches (switch_age) */

/* struct worker's part for stealing threads that never ran (steal.c:
 * STEAL_SHORT_NS). */
struct worker_steal {
    int64_t at;                 /* when the last steal's threads were taken */
    uint32_t stolen_n;          /* how many, 0 once judged */
    uint64_t exited;            /* n_exited then */
    int64_t wait;               /* back-off between steals of fresh threads, 0: none */
};

/* struct worker's part for what this worker, idle, last saw of worker i
 * (index % WATCH_MAX): its n_switches, and when it first saw that count
 * (steal.c: switch_age); its ring's tail, and when it first saw that
 * (stall_age). */
struct worker_watch {
    uint64_t sw[WATCH_MAX];
    int64_t at[WATCH_MAX];
    uint32_t ho[WATCH_MAX];     /* and its n_handoffs (handoffs_moved) */
    uint32_t tail[WATCH_MAX];
    int64_t tail_at[WATCH_MAX];
    int64_t look[WATCH_MAX];    /* when it last looked at that tail */
};

bool any_next(struct worker *w);
/* Steal victim v's hand-off slot (the caller saw v stuck). */
fern_thread *next_steal(struct worker *v);
/* The idle loop's search: a thread to run, or NULL when the worker is to
 * stop. */
fern_thread *find_work(struct worker *w);

#endif
