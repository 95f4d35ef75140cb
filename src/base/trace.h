/* SPDX-License-Identifier: MIT */
/*
 * The tracer's event buffers: what the layers above write into while
 * fern_trace_start's session runs (docs/debugging.md, "Tracing"). The
 * writer and the JSON (debug/trace.c) are at the top of the library; this
 * header is the part the scheduler's hot paths inline, so it knows nothing
 * of threads or workers: a buffer, an event and a clock.
 *
 * One buffer per worker, written by that worker's kernel thread only (the
 * owner), so recording takes no lock and no system call: a clock read, four
 * stores and a release store of `head`. Whoever drains it (the writer
 * thread, or the call that stops the session) reads up to `head` with
 * acquire and gives the slots back by a release store of `tail`. A full
 * buffer drops the new event and counts it in `dropped` (the writer reports
 * the count in the trace and on stderr); a worker never waits for the
 * writer. A flight-recorder buffer (`ring`) is never drained: it
 * overwrites its oldest event, and a reader copies the last events and then
 * discards those the owner may have overwritten meanwhile (debug/trace.c:
 * ring_format), so every field is stored and loaded with relaxed atomics.
 *
 * Threads that are no worker (the monitor, fern_blocking's helpers, plain
 * threads waking green ones) share one more buffer under a spin lock:
 * their events are rare and off the switch path.
 */
#ifndef FERN_BASE_TRACE_H
#define FERN_BASE_TRACE_H

#include "base/base.h"
#include "base/slow.h"

/* Event types (the top byte of trace_ev.w0). a, b, c as listed. */
enum trace_type {
    TR_RUN = 1,     /* a thread starts running: a = id, b = flow (0: none), c = descriptor */
    TR_YIELD,       /* the running thread stops, runnable: a = id */
    TR_PARK,        /* ... stops, parked: a = id, b = wait_obj, c = wait_what (a literal) */
    TR_EXIT,        /* ... stops, finished: a = id */
    TR_WAKE,        /* a thread is made runnable: a = its id, b = flow, c = TRW_* flags */
    TR_SPAWN,       /* a thread is created: a = its id, b = flow, c = descriptor */
    TR_PREEMPT,     /* the running thread is preempted (its TR_YIELD follows): a = id */
    TR_MIGRATE,     /* the running thread moves to another cluster: a = id, b = cluster */
    TR_STEAL,       /* threads taken from another worker: a = how many, b = victim's track */
    TR_POLL,        /* the poller reported descriptors ready: a = events, b = 1 if it slept */
    TR_BLOCK_BEGIN, /* a fern_blocking job starts on a helper: a = caller id, b = fn, c = tid */
    TR_BLOCK_END,   /* ... and ends: a = caller id, c = tid */
    TR_SPARE_START, /* the monitor started a compensation worker: a = stuck track, b = spare track, c = rescue */
    TR_SPARE_END,   /* a compensation worker found nothing to do and ended: a = its track */
    TR_RESCUE,      /* the monitor moved threads off a worker asleep in the kernel: a = track, b = how many */
    TR_HIBERNATE,   /* the monitor hibernated a batch of parked threads' stacks: a = how many, b = heap bytes */
    TR_RESTORE,     /* hibernated stacks restored for a resume or a wake-up (a touch: trace_touch): a = how many, b = first thread's id */
    TR_TYPES
};
enum { TRW_HANDOFF = 1, TRW_TAIL = 2, TRW_TIMER = 4, TRW_POLL = 8, TRW_REMOTE = 16 };

#define TRACE_TS_BITS 56
#define TRACE_TS_MASK ((UINT64_C(1) << TRACE_TS_BITS) - 1)

struct trace_ev {
    uint64_t w0; /* type << 56 | clock ticks since the session began */
    uint64_t a, b, c;
};

