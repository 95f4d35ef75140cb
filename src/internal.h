/* SPDX-License-Identifier: MIT */
/*
 * Internal model of fern: who owns what.
 *
 *  runtime   one per process (rt): the clusters, stack slabs, descriptor chunks.
 *  cluster   a set of workers sharing one scheduler: an inbox (multi-producer
 *            FIFO under a spin lock) and a list of idle workers.
 *  worker    one kernel thread. Owns a local run queue (ring: owner pushes at
 *            the tail with a plain store, owner and thieves take from the head
 *            with a CAS), a private hand-off slot `next`, a timer heap, caches
 *            of stacks and descriptors, and its idle context `g0` (the kernel
 *            thread's own stack) that runs the idle loop.
 *  thread    a green thread: descriptor (struct fern_thread) from a chunk
 *            allocator, stack bound at first run.
 *  waiter    one blocked party (green thread or OS thread) on one wait queue
 *            or timer; woken exactly once by a CAS on its state.
 *
 * Park after save (DESIGN invariant 1): a thread never makes itself visible
 * to other workers before its registers are saved. It names an "after"
 * action and switches; the next context on the same worker runs the action
 * (run_after) before anything else.
 *
 * All atomics are GCC __atomic builtins on plain fields, because the public
 * structs (fern_mutex, fern_cond) must be plain C usable from C++.
 */
#ifndef FERN_INTERNAL_H
#define FERN_INTERNAL_H

#pragma GCC visibility push(default)
#include <fern/fern.h>
#pragma GCC visibility pop

#include <errno.h>
#include <link.h> /* ElfW */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arch/arch.h"

