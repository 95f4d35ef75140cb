/* SPDX-License-Identifier: MIT */
/*
 * Idle workers (idle.c): the idle protocol's per-worker state and what the
 * rest of sched/ calls. The protocol itself (no lost wake-ups, invariant 3)
 * is argued in sched.h's opening.
 */
#ifndef FERN_SCHED_IDLE_H
#define FERN_SCHED_IDLE_H

#include "base/base.h"

struct worker;
struct fern_cluster;

/* struct worker's part for the idle protocol. */
struct worker_idle {
    uint32_t sleep_word;        /* 1 while listed idle; waker stores 0 + wakes */
    uint32_t listed;            /* under cluster->idle_lock */
    uint32_t in_epoll;          /* sleeping in epoll_wait as the poll owner */
};

/* struct worker's part for trimming pooled stacks (idle.c: TRIM_IDLE_NS). */
struct worker_trim {
    int64_t next;               /* no batch before this unless idle */
    bool idle;                  /* slept TRIM_IDLE_NS unwoken, no work found since */
};

void cluster_wake(struct fern_cluster *c);
void cluster_wake_all(struct fern_cluster *c);
/* Sleep until woken or the earliest deadline (see idle.c). */
bool worker_sleep(struct worker *w, int64_t nap, bool *woken_out);

#endif