struct trace_buf {
    uint64_t head;     /* events ever written (owner; release) */
    uint64_t dropped;  /* events lost to a full buffer (owner; relaxed) */
    uint32_t mask;     /* slots - 1, slots a power of two */
    uint32_t track;    /* its track in the trace: 0 outside fern, else 1 + a worker's number */
    uint8_t ring;      /* flight recorder: overwrite, never drained */
    uint32_t flow_seq; /* flows started here (owner) */
    uint32_t lock;     /* the shared buffer's writers' spin lock (track 0) */
    uint32_t session;  /* the session it was last set up for (trace.c) */
    int32_t tid;       /* its worker's kernel thread, the track's tid in the trace */
    char label[40];    /* the track's name */
    uint64_t tail __attribute__((aligned(64))); /* events consumed (drainer; release) */
    struct trace_ev ev[] __attribute__((aligned(64)));
};

/* Nonzero while a session records (trace.c). Read relaxed at every event
 * point: TRACE() below costs a load and a branch when tracing is off. Half
 * of fern_slow (base/slow.h), which the wake path tests instead. */
#define trace_on (fern_slow.trace)
/* The session's clock: the cycle counter when arch_cycles() has a constant
 * rate here (trace.c decides at start), else fern_now_ns; `trace_t0` is its
 * value when the session began. */
extern uint8_t trace_tsc __attribute__((visibility("hidden")));
extern uint64_t trace_t0 __attribute__((visibility("hidden")));
/* The running session's number (trace.c): a buffer set up for another one
 * is set up again by its owner before it records. */
extern uint32_t trace_session __attribute__((visibility("hidden")));

#if defined(ARCH_JUMP_IF_SET) && !defined(FERN_TSAN)
/* Two instructions, and the call's stack frame, if it needs one, only on
 * the cold path (GCC shrink-wraps it there). */
#if defined(__clang__)
#define TRACE_COLD_
#else
#define TRACE_COLD_ __attribute__((cold))
#endif
#define TRACE(call)                               \
    do {                                          \
        __label__ trace_on_, trace_off_;          \
        ARCH_JUMP_IF_SET(trace_on, trace_on_);    \
        goto trace_off_;                          \
    trace_on_: TRACE_COLD_;                       \
        call;                                     \
    trace_off_:;                                  \
    } while (0)
#else
#define TRACE(call)                               \
    do {                                          \
        if (unlikely(LOAD_RELAXED(&trace_on)))    \
            call;                                 \
    } while (0)
#endif

static inline uint64_t trace_clock(void)
{
    uint64_t now = LOAD_RELAXED(&trace_tsc) ? arch_cycles() : (uint64_t)fern_now_ns();
    return (now - LOAD_RELAXED(&trace_t0)) & TRACE_TS_MASK;
}

/* A flow id unique within the session (for 1 M flows per buffer; a viewer
 * pairs an id's start with its next end, so reuse after that is harmless):
 * the buffer's track in the top 8 bits, TRACE_FLOW_SPAWN set by a spawn,
 * a wake-up's kind (TRACE_FLOW_KIND) below it, so both ends of the arrow
 * can be named after it. */
#define TRACE_FLOW_SPAWN 0x800000u
#define TRACE_FLOW_KIND(k) ((uint32_t)(k) << 20)
static inline uint32_t trace_flow_new(struct trace_buf *b)
{
    b->flow_seq = (b->flow_seq + 1) & 0xfffff;
    if (!b->flow_seq)
        b->flow_seq = 1;
    return (LOAD_RELAXED(&b->track) & 0xff) << 24 | b->flow_seq;
}

/* Record one event at time ts into the owner's buffer b. */
static inline void trace_put(struct trace_buf *b, uint64_t ts, unsigned type, uint64_t a,
                             uint64_t x, uint64_t c)
{
    uint64_t h = LOAD_RELAXED(&b->head);
    if (!b->ring && h - LOAD(&b->tail) > b->mask) {
        STORE_RELAXED(&b->dropped, LOAD_RELAXED(&b->dropped) + 1);
        return;
    }
    struct trace_ev *e = &b->ev[h & b->mask];
    STORE_RELAXED(&e->w0, (uint64_t)type << TRACE_TS_BITS | ts);
    STORE_RELAXED(&e->a, a);
    STORE_RELAXED(&e->b, x);
    STORE_RELAXED(&e->c, c);
    STORE(&b->head, h + 1);
}

#endif