#if defined(__SANITIZE_ADDRESS__)
#define FERN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FERN_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FERN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERN_TSAN 1
#endif
#endif

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define STORE_RELAXED(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define ADD_RELAXED(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define CAS(p, expp, v) \
    __atomic_compare_exchange_n((p), (expp), (v), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)

struct worker;
struct fern_cluster;
struct stack;

/* ---- spin lock: short critical sections only (queue links, heap) ---- */
/* One round of waiting for another kernel thread: pause, and after a while
 * yield the CPU (the thread waited for may have been preempted). */
void spin_backoff(unsigned *spins);
void spin_lock_slow(uint32_t *l);
/* One attempt, for fast paths that go a slow way (spin_lock) if it fails. */
static inline bool spin_trylock(uint32_t *l) { return !__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE); }
static inline void spin_lock(uint32_t *l)
{
    if (likely(spin_trylock(l)))
        return;
    spin_lock_slow(l);
}
static inline void spin_unlock(uint32_t *l) { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }

/* ---- biased objects (bias.c): see the header comment there ---- */
#define BIAS_NONE 0u
#define BIAS_SHARED 1u
#define BIAS_REVOKING 2u
#define BIAS_SLOTS 64u
struct bias_slot {
    uint32_t busy; /* the owner is inside a plain-mode operation */
} __attribute__((aligned(64)));
extern struct bias_slot bias_slots[BIAS_SLOTS] __attribute__((visibility("hidden")));
/* The busy flag of the slot whose objects carry `tag`. */
static inline uint32_t *bias_busy(uint32_t tag) { return &bias_slots[tag >> 2].busy; }

/* A slot for a one-worker cluster's worker (0: none, biasing is off or all
 * slots are taken); give it back once the worker has stopped. */
uint32_t bias_slot_take(void);
void bias_slot_give(uint32_t id);
/* Settle *bias for a caller whose own objects carry `tag` (0 if it can own
 * none): claim an untouched object, or make it shared, revoking another
 * worker's bias. The caller's busy must be clear and it must hold no spin
 * lock. Returns once *bias is tag (nonzero) or BIAS_SHARED. */
void bias_settle(uint32_t *bias, uint32_t tag);
uint64_t bias_revocations(void);
/* The heavy side of an asymmetric Dekker handshake (bias.c explains it;
 * sched.c's one-worker rings use it too): membarrier_ready() registers the
 * process for membarrier(PRIVATE_EXPEDITED) and says whether that worked;
 * membarrier_all() then runs a full barrier on every thread of the process. */
bool membarrier_ready(void);
void membarrier_all(void);

/* ---- futex ---- */
int futex_wait(uint32_t *addr, uint32_t expect, int64_t deadline_ns);
void futex_wake(uint32_t *addr, int n);

/* ---- timers (timer.c): per-worker min-heap, fired by the owner ---- */
struct timer {
    int64_t deadline;
    int32_t index;           /* in the heap, -1 when not queued */
    struct worker *owner;    /* heap it sits in */
    void (*fire)(struct timer *);
};
struct timer_heap {
    uint32_t lock;
    uint32_t n, cap;
    struct timer **v;
    int64_t due;    /* the earliest deadline, 0 if none: stored under the
                     * lock, read relaxed by other workers (timers_help) */
};
void timer_add(struct worker *w, struct timer *t);
void timer_cancel(struct timer *t);
/* Fire expired timers; returns how many fired. */
int timers_run(struct worker *w, int64_t now);
/* Earliest deadline, FERN_FOREVER if none. */
int64_t timers_next(struct worker *w);
void timers_free(struct worker *w);

/* ---- waiters (wait.c) ---- */
enum { W_WAITING = 0, W_CLAIMED = 1, W_WOKEN = 2, W_TIMEDOUT = 3 };

/* One blocked party: a green thread (parked) or an OS thread (futex on
 * `state`). Its state leaves W_WAITING exactly once: to W_TIMEDOUT by its
 * timer, or to W_CLAIMED by a waker, who then fills in result/index (and the
 * waiter's data) and publishes W_WOKEN. */
struct parker {
    uint32_t state;
    int32_t result;          /* set by the waker: 0 or an errno value */
    int32_t index;           /* which waiter won (select case) */
    uint8_t solo;            /* one waiter, no deadline: only a waiter holding
                              * the queue's lock (or the one waker of a join
                              * or a blocking job) can claim it, so the claim
                              * needs no CAS */
    fern_thread *thread;     /* NULL: an OS thread blocked on the futex */
    void (*unlock)(void *);  /* run once the thread is parked */
    void *unlock_arg;
    struct timer timer;
};

/* One place a parker waits: an entry on one wait queue. A select has one
 * waiter per case, all sharing one parker. */
struct waiter {
    struct parker *p;
    struct waiter *next, *prev;
    fern_waitq *q;           /* queue it is linked in; NULL once unlinked */
    void *data;              /* the element to send / where to receive */
    void *token;             /* the waiting thread's identity (mutex owner) */
    int64_t since;           /* when it first queued (mutex fairness) */
    int32_t index;
    uint8_t heir;            /* a condition waiter moved onto a mutex's queue
                              * by a broadcast and claimed, waiting to be
                              * handed the mutex (a spliced one, see sync.c,
                              * is flagged and claimed when it is taken) */
    struct parker own;       /* the parker, unless one is shared */
};

static inline void parker_init(struct parker *p)
{
    p->state = W_WAITING;
    p->result = 0;
    p->index = 0;
    p->solo = 0;
    p->thread = NULL;
    p->unlock = NULL;
    p->timer.index = -1;
    p->timer.owner = NULL;
}

/* Field by field, not memset: this is on every blocking path. */
static inline void waiter_init(struct waiter *wt)
{
    wt->p = &wt->own;
    wt->next = wt->prev = NULL;
    wt->q = NULL;
    wt->data = NULL;
    wt->token = NULL;
    wt->since = 0;
    wt->index = 0;
    wt->heir = 0;
    parker_init(&wt->own);
}
/* Wait: the caller holds the queue locks and has queued its waiters; they are
 * released by unlock(arg) once the caller is parked. Returns W_WOKEN or
 * W_TIMEDOUT. A timed-out waiter is still linked (nobody but its own thread
 * unlinks a waiter it did not win): the caller unlinks it under the queue's
 * lock. A woken one was unlinked by its waker. */
int parker_wait(struct parker *p, void (*unlock)(void *), void *arg, int64_t deadline);
/* parker_wait for a single waiter under one spin lock (or NULL). */
int waiter_wait(struct waiter *wt, uint32_t *lock, int64_t deadline);
/* Take the waiter's parker: true if this call won it (it is then W_CLAIMED
 * and must be finished with waiter_release). */
static inline bool waiter_claim(struct waiter *wt)
{
    struct parker *p = wt->p;
    if (p->solo) {
        STORE_RELAXED(&p->state, W_CLAIMED);
    } else {
        uint32_t expect = W_WAITING;
        if (!CAS(&p->state, &expect, W_CLAIMED))
            return false;
    }
    p->index = wt->index;
    return true;
}
void waiter_release(struct waiter *wt, int result);
void sched_ready(fern_thread *t);      /* sched.c, see below */
void sched_ready_tail(fern_thread *t);
/* waiter_release's body, inlined where a wake-up is on the fast path;
 * `tail` as in waiter_wake_tail. */
static inline __attribute__((always_inline)) void waiter_release_inline(struct waiter *wt, int result,
                                                                       bool tail)
{
    struct parker *p = wt->p;
    fern_thread *t = p->thread;
    p->result = result;
    STORE(&p->state, W_WOKEN);
    if (!t)
        futex_wake(&p->state, 1); /* p may be gone already: futex_wake on a stale address is harmless */
    else if (tail)
        sched_ready_tail(t);
    else
        sched_ready(t);
}
/* claim + release(0). */
bool waiter_wake(struct waiter *wt);
/* waiter_wake, but a green thread goes behind the threads already queued on
 * the waking worker, not into its hand-off slot (sched_ready_tail). */
bool waiter_wake_tail(struct waiter *wt);

static inline void waitq_push(fern_waitq *q, struct waiter *wt)
{
    struct waiter *tail = q->tail;
    wt->next = NULL;
    wt->prev = tail;
    wt->q = q;
    if (tail)
        tail->next = wt;
    else
        q->head = wt;
    q->tail = wt;
}
void waitq_push_front(fern_waitq *q, struct waiter *wt);
void waitq_unlink(struct waiter *wt);
/* waitq_unlink for a waiter linked in q whatever its q field says (one a
 * broadcast spliced onto a mutex's queue, sync.c). */
void waitq_unlink_in(fern_waitq *q, struct waiter *wt);
/* Claim and unlink the first waiter that can still be won; returns it
 * (W_CLAIMED, to be released by the caller) or NULL. Waiters that cannot be
 * won are left linked for their own threads to unlink (see wait.c). */
struct waiter *waitq_claim_one_slow(fern_waitq *q);
/* waitq_claim_one when q's head is wt, a solo waiter: unlink it and win it
 * outright. */
static inline struct waiter *waitq_claim_solo(fern_waitq *q, struct waiter *wt)
{
    struct waiter *n = wt->next;
    q->head = n;
    if (n)
        n->prev = NULL;
    else
        q->tail = NULL;
    wt->q = NULL;
    wt->next = NULL;
    STORE_RELAXED(&wt->p->state, W_CLAIMED);
    wt->p->index = wt->index;
    return wt;
}
static inline struct waiter *waitq_claim_one(fern_waitq *q)
{
    struct waiter *wt = q->head;
    if (!wt)
        return NULL;
    if (!wt->p->solo)
        return waitq_claim_one_slow(q);
    return waitq_claim_solo(q, wt);
}
/* Claim (and unlink) every waiter that can still be won, chained through
 * ->next; the others stay linked. Wakers
 * claim under the queue's lock and release after dropping it: a woken
 * thread may destroy the object holding the queue (and its lock) as soon as
 * it runs, so nothing may touch the object after the first release. */
struct waiter *waitq_claim_all(fern_waitq *q);
/* Release a chain from waitq_claim_all (or built by hand) with `result`;
 * returns how many. */
int waiters_release(struct waiter *chain, int result);
static inline bool waitq_empty(const fern_waitq *q) { return q->head == NULL; }
/* Under q's lock, for *_destroy (the destroy rule, wait.c): WQ_BLOCKED if a
 * linked waiter still waits, else WQ_LEAVING if waiters that are leaving
 * (timed out, or their select fired elsewhere) are linked, else WQ_IDLE. */
enum { WQ_IDLE, WQ_LEAVING, WQ_BLOCKED };
int waitq_state(const fern_waitq *q);
/* One round of a destroy's wait for leaving threads; *n counts the rounds
 * (start at 0). The caller holds no lock and has ended its operation. */
void destroy_backoff(unsigned *n);

/* ---- configuration (config.c): see docs/configuration.md ---- */
enum { CONFIG_GUARD_AUTO, CONFIG_GUARD_MADVISE, CONFIG_GUARD_MPROTECT, CONFIG_GUARD_CANARY };
#define CONFIG_BLOCKING_DEFAULT 64u
#define CONFIG_GUARD_BUDGET_DEFAULT 12000u
struct config {
    unsigned workers;          /* of the default cluster */
    size_t stack_size;         /* default stack size */
    bool bias;                 /* $FERN_BIAS */
    unsigned blocking_max;     /* $FERN_BLOCKING_MAX */
    int guard;                 /* $FERN_GUARD: CONFIG_GUARD_* */
    uint32_t guard_budget;     /* $FERN_GUARD_BUDGET */
    int dump_signal;           /* $FERN_DUMP_SIGNAL: the signal, 0 for none */
    bool dump_signal_set;      /* $FERN_DUMP_SIGNAL given (not the default) */
    bool preempt;              /* fern_config.preempt_us, $FERN_PREEMPT */
    int64_t slice_ns;          /* the time slice, also with preemption off */
    int preempt_signal;        /* $FERN_PREEMPT_SIGNAL */
    char preempt_libs[1024];   /* fern_config.preempt_libs, $FERN_PREEMPT_LIBS: checked */
    int deadlock;              /* $FERN_DEADLOCK: CONFIG_DEADLOCK_* */
};
/* FERN_DEADLOCK's values, in its accepted order (deadlock.c). */
enum { CONFIG_DEADLOCK_REPORT, CONFIG_DEADLOCK_FATAL, CONFIG_DEADLOCK_OFF };
extern struct config config;
/* Check cfg and the environment; fill *out, or print one line on stderr
 * naming the bad setting and return EINVAL. */
int config_load(const fern_config *cfg, struct config *out);
/* FERN_DUMP_SIGNAL's syntax (crash.c): the signal, 0 for none, -1 invalid. */
int crash_signal_parse(const char *s);
/* Start the runtime with the defaults unless it runs (the implicit start of
 * fern_spawn, fern_run, fern_cluster_create and the I/O calls; `by` names the
 * call for fern_init's message). Returns 0 or fern_init's error. */
int runtime_start(const char *by);

/* ---- stacks (stack.c) ---- */
/* Header kept in the top bytes of the stack's own memory (that page is
 * touched by every thread anyway, so the header costs no page of its own). */
struct stack {
    char *lo;                /* lowest usable byte (just above the guard) */
    size_t size;             /* usable bytes */
    struct stack *next;      /* cache list link */
    uint8_t cls;             /* size class */
    uint8_t guard;           /* fern_guard_mode */
    uint8_t dirty;           /* used since its last trim */
};
#define STACK_CANARY 0x5a17e57ac4a21e5aull
/* Canary mode: words spread over the stack's lowest page (an overflow that
 * skips the lowest word, as a big frame's sparse writes do, still hits one
 * of them), checked with the saved stack pointer at every switch-out. */
#define STACK_CANARY_WORDS 8
#define STACK_CANARY_STRIDE 512
static inline void stack_canary_set(struct stack *s)
{
    for (int i = 0; i < STACK_CANARY_WORDS; i++)
        *(uint64_t *)(s->lo + i * STACK_CANARY_STRIDE) = STACK_CANARY;
}
/* False if a canary word changed or sp (the thread's, as it switches out)
 * lies outside its stack. */
static inline bool stack_canary_intact(const struct stack *s, const void *sp)
{
    if ((const char *)sp < s->lo || (const char *)sp >= s->lo + s->size)
        return false;
    for (int i = 0; i < STACK_CANARY_WORDS; i++)
        if (*(const uint64_t *)(s->lo + i * STACK_CANARY_STRIDE) != STACK_CANARY)
            return false;
    return true;
}
#define STACK_CLASSES 17     /* 16 KiB .. 1 GiB, powers of two */
#define STACK_HOT 4          /* untrimmed stacks a worker keeps per class */
#define STACK_CACHE_MAX 256  /* stacks a worker keeps per class */
#define STACK_KEEP ((size_t)32 * 1024) /* bytes below the top never trimmed */

struct stack_cache {
    struct stack *hot[STACK_HOT]; /* LIFO (top = nhot - 1), untrimmed */
    struct stack *cold;      /* LIFO, trimmed or waiting for a trim */
    uint32_t nhot, ncold;
    uint32_t ndirty_cold;
};

int stack_class(size_t size, size_t *rounded);
struct stack *stack_get(struct worker *w, int cls);
void stack_put(struct worker *w, struct stack *s);
/* Trim a few cold stacks (idle path). Returns true if work remains. */
bool stack_trim_some(struct worker *w);
/* Whether stack_trim_some has anything to do (a hint, no lock). */
bool stack_trim_pending(struct worker *w);
void stack_cache_flush(struct worker *w);
int stack_init(void);
void stack_fini(void);
bool stack_in_guard(const struct stack *s, const void *addr);
void stack_stats(struct fern_stats *st);
extern int stack_starved;     /* a bind failed recently: spawn says EAGAIN */

/* ---- threads (thread.c) ---- */
enum tstate {            /* for fern_dump */
    T_NEW = 0, T_RUNNABLE, T_RUNNING, T_PARKED, T_EXITING,
};
enum tlife {             /* lifecycle flags, under tlock */
    L_DETACHED = 1, L_EXITED = 2, L_JOINING = 4,
};
enum { A_FREE = 0, A_LIVE = 1 };

/* 192 bytes in a release build, on a 64-byte boundary: three cache lines of
 * its own (a descriptor spawned on one worker often runs and exits on
 * another; two descriptors sharing a line made every such thread pull its
 * neighbour's line across cores too). */
struct fern_thread {
    /* The first cache line holds what a switch and a queue touch, so a
     * thread resumed on another core (a migration, a steal, a wake-up from
     * elsewhere) costs one descriptor line in, not two. */
    void *sp;                   /* saved stack pointer (NULL: not started) */
    struct stack *stack;
    struct fern_cluster *cluster;
    fern_thread *link;          /* inbox / free list link */
    int saved_errno;
    uint32_t tlock;
    uint32_t life;
    uint8_t alloc;              /* A_FREE / A_LIVE */
    uint8_t run_state;          /* enum tstate, relaxed, for fern_dump */
    uint8_t stack_cls;
    uint8_t rescued;            /* taken from a worker asleep in the kernel: not
                                 * preempted until it next leaves the CPU
                                 * (rescue_worker, preempt.c) */
    uintptr_t eh[2];            /* the C++ runtime's caught-exception state */
    fern_fn fn;
    void *arg;
    void *result;
    int64_t slice_carry;        /* preempt.c: CPU time of its slice it had used
                                 * when a woken thread preempted it (its slice
                                 * goes on when it resumes), 0 otherwise */
    uint64_t rescued_sw;        /* the worker's n_switches while it so runs */
    const char *wait_what;      /* what it is parked on, for fern_dump */
    const void *wait_obj;
    struct waiter *joiner;
    struct keyval *keys;
    struct rdheld *rdheld;      /* read locks held (fern_rwlock), lazily allocated */
    uint64_t id;
    char name[32];
    uint8_t wait_timed;         /* the park has a deadline (deadlock.c) */
#ifdef FERN_ASAN
    void *asan_fake;
#endif
#ifdef FERN_TSAN
    void *tsan_fiber;
    void *tsan_other;           /* fern-hook's second fiber (thread.c), or NULL */
    uint32_t tsan_hook_depth;
#endif
} __attribute__((aligned(64)));
_Static_assert(offsetof(struct fern_thread, fn) == 64, "a switch's fields fill the first line");

/* Descriptors are allocated in chunks that live until shutdown; the list
 * of chunks (rt.chunks) is the registry of all threads (see debugmap.c). */
#define THREAD_CHUNK 256u
struct thread_chunk {
    struct thread_chunk *next;
    fern_thread t[THREAD_CHUNK];
};

/* ---- scheduler (sched.c) ---- */
#define RUNQ_SIZE 4096u
#define NEXT_STREAK_MAX 32u
#define SOON_STREAK_MAX 8u
enum { WAKE_DIRECT = 0, WAKE_TIMER = 1, WAKE_POLL = 2 };
#define WATCH_MAX 64u /* other workers an idle worker watches (switch_age) */

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

/* A cluster's inbox (sched.c): a FIFO of runnable threads under a spin
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
                                 * from rq without a CAS (sched.c: ring_enter) */
    uint32_t ring_shared;       /* set by the monitor while something else may
                                 * take from rq; always set if not alone */
    uint32_t bias_tag;          /* its objects' bias_ value (slot id << 2), 0
                                 * if it owns no bias slot (see bias.c) */
    uint32_t *bias_busy;        /* bias_busy(bias_tag), kept: deriving it on
                                 * each operation made the condvar
                                 * producer/consumer 2.5 ns slower */
    struct tqueue soon;         /* woken by a timer or poll here: run before the
                                 * ring (sched.c's header, `soon`) */
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
    /* idle protocol */
    uint32_t sleep_word;        /* 1 while listed idle; waker stores 0 + wakes */
    uint32_t idle_listed;       /* under cluster->idle_lock */
    uint32_t in_epoll;          /* sleeping in epoll_wait as the poll owner */
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
                                 * (sched.c, WATCH_NAP_NS) as n_switches is */
    /* stealing threads that never ran (sched.c: STEAL_SHORT_NS) */
    int64_t steal_at;           /* when the last steal's threads were taken */
    uint32_t stolen_n;          /* how many, 0 once judged */
    uint64_t steal_exited;      /* n_exited then */
    int64_t steal_wait;         /* back-off between steals of fresh threads, 0: none */
    /* trimming pooled stacks (sched.c: TRIM_IDLE_NS) */
    int64_t trim_next;          /* no batch before this unless trim_idle */
    bool trim_idle;             /* slept TRIM_IDLE_NS unwoken, no work found since */
    /* what this worker, idle, last saw of worker i (index % WATCH_MAX):
     * its n_switches, and when it first saw that count (sched.c: switch_age) */
    uint64_t watch_sw[WATCH_MAX];
    int64_t watch_at[WATCH_MAX];
    uint32_t watch_ho[WATCH_MAX]; /* and its n_handoffs (handoffs_moved) */
    uint64_t n_migrations;          /* fern_migrate calls that moved, from here */
    uint64_t n_spawned, n_exited;   /* threads spawned / ended on this worker */
    uint64_t n_bound, n_unbound;    /* stacks bound / released here */
    int64_t live_delta;             /* cluster's threads gained here (see cluster_live) */
    int64_t mutex_parked_delta;     /* green threads parked in fern_mutex_lock without a
                                     * deadline, counted where they park and resume */
    uint64_t n_preempts, n_preempts_deferred; /* preempt.c, written in the handler */
    /* monitor (monitor.c): the worker clears mon_idle when it leaves its
     * sleep and then wakes the monitor if that sleeps; the monitor's own
     * view of the worker ("which switch, seen since when") is mon_*. */
    uint32_t mon_idle;
    uint64_t mon_switches;
    int64_t mon_since;
    int64_t mon_cpu;            /* the kernel thread's CPU time at mon_since */
    int64_t mon_req_cpu;        /* its CPU time at the first preemption request, or 0 */
    int64_t mon_asleep;         /* when the monitor first saw it asleep in the kernel
                                 * at this switch count, at every look since; 0 */
    /* preemption (preempt.c): a timer on this kernel thread's CPU clock
     * signals it every tick of CPU it uses; the handler keeps the running
     * thread's slice. Handler and owner only. */
    timer_t preempt_timer;
    bool preempt_timed;         /* preempt_timer exists */
    uint32_t pin_front;         /* the preempted thread's slice is not over:
                                 * it resumes first (sched_yield_pinned) */
    uint64_t slice_sw;          /* n_switches when the slice was stamped, or SLICE_NONE */
    int64_t slice_start;        /* CPU time at which the running slice began */
    int64_t slice_next;         /* CPU time of the last preemption: where the
                                 * next thread's slice begins, 0 if unknown */
    uint32_t preempt_nudged;    /* the monitor sent a tick (preempt_nudge) */
    uint64_t defer_sw;          /* n_switches of the handler's last deferral */
    uint32_t defer_n;           /* deferrals in a row at that switch count */
    int64_t defer_cpu0;         /* CPU time of the first of them */
    int64_t defer_cpu;          /* CPU time of the last of them */
    uint32_t preempt_soft;      /* ThreadSanitizer: yield at the next preempt_point */
    /* threads preempted here, resumed here (not stealable); rescue_worker
     * moves them only when the worker is stuck (see monitor.c) */
    struct tqueue pinned;
    /* a compensation worker (monitor.c): SPARE_* state, 0 for base workers */
    uint32_t spare;
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
                                 * (sched.c: WATCH_NAP_NS) */
    struct fern_cluster *next_cluster;
    struct worker *workers[];   /* nworkers pointers */
} __attribute__((aligned(64)));
_Static_assert(offsetof(struct fern_cluster, nidle) + sizeof(uint32_t) <= 64,
               "an inbox push touches one line of its cluster");

