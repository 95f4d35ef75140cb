/* SPDX-License-Identifier: MIT */
/*
 * watch/'s parts of struct worker (sched/worker.h): the state the monitor
 * and preemption keep on each worker. Types only, on base/ alone, so that
 * the scheduler's data model can embed them without including watch/.
 */
#ifndef FERN_WATCH_PARTS_H
#define FERN_WATCH_PARTS_H

#include "base/base.h"

/* The monitor's view of a worker (monitor.c): the worker clears idle when
 * it leaves its sleep and then wakes the monitor if that sleeps; the rest
 * is the monitor's own view of the worker ("which switch, seen since
 * when"). */
struct worker_mon {
    uint32_t idle;
    uint64_t switches;
    int64_t since;
    int64_t cpu;                /* the kernel thread's CPU time at since */
    int64_t req_cpu;            /* its CPU time at the first preemption request, or 0 */
    int64_t asleep;             /* when the monitor first saw it asleep in the kernel
                                 * at this switch count, at every look since; 0 */
};

/* Preemption (preempt.c): a timer on this kernel thread's CPU clock
 * signals it every tick of CPU it uses; the handler keeps the running
 * thread's slice. Handler and owner only. */
struct worker_preempt {
    timer_t timer;
    bool timed;                 /* timer exists */
    uint32_t pin_front;         /* the preempted thread's slice is not over:
                                 * it resumes first (sched_yield_pinned) */
    uint64_t slice_sw;          /* n_switches when the slice was stamped, or SLICE_NONE */
    int64_t slice_start;        /* CPU time at which the running slice began */
    int64_t slice_next;         /* CPU time of the last preemption: where the
                                 * next thread's slice begins, 0 if unknown */
    uint32_t nudged;            /* the monitor sent a tick (preempt_nudge) */
    uint64_t defer_sw;          /* n_switches of the handler's last deferral */
    uint32_t defer_n;           /* deferrals in a row at that switch count */
    int64_t defer_cpu0;         /* CPU time of the first of them */
    int64_t defer_cpu;          /* CPU time of the last of them */
    uint32_t soft;              /* ThreadSanitizer: yield at the next preempt_point */
};

#endif
