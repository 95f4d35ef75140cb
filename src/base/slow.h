/* SPDX-License-Identifier: MIT */
/*
 * The rare features' switches, side by side in one word, so that the wake
 * path tests them all with one compare and a branch (SLOW below) and takes
 * the out-of-line path that serves them only when one is on: the tracer
 * (a session records: debug/trace.c) and stack hibernation (threads may be
 * hibernated: sched/hibernate.c); and the spawn and exit paths test the
 * tracer's switch and stack starvation (stack/stack.c) at once. Each part
 * is written by its own feature only, with an atomic store of the part;
 * readers of one feature read its part (trace_on is `trace`, base/trace.h;
 * stack_starved is `starved`, stack/stack.h). Defined in sched/ready.c.
 */
#ifndef FERN_BASE_SLOW_H
#define FERN_BASE_SLOW_H

#include "base/base.h"

union fern_slow {
    uint64_t any;
    struct {
        uint32_t trace; /* nonzero while a trace session records */
        uint16_t hib;   /* nonzero from the start of a runtime whose threads
                         * may hibernate (hib_init) to its end (hib_fini):
                         * while it is, every wake-up passes the gate of
                         * hibernation's handshake (hib_gate_hit). It stays
                         * set when hibernation stops mid-run: threads
                         * hibernated before still need the gate. */
        uint16_t starved; /* threads wait for a stack (stack_starved,
                           * stack/stack.h): spawn fails with EAGAIN and an
                           * exit gives its stack back to the pool */
    };
};
extern union fern_slow fern_slow __attribute__((visibility("hidden")));

#if defined(__clang__)
#define SLOW_COLD_
#else
#define SLOW_COLD_ __attribute__((cold))
#endif

/* Run `call` (which usually returns) if any of the switches is on. */
#if defined(ARCH_JUMP_IF_SET64) && !defined(FERN_TSAN)
#define SLOW(call)                                  \
    do {                                            \
        __label__ slow_on_, slow_off_;              \
        ARCH_JUMP_IF_SET64(fern_slow.any, slow_on_); \
        goto slow_off_;                             \
    slow_on_: SLOW_COLD_;                           \
        call;                                       \
    slow_off_:;                                     \
    } while (0)
#else
/* Part by part, as the features store them (TSan checks sizes). */
#define SLOW(call)                                                                  \
    do {                                                                            \
        if (unlikely(LOAD_RELAXED(&fern_slow.trace) | LOAD_RELAXED(&fern_slow.hib) | \
                     LOAD_RELAXED(&fern_slow.starved)))                             \
            call;                                                                   \
    } while (0)
#endif

#endif