struct runtime {
    pthread_mutex_t boot_lock;
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
    uint32_t run_waiters;       /* plain threads waiting in fern_run (deadlock.c) */
};
extern struct runtime rt;

/* DESIGN invariant 4: a green thread can resume on another kernel thread,
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
/* errno is at a per-kernel-thread address that glibc declares `const`, so
 * in a function that parks the compiler may reuse the address computed
 * before the park. Such functions read and write errno through these. */
int errno_get(void);
void errno_set(int e);

/* Bump a counter only its worker writes (others read it relaxed). */
#define COUNT(p, d) STORE_RELAXED((p), *(p) + (d))
int64_t cluster_live(struct fern_cluster *c);
int sched_boot(const fern_config *cfg);
void sched_park(after_fn fn, void *arg);
void sched_ready(fern_thread *t);
/* sched_ready, but behind the threads already queued here: for a party
 * that has no reason to run before them (a joiner woken by an exit). */
void sched_ready_tail(fern_thread *t);
void sched_yield_green(struct worker *w);
/* Queue t on w's pinned list (owner only): it resumes on w; first if
 * `front` (its slice is not over). */
void sched_pin(struct worker *w, fern_thread *t, bool front);
/* The post-switch action of an untimed park under one spin lock or none
 * (wait.c). */
