/* SPDX-License-Identifier: MIT */
/*
 * stack/: green-thread stacks. slab.c carves them from slabs with a guard
 * below each (madvise, mprotect or canary mode); stack.c pools them per
 * worker in size classes, trims idle ones and binds one to a thread at its
 * first run; slab.h is what the two share. Used by the scheduler (binding, the canary check at each switch,
 * trimming when idle), thread/ (spawn) and debug/ (overflow reports).
 * This header is below sched/ (struct worker embeds the caches); stack.c,
 * which works on a worker's caches and requeues starved threads, includes
 * sched/sched.h. slab.c (the memory and guards) needs only this header.
 */
#ifndef FERN_STACK_H
#define FERN_STACK_H

#include "base/base.h"
#include "base/slow.h"
#include "base/config.h"

struct worker;

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
/* Bind a stack of t's class to t before its first run (from w's cache or
 * the slabs) and build its first frame; false if none can be had now: t
 * then waits on the starved list and is queued again (inbox_push_wake)
 * once a stack is given back. */
bool stack_bind(struct worker *w, fern_thread *t);
/* Threads wait for a stack (relaxed hint): a third of base/slow.h's word,
 * so that the spawn and exit paths test it with the tracer's switch. */
#define stack_starved (fern_slow.starved)
/* Hibernation's view of the slabs (sched/hibernate.c). With
 * config.hibernate every slab has an owner table. stack_slot_of: the slot
 * holding addr (*r); false if addr is in no slab with an owner table.
 * Lock-free, so safe in a signal handler (slabs live until fern_shutdown).
 * stack_madvise_batch: process_madvise(PIDFD_SELF) with `advice` over
 * v[0..n); returns the bytes done or -1. */
struct iovec;
struct slot_ref {
    char *lo, *top;          /* the slot's usable range */
    fern_thread **owners;    /* its slab's owner table */
    size_t index, nslots;    /* the slot's index in it, and its length */
    size_t stride;           /* between slots */
};
bool stack_slot_of(const void *addr, struct slot_ref *r);
long stack_madvise_batch(const struct iovec *v, size_t n, int advice);
size_t stack_page(void);
/* 1: guard markers installed in batches, 0: one call each, -1: none. */
int stack_guard_batched(void);     /* a bind failed recently: spawn says EAGAIN */

#endif
