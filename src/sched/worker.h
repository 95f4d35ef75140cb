/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's data model: who owns what.
 *
 *  runtime   one per process (rt): the clusters, stack slabs, descriptor chunks.
 *  cluster   a set of workers sharing one scheduler: an inbox (multi-producer
 *            FIFO under a spin lock) and a list of idle workers.
 *  worker    one kernel thread. Owns a local run queue (ring: owner pushes at
 *            the tail with a plain store, owner and thieves take from the head
 *            with a CAS), a private hand-off slot `next`, a timer heap, caches
 *            of stacks and descriptors, and its idle context `g0` (the kernel
 *            thread's own stack) that runs the idle loop.
 *  thread    a green thread: descriptor (struct fern_thread, desc.h) from a
 *            chunk allocator (thread/), stack bound at first run (stack/).
 *  waiter    one blocked party (green thread or OS thread) on one wait queue
 *            or timer; woken exactly once by a CAS on its state (sync/wait.h).
 *
 * struct worker is the scheduler's core (the running thread, the hand-off
 * slot, the ring, the after action, the caches, the counters) plus one part
 * per concept that keeps state on each worker, each defined beside its
 * concept: struct worker_idle and worker_trim (idle.h), worker_steal and
 * worker_watch (steal.h), worker_mon and worker_preempt (watch/parts.h, a
 * leaf header of types only, so that sched/ need not include watch/). Everything a debugger
 * reads of these structs is exported by debug/debugmap.c.
 */
#ifndef FERN_SCHED_WORKER_H
#define FERN_SCHED_WORKER_H

#include "base/base.h"
#include "base/config.h"
#include "base/trace.h"
#include "sched/desc.h"
#include "sched/idle.h"
#include "sched/steal.h"
#include "sched/timer.h"
#include "stack/stack.h"
#include "watch/parts.h"

#define RUNQ_SIZE 4096u
#define NEXT_STREAK_MAX 32u
#define SOON_STREAK_MAX 8u
enum { WAKE_DIRECT = 0, WAKE_TIMER = 1, WAKE_POLL = 2 };

typedef void (*after_fn)(struct worker *w, fern_thread *prev, void *arg);

/* A FIFO of runnable threads linked through t->link, under a spin lock (a
 * cluster's inbox, a worker's pinned list). n is also read without the
 * lock, relaxed, as a hint: tqueue_len. */
struct tqueue {
    uint32_t lock;
    uint32_t n;
    fern_thread *head, *tail;
};
static inline uint32_t tqueue_len(struct tqueue *q) { return LOAD_RELAXED(&q->n); }

/* A cluster's inbox (inbox.c): a FIFO of runnable threads under a spin
 * lock, kept as an array of pointers used as a ring (a power of two in
 * size, allocated by the first push, doubled when full, freed when it
 * drains if it grew large), so a worker taking a batch copies pointers
 * rather than walking descriptors another core wrote, one dependent miss
 * each. If the array cannot grow (no memory), threads queue behind its
 * contents on a list linked through t->link. n (array + list) is also read
 * without the lock, relaxed, as a hint: inbox_len. */
struct inbox {
    uint32_t lock;
    uint32_t n;
    uint32_t head;              /* array index of the oldest thread */
    uint32_t cnt;               /* threads in the array */
    uint32_t cap;               /* array size, a power of two */
    fern_thread **slot;
    fern_thread *lhead, *ltail; /* overflow list, after the array's threads */
};
static inline uint32_t inbox_len(struct inbox *q) { return LOAD_RELAXED(&q->n); }