void after_wait_spin(struct worker *w, fern_thread *prev, void *arg);
/* The common park: green thread t on p, untimed, under one spin lock or
 * none, straight to sched_park (after_wait_spin releases the lock). Also
 * parker_wait's (wait.c). */
static inline __attribute__((always_inline)) int parker_park_untimed(struct parker *p, fern_thread *t,
                                                                    uint32_t *lock)
{
    p->timer.deadline = FERN_FOREVER;
    p->thread = t;
    sched_park(after_wait_spin, lock);
    return (int)LOAD(&p->state);
}
/* waiter_wait for a caller that has read its green thread t already (NULL
 * for a plain thread): the common untimed park of a green thread inline,
 * without waiter_wait's call and its second read of the current thread;
 * everything else through waiter_wait. */
static inline __attribute__((always_inline)) int waiter_wait_as(struct waiter *wt, fern_thread *t,
                                                               uint32_t *lock, int64_t deadline)
{
    if (!t || deadline != FERN_FOREVER)
        return waiter_wait(wt, lock, deadline);
    wt->p->solo = wt->p == &wt->own;
    return parker_park_untimed(wt->p, t, lock);
}
/* The calling thread's identity for mutex ownership: its fern_thread, or a
 * per-OS-thread token for plain threads. */
static inline fern_thread *thread_current(void)
{
    struct worker *w = worker_self();
    return w && w->cur != &w->g0 ? w->cur : NULL;
}
extern __thread char fern_plain_token_ __attribute__((tls_model("initial-exec"), visibility("hidden")));
/* Set while a kernel thread that is not a worker (the monitor) fires
 * timers: the sleepers go to the front of their cluster's inbox
 * (sched.c: inbox_push_wake). */
