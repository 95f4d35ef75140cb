/* SPDX-License-Identifier: MIT */
/*
 * The green thread's descriptor (struct fern_thread): what a switch, a
 * queue, a waiter and fern_dump read of a thread. Allocated by thread/
 * (thread/thread.c, in chunks), run by sched/.
 */
#ifndef FERN_SCHED_DESC_H
#define FERN_SCHED_DESC_H

#include "base/base.h"
#include "sched/parker.h"

struct stack;
struct waiter;
struct keyval;
struct rdheld;

/* For fern_dump, and for hibernation (sched/hibernate.c), which takes only
 * T_PARKED threads: a parking thread stays T_RUNNING until the wait's
 * after-switch action (sync/wait.c), which runs once its registers are saved
 * (invariant 1), stores T_PARKED with release order. */
enum tstate {
    T_NEW = 0, T_RUNNABLE, T_RUNNING, T_PARKED, T_EXITING,
};
enum tlife {             /* lifecycle flags, under tlock */
    L_DETACHED = 1, L_EXITED = 2, L_JOINING = 4,
};
enum { A_FREE = 0, A_LIVE = 1 };

/* 256 bytes in a release build (the sanitizers' fields make it more), on a
 * 64-byte boundary: four cache lines of its own (a descriptor spawned on
 * one worker often runs and exits on another; two descriptors sharing a
 * line made every such thread pull its neighbour's line across cores too).
 * Fields are grouped by the paths that touch them: the first line is the
 * switch's and the wake-up's, the second a thread's start, exit and join
 * and its waits' notes, the rest its cancellable waits' parker and what
 * only slow paths read. */
struct fern_thread {
    /* The first cache line holds what a switch, a wake-up and a queue
     * touch, so a thread resumed on another core (a migration, a steal, a
     * wake-up from elsewhere) costs one descriptor line in, not two. */
    void *sp;                   /* saved stack pointer (NULL: not started) */
    struct stack *stack;
    struct fern_cluster *cluster;
    fern_thread *link;          /* inbox / free list link */
    uintptr_t eh[2];            /* the C++ runtime's caught-exception state */
    int saved_errno;
    uint8_t alloc;              /* A_FREE / A_LIVE */
    uint8_t wait_timed;         /* the park has a deadline (watch/deadlock.c) */
    union {
        struct {
            uint8_t cshield;    /* fern_cancel_shield: nonzero while its waits
                                 * cannot be cancelled (the thread's own) */
            uint8_t cfence;     /* its waits order their start against a
                                 * canceller with a fence, not membarrier
                                 * (set for good when its chunk is made:
                                 * thread/cancel.c) */
        };
        uint16_t cslow;         /* either: a wait starts out of line (one
                                 * test on the fast path for both) */
    };
    /* Spawn sets these eight bytes with one store (lifeword). */
    union {
        uint64_t lifeword;
        struct {
            uint8_t life;       /* enum tlife, under tlock */
            uint8_t rescued;    /* taken from a worker asleep in the kernel: not
                                 * preempted until it next leaves the CPU
                                 * (rescue_worker, watch/preempt.c) */
            uint8_t creq;       /* fern_cancel was called: sticky (sync/wait.h) */
            uint8_t hib_at;     /* when the monitor saw it parked (hibernate.c) */
            uint8_t hib;        /* hibernation state, H_* (sched/hibernate.h) */
            uint8_t hib_no;     /* why it must not hibernate, HN_* bits */
            uint8_t run_state;  /* enum tstate, relaxed, for fern_dump */
            uint8_t stack_cls;
        };
    };
    /* Start, exit, join; what a park notes. */
    fern_fn fn;
    union {
        void *arg;              /* until it starts (thread_entry reads it) */
        void *result;           /* once it has returned */
    };
    struct waiter *joiner;
    const char *wait_what;      /* what it is parked on, for fern_dump */
    const void *wait_obj;
    uint64_t id;
    uint32_t tlock;
    uint32_t trace_flow;        /* debug/trace.c: the flow its waker (or spawner)
                                 * started, ended by its next run; 0 none */
    int64_t slice_carry;        /* watch/preempt.c: CPU time of its slice it had used
                                 * when a woken thread preempted it (its slice
                                 * goes on when it resumes), 0 otherwise */
    struct parker cpark;        /* the parker of its cancellable waits
                                 * (sync/wait.h, thread/cancel.c) */
    uint64_t rescued_sw;        /* the worker's n_switches while it so runs */
    struct keyval *keys;
    struct rdheld *rdheld;      /* read locks held (fern_rwlock), lazily allocated */
    char name[32];
#ifdef FERN_ASAN
    void *asan_fake;
#endif
#ifdef FERN_TSAN
    void *tsan_fiber;
    void *tsan_other;           /* fern-hook's second fiber (thread/thread.c), or NULL */
    uint32_t tsan_hook_depth;
#endif
} __attribute__((aligned(64)));
_Static_assert(offsetof(struct fern_thread, fn) == 64, "a switch's fields fill the first line");
_Static_assert(offsetof(struct fern_thread, cpark) == 128, "start, exit and join fill the second");
#if !defined(FERN_ASAN) && !defined(FERN_TSAN)
_Static_assert(sizeof(struct fern_thread) == 256, "four cache lines");
#endif
/* spawn's lifeword store (thread/thread.c), little-endian. */
#define LW_LIFE(v) ((uint64_t)(v))
#define LW_HIB_NO(v) ((uint64_t)(v) << 40)
#define LW_STACK_CLS(v) ((uint64_t)(v) << 56)
_Static_assert(offsetof(struct fern_thread, hib_no) == offsetof(struct fern_thread, lifeword) + 5 &&
                   offsetof(struct fern_thread, stack_cls) ==
                       offsetof(struct fern_thread, lifeword) + 7,
               "LW_* match the lifeword's bytes");

/* Descriptors are allocated in chunks that live until shutdown; the list
 * of chunks (rt.chunks) is the registry of all threads (see debug/debugmap.c). */
#define THREAD_CHUNK 256u
struct thread_chunk {
    struct thread_chunk *next;
    fern_thread t[THREAD_CHUNK];
};

#endif