struct worker {
    /* hot, owner-written */
    fern_thread *cur;           /* running thread, or &g0 */
    fern_thread *next;          /* hand-off slot (exchange; stolen only when stuck) */
    fern_thread *start;         /* a new thread g0 is to start (bind, switch) */
    uint32_t next_streak;
    uint32_t tick;
    after_fn after;
    fern_thread *after_prev;
    void *after_arg;
    struct fern_cluster *cluster;
    unsigned index;
    bool alone;                 /* its cluster's only worker: no thief ever
                                 * touches `next`, plain loads and stores do */
    uint32_t ring_busy;         /* alone: the owner is in a section that takes
                                 * from rq without a CAS (runq.h: ring_enter) */
    uint32_t ring_shared;       /* set by the monitor while something else may
                                 * take from rq; always set if not alone */
    uint32_t bias_tag;          /* its objects' bias_ value (slot id << 2), 0
                                 * if it owns no bias slot (see sync/bias.c) */
    uint32_t *bias_busy;        /* bias_busy(bias_tag), kept: deriving it on
                                 * each operation made the condvar
                                 * producer/consumer 2.5 ns slower */
    struct tqueue soon;         /* woken by a timer or poll here: run before
                                 * the ring (sched.h's opening, `soon`) */
    uint32_t soon_streak;       /* threads taken from `soon` in a row */
    uint32_t help_next;         /* whose timers timers_help looks at next */
    uint8_t wake_from;          /* WAKE_TIMER while firing timers, WAKE_POLL
                                 * while dispatching events: where a thread
                                 * readied now goes (sched_ready) */
    /* run queue: head taken by CAS (owner and thieves), tail owner-only */
    uint32_t rq_head __attribute__((aligned(64)));
    uint32_t rq_tail;
    fern_thread *rq[RUNQ_SIZE];
    struct timer_heap timers;
    struct worker_idle idle;    /* idle.c: the idle protocol */
    fern_thread g0;             /* the kernel thread's own context */
    uintptr_t *eh;              /* this kernel thread's C++ exception globals, or NULL */
    int *errno_loc;             /* this kernel thread's errno */
    pthread_t os;
    int32_t tid;                /* its kernel thread id, for debuggers */
    void *altstack;
    uint64_t id_next, id_end;
    fern_thread *free_threads;  /* descriptor cache */
    uint32_t nfree_threads;
    struct stack_cache stacks[STACK_CLASSES];
    /* counters, written by the owner, read relaxed by fern_stats */
    uint64_t n_switches, n_steals, n_sleeps;
    uint32_t n_handoffs;        /* hand-offs into `next`, read by a watcher
                                 * (steal.c, WATCH_NAP_NS) as n_switches is */
    struct worker_steal steal;  /* steal.c: stealing threads that never ran */
    struct worker_trim trim;    /* idle.c: trimming pooled stacks */
    struct worker_watch watch;  /* steal.c: what it last saw of the others */
    uint64_t n_migrations;          /* fern_migrate calls that moved, from here */
    uint64_t n_spawned, n_exited;   /* threads spawned / ended on this worker */
    uint64_t n_bound, n_unbound;    /* stacks bound / released here */
    int64_t live_delta;             /* cluster's threads gained here (see cluster_live) */
    int64_t mutex_parked_delta;     /* green threads parked in fern_mutex_lock without a
                                     * deadline, counted where they park and resume */
    uint64_t n_preempts, n_preempts_deferred; /* watch/preempt.c, written in the handler */
    struct worker_mon mon;      /* watch/monitor.c: the monitor's view */
    struct worker_preempt preempt; /* watch/preempt.c: the CPU-time tick */
    /* threads preempted here, resumed here (not stealable); rescue_worker
     * moves them only when the worker is stuck (see watch/monitor.c) */
    struct tqueue pinned;
    /* a compensation worker (watch/monitor.c): SPARE_* state, 0 for base workers */
    uint32_t spare;
    struct trace_buf *trace;    /* debug/trace.c: its event buffer, once a
                                 * session has run (kept until shutdown) */
#ifdef FERN_ASAN
    const void *g0_lo;          /* the kernel thread's stack, for ASan switches */
    size_t g0_size;
#endif
};

struct fern_cluster {
    /* The first line is what an inbox push touches: the inbox, live_ext
     * (a migration adds to it under the inbox's lock) and nidle. */
    struct inbox inbox;
    int64_t live_ext;           /* threads gained from outside its workers */
    uint32_t idle_lock;
    uint32_t nidle;
    uint32_t nspinning;         /* idle workers spinning before they sleep */
    uint32_t stopping;
    uint32_t wakers;            /* inbox pushes still inside cluster_wake */
    unsigned nworkers;          /* base workers + compensation slots in use;
                                 * grows (release) up to nbase + SPARES_MAX
                                 * + RESCUE_SPARES_MAX */
    unsigned nbase;             /* workers asked for */
    uint32_t stuck;             /* the monitor saw a stuck worker at its last tick */
    uint32_t watching;          /* an idle worker naps watching hand-offs
                                 * (steal.c: WATCH_NAP_NS) */
    struct fern_cluster *next_cluster;
    struct worker *workers[];   /* nworkers pointers */
} __attribute__((aligned(64)));
_Static_assert(offsetof(struct fern_cluster, nidle) + sizeof(uint32_t) <= 64,
               "an inbox push touches one line of its cluster");


struct runtime {
    struct plock boot_lock;
    uint32_t running;
    struct fern_cluster *dflt;
    struct fern_cluster *clusters;   /* list, under boot_lock */
    int default_cls;            /* stack class of the default stack size */
    const char *started_by;     /* the call that started it implicitly, or NULL */
    uint64_t next_id;
    uint64_t spawned_ext;       /* spawned from plain threads / other clusters */
    /* counters of workers that were stopped (under boot_lock); migrations
     * is never reset: fern_stats counts them since the process started */
    uint64_t retired_spawned, retired_exited, retired_bound, retired_unbound;
    uint64_t migrations;
    /* descriptor chunks */
    uint32_t chunk_lock;
    struct thread_chunk *chunks;
    fern_thread *free_threads;
    uint32_t nclusters, nworkers;
    uint32_t run_waiters;       /* plain threads waiting in fern_run (watch/deadlock.c) */
};
extern struct runtime rt;

/* TLS re-read after every switch (invariant 4, docs/design.md): a green thread can resume on another kernel thread,
 * and a compiler may keep the thread pointer (or a TLS address derived from
 * it) in a register across a call, such as a context switch. So every read
 * of worker-local state goes through worker_self(), which reads the TLS slot
 * with a volatile asm: it is re-executed at each use (never merged with an
 * earlier read), and its memory clobber keeps it from moving across a
 * switch. A few instructions, inlined (arch.h). */
extern __thread struct worker *fern_tls_worker_
    __attribute__((tls_model("initial-exec"), visibility("hidden")));
static inline struct worker *worker_self(void) { return ARCH_TLS_LOAD(fern_tls_worker_); }
/* A stack of class cls is in w's cache (binding it is cheap: no fault). */
static inline bool stack_ready(struct worker *w, int cls)
{
    return w->stacks[cls].nhot || w->stacks[cls].cold;
}
/* The calling thread's identity for mutex ownership: its fern_thread, or a
 * per-OS-thread token for plain threads. */
static inline fern_thread *thread_current(void)
{
    struct worker *w = worker_self();
    return w && w->cur != &w->g0 ? w->cur : NULL;
}

#endif