extern __thread bool fern_tls_firing_ __attribute__((tls_model("initial-exec"), visibility("hidden")));
/* The ownership token of green thread t, or of the calling plain thread if
 * t is NULL. Plain threads never change kernel thread, so taking a TLS
 * address here is safe. */
static inline void *token_of(fern_thread *t) { return t ? (void *)t : (void *)&fern_plain_token_; }
static inline void *self_token(void) { return token_of(thread_current()); }

/* The caller of a mutex or condition variable operation, read once per
 * operation (and again after it parks: a green thread may resume on another
 * worker). Kept to two loads: the rest is derived where it is needed. */
struct caller {
    struct worker *w; /* its worker, or NULL for a plain thread */
    uint32_t tag;     /* its worker's bias tag, 0 if it owns no bias slot */
};
static inline void caller_get(struct caller *c)
{
    c->w = worker_self();
    c->tag = c->w ? c->w->bias_tag : 0;
}
/* The green thread, or NULL. */
static inline fern_thread *caller_thread(const struct caller *c)
{
    return c->w && c->w->cur != &c->w->g0 ? c->w->cur : NULL;
}
/* The ownership token (as self_token). */
static inline void *caller_self(const struct caller *c) { return token_of(caller_thread(c)); }

/* An operation on biasable objects (mutex, condition variable, channel)
 * starts with bias_enter for each (bias_enter2 for two) and ends with
 * bias_end, or, if it parks, when waiter_wait's post-switch action clears
 * the busy flag. Returns true for plain mode: the object is biased to the
 * caller's worker, and its fields are read and written without locked
 * instructions (see bias.c). */
static inline void bias_begin(const struct caller *c)
{
    if (c->tag) {
        STORE_RELAXED(c->w->bias_busy, 1);
        __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the store before the loads of bias_ */
    }
}
static inline void bias_end(const struct caller *c)
{
    if (c->tag)
        STORE(c->w->bias_busy, 0);
}
/* 1 plain, 0 shared, -1 to be settled. */
static inline int bias_mode(uint32_t *bias, uint32_t tag)
{
    uint32_t b = LOAD(bias);
    /* Tags are multiples of 4 (BIAS_NONE is 0 and no tag), so b == tag with
     * tag != 0 is a biased object of ours; tested first, it is the case a
     * one-worker cluster's fast paths are for. */
    if (b == tag && tag)
        return 1;
    return b == BIAS_SHARED ? 0 : -1;
}
/* bias_enter's first attempt, for fast paths that must not hold the settle
 * loop (a call in a loop makes the whole function save registers): 1 plain
 * or 0 shared with the operation begun, as bias_enter; -1 if the object is
 * to be settled, with nothing begun (the caller then takes a slow path,
 * which settles it with bias_enter). */
static inline int bias_try(uint32_t *bias, const struct caller *c)
{
    bias_begin(c);
    int mode = bias_mode(bias, c->tag);
    if (unlikely(mode < 0))
        bias_end(c);
    return mode;
}
static inline bool bias_enter(uint32_t *bias, const struct caller *c)
{
    for (;;) {
        int mode = bias_try(bias, c);
        if (likely(mode >= 0))
            return mode;
        bias_settle(bias, c->tag);
    }
}
static inline void bias_enter2(uint32_t *b1, bool *plain1, uint32_t *b2, bool *plain2,
                               const struct caller *c)
{
    for (;;) {
        bias_begin(c);
        int m1 = bias_mode(b1, c->tag), m2 = bias_mode(b2, c->tag);
        if (likely(m1 >= 0 && m2 >= 0)) {
            *plain1 = m1;
            *plain2 = m2;
            return;
        }
        bias_end(c);
        bias_settle(m1 < 0 ? b1 : b2, c->tag);
    }
}
/* A biasable object's queue lock, taken only in shared mode. */
static inline void qlock(bool plain, uint32_t *l)
{
    if (!plain)
        spin_lock(l);
}
static inline void qunlock(bool plain, uint32_t *l)
{
    if (!plain)
        spin_unlock(l);
}
/* The busy flag of the worker w, cleared once a plain-mode operation that
 * parked is off its stack (waiter_wait's post-switch action). */
static inline void bias_idle(struct worker *w)
{
    if (w->bias_tag)
        STORE(w->bias_busy, 0);
}
int cluster_start(struct fern_cluster **out, unsigned nworkers);
void cluster_stop(struct fern_cluster *c);
void cluster_wake(struct fern_cluster *c);
void inbox_push_wake(struct fern_cluster *c, fern_thread *t);

/* A compensation worker's life (worker.spare). Started by the monitor
 * (spare_start), it ends itself when idle (EXITED) and is joined by the
 * monitor or cluster_stop (DORMANT), whose slot a later start reuses. */
enum { SPARE_NO = 0, SPARE_RUNNING = 1, SPARE_EXITED = 2, SPARE_DORMANT = 3 };
#define SPARES_MAX 4u            /* compensation workers per cluster at most */
/* More only to run a thread rescued from a worker asleep in the kernel
 * when every worker, spares included, sleeps there too (monitor.c): it may
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

/* monitor.c */
int monitor_start(int64_t slice_ns, bool preempt);
void monitor_stop(void);
void monitor_kick(void);
extern uint32_t monitor_sleeping __attribute__((visibility("hidden")));
/* A worker leaving its sleep: the monitor must be awake while it is busy. */
static inline void monitor_worker_busy(struct worker *w)
{
    STORE_RELAXED(&w->mon_idle, 0);
    full_fence(); /* mon_idle = 0 before reading monitor_sleeping: see monitor.c */
    if (LOAD_RELAXED(&monitor_sleeping))
        monitor_kick();
}
void monitor_stats(struct fern_stats *s);

/* preempt.c */
int preempt_init(int64_t slice_ns);
void preempt_fini(void);
bool preempt_enabled(void);
/* Start / stop w's CPU-time tick (on w's own kernel thread). */
void preempt_worker_start(struct worker *w);
void preempt_worker_stop(struct worker *w);
/* Send w an extra tick now (monitor): its own come only at the kernel's
 * scheduler tick while it runs. */
void preempt_nudge(struct worker *w);
/* The handler found w's running thread (switch count `switches`) at an
 * unsafe point at two ticks or more, with work waiting: preemption cannot
 * reach it, compensation must. */
bool preempt_blocked(struct worker *w, uint64_t switches);
/* The CPU time at which w's running slice began, as its handler stamped
 * it for switch count `switches`; 0 if it has not stamped that one. */
int64_t preempt_slice_start(struct worker *w, uint64_t switches);
/* Rebuild the table of application code if libraries came or went
 * (monitor thread). */
void preempt_refresh(void);
/* FERN_PREEMPT_LIBS's syntax (config.c): 0 if `list` is valid, 1 if it is
 * malformed, 2 if it names a runtime library that is never preempted. */
int preempt_libs_check(const char *list);
/* One line on f: what preemption may interrupt (fern_dump). */
void preempt_dump(FILE *f);
/* Kernel task tid is asleep in the kernel (/proc state S or D). */
bool task_sleeping(int tid);
/* Under ThreadSanitizer the handler cannot redirect the thread (it gets a
 * copy of the context): fern_mutex_lock and the channel operations call
 * preempt_point() at their start, where the caller holds no fern lock, and
 * yield there. Empty in other builds. */
#ifdef FERN_TSAN
void preempt_point_slow(struct worker *w);
static inline void preempt_point(void)
{
    struct worker *w = worker_self();
    if (w && LOAD_RELAXED(&w->preempt_soft) && w->cur != &w->g0)
        preempt_point_slow(w);
}
#else
static inline void preempt_point(void) {}
#endif
/* Yield from a preempted thread: it goes on w's pinned list. */
void sched_yield_pinned(struct worker *w);

/* deadlock.c: a scan if one is due (rt.boot_lock held); returns when to
 * look again, FERN_FOREVER if nothing is pending. */
int64_t deadlock_watch(int64_t now, bool workers_busy);
uint64_t deadlocks_reported(void);
void deadlock_reset(void);
/* elf.c: the file at path mapped read-only (raw system calls), NULL if it
 * cannot be; *len its size. */
const void *elf_map(const char *path, size_t *len);
void elf_unmap(const void *m, size_t len);
/* The section table of the mapped ELF file m (len bytes), NULL unless it is
 * of this process's class and its program and section headers and every
 * section's contents (SHT_NOBITS aside) lie inside the file; *n entries. */
const ElfW(Shdr) *elf_sections(const void *m, size_t len, unsigned *n);
/* deadlock.c: what reports need from the dynamic loader, looked up once
 * (no fern lock held: see there). */
void deadlock_prepare(void);
/* thread.c: fn(t) for every live thread (under the descriptor lock). */
void threads_walk(void (*fn)(fern_thread *t, void *arg), void *arg);
int threads_dump(FILE *f);
/* blocking.c: helper kernel threads alive. */
unsigned blocking_threads(void);
/* crash.c: its kernel threads (the dump-signal thread). */
unsigned crash_threads(void);

/* timer.c: move every timer of `from` into `to`'s heap. */
void timers_move(struct worker *from, struct worker *to);

/* thread.c internals used by sched.c */
fern_thread *thread_alloc(struct worker *w);
void thread_free(struct worker *w, fern_thread *t);
void threads_fini(uint64_t *abandoned);
void keys_run_dtors(struct keyval **vals);
bool stack_bind(struct worker *w, fern_thread *t);

/* The C bodies of the public entry points that switch.S defines as
 * jump_return trampolines where ARCH_JUMP_RETURN is 1 (same contract as
 * the public function). */
void fern_yield_body(void);
int fern_join_body(fern_thread *t, void **ret);
int fern_chan_send_body(fern_chan *ch, const void *elem);
int fern_chan_recv_body(fern_chan *ch, void *elem);
int fern_cond_wait_body(fern_cond *c, fern_mutex *m);

/* poller.c (the I/O layer: io.h) */
int io_init(void);
void io_fini(void);
bool io_active(void);
bool io_poll_owned(void);
int io_poll_nonblocking(void);
bool io_sleep(struct worker *w, int64_t deadline);
void io_wake(void);
uint64_t io_poller_ctls(void);

/* blocking.c */
void blocking_fini(void);

/* debugmap.c: what a debugger reads (see there) */
struct fern_debug_map;
extern const struct fern_debug_map fern_debug_map;

/* debug.c */
size_t fmt_u64(char *p, uint64_t v);
size_t fmt_str(char *p, const char *s, size_t max);
/* Hand a signal to the action `old` that was installed before fern's:
 * its handler, or the default action (re-raised if the signal was sent). */
void signal_chain(const struct sigaction *old, int sig, siginfo_t *si, void *uc);
void overflow_report(fern_thread *t, const void *addr) __attribute__((noreturn));
int signals_install(void);
int altstack_setup(struct worker *w);
void altstack_free(struct worker *w);

/* crash.c */
void crash_report(int sig, const siginfo_t *si, const struct sigaction *old);
int crash_start(void);
void crash_stop(void);

#endif
