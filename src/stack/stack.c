/* SPDX-License-Identifier: MIT */
/*
 * Stacks: pooled, trimmed, bound late (their memory and guards: slab.c).
 *
 * Pool. Each worker caches freed stacks per class: a few "hot" ones (most
 * recently freed, LIFO, never trimmed, so a burst of short threads reuses
 * stacks whose pages are already committed and in cache) and "cold" ones. A
 * stack that falls from hot to cold is trimmed (MADV_DONTNEED of all but its
 * top STACK_KEEP bytes) by an idle worker (when: sched/idle.c, TRIM_IDLE_NS), so
 * one deep call does not pin memory forever; trimming is never on the
 * spawn/exit path. Beyond STACK_CACHE_MAX a worker hands stacks to the
 * global per-class lists.
 *
 * Late binding: a thread gets its stack when it first runs (stack_bind),
 * from the cache of the worker that runs it.
 *
 * Memory ordering: the global pools are under S.lock. nclean, ndirty and
 * stack_starved are relaxed hints read outside the lock and re-checked
 * under it; trims is a relaxed counter, for fern_stats.
 */
#include "stack/slab.h"
#include "sched/sched.h"

#include <stdio.h>
#include <sys/mman.h>
#ifdef FERN_ASAN
#include <sanitizer/asan_interface.h>
#endif

static void pool_give(struct class_pool *p, struct stack *s);

#define TRIM_PROBE_MAX ((size_t)1 << 20)
static void trim(struct stack *s)
{
    size_t pg = S.page;
    size_t len = s->size > STACK_KEEP ? (s->size - STACK_KEEP) & ~(pg - 1) : 0;
    if (len) {
        bool used = true;
        if (len <= TRIM_PROBE_MAX && S.mincore_ok) {
            unsigned char vec[TRIM_PROBE_MAX / 4096]; /* pages are at least 4 KiB */
            if (mincore(s->lo, len, vec) == 0) {
                used = false;
                for (size_t i = 0; i < len / pg && !used; i++)
                    used = vec[i] & 1;
            }
        }
        if (used) {
            madvise(s->lo, len, MADV_DONTNEED);
            ADD_RELAXED(&S.trims, 1);
        }
    }
    s->dirty = 0;
}

struct stack *stack_get(struct worker *w, int cls)
{
    struct stack_cache *sc = &w->stacks[cls];
    struct stack *s;
    if (sc->nhot) {
        s = sc->hot[--sc->nhot];
    } else if ((s = sc->cold) != NULL) {
        sc->cold = s->next;
        sc->ncold--;
        if (s->dirty)
            sc->ndirty_cold--;
    } else {
        /* Refill a batch from the global pool, or carve one. */
        struct class_pool *p = &S.cls[cls];
        spin_lock(&S.lock);
        for (int i = 0; i < 16; i++) {
            struct stack **from = p->clean ? &p->clean : &p->dirty;
            struct stack *g = *from;
            if (!g)
                break;
            *from = g->next;
            if (from == &p->clean)
                STORE_RELAXED(&p->nclean, p->nclean - 1);
            else
                STORE_RELAXED(&p->ndirty, p->ndirty - 1);
            if (!s) {
                s = g;
                continue;
            }
            g->next = sc->cold;
            sc->cold = g;
            sc->ncold++;
            sc->ndirty_cold += g->dirty;
        }
        char *slot = NULL;
        int mode = 0;
        bool pre = false;
        struct guard_job job;
        if (!s)
            slot = slot_reserve(cls, &mode, &pre, &job);
        spin_unlock(&S.lock);
        if (slot) {
            if (job.lo != job.hi)
                pre = guard_run(cls, slot, &job, class_span(cls) + S.page);
            s = slot_init(slot, cls, mode, pre);
        }
        if (!s)
            return NULL;
    }
    s->next = NULL;
    if (s->guard == FERN_GUARD_CANARY)
        stack_canary_set(s);
    COUNT(&w->n_bound, 1);
    return s;
}

/* Give one starved thread a chance now that a stack is free. */
static void unstarve_one(void)
{
    spin_lock(&S.lock);
    fern_thread *t = S.starved;
    if (t)
        S.starved = t->link;
    if (!S.starved)
        STORE_RELAXED(&stack_starved, 0);
    spin_unlock(&S.lock);
    if (t)
        inbox_push_wake(t->cluster, t);
}

void stack_put(struct worker *w, struct stack *s)
{
    struct stack_cache *sc = &w->stacks[s->cls];
    COUNT(&w->n_unbound, 1);
    s->dirty = 1;
    if (sc->nhot == STACK_HOT) {
        /* The oldest hot stack turns cold: it will be trimmed when idle. */
        struct stack *old = sc->hot[0];
        memmove(&sc->hot[0], &sc->hot[1], (STACK_HOT - 1) * sizeof sc->hot[0]);
        sc->nhot--;
        old->next = sc->cold;
        sc->cold = old;
        sc->ncold++;
        sc->ndirty_cold++;
        if (sc->ncold > STACK_CACHE_MAX) {
            /* Hand half the cold ones to the global pool. */
            struct class_pool *gp = &S.cls[s->cls];
            spin_lock(&S.lock);
            for (uint32_t i = 0; i < STACK_CACHE_MAX / 2; i++) {
                struct stack *c = sc->cold;
                sc->cold = c->next;
                sc->ncold--;
                sc->ndirty_cold -= c->dirty;
                pool_give(gp, c);
            }
            spin_unlock(&S.lock);
        }
    }
    sc->hot[sc->nhot++] = s;
    if (unlikely(LOAD_RELAXED(&stack_starved)))
        unstarve_one();
}

bool stack_trim_pending(struct worker *w)
{
    for (int c = 0; c < STACK_CLASSES; c++)
        if (w->stacks[c].ndirty_cold || LOAD_RELAXED(&S.cls[c].ndirty))
            return true;
    return false;
}

bool stack_trim_some(struct worker *w)
{
    int budget = 32;
    for (int c = 0; c < STACK_CLASSES && budget > 0; c++) {
        struct stack_cache *sc = &w->stacks[c];
        if (!sc->ndirty_cold)
            continue;
        for (struct stack *s = sc->cold; s && budget > 0; s = s->next)
            if (s->dirty) {
                trim(s);
                sc->ndirty_cold--;
                budget--;
            }
    }
    if (budget == 0)
        return true;
    /* Then the global pool's dirty stacks, a batch at a time. */
    for (int c = 0; c < STACK_CLASSES && budget > 0; c++) {
        struct class_pool *p = &S.cls[c];
        if (!LOAD_RELAXED(&p->ndirty))
            continue;
        struct stack *batch = NULL;
        spin_lock(&S.lock);
        while (p->dirty && budget-- > 0) {
            struct stack *s = p->dirty;
            p->dirty = s->next;
            STORE_RELAXED(&p->ndirty, p->ndirty - 1);
            s->next = batch;
            batch = s;
        }
        spin_unlock(&S.lock);
        struct stack *s = batch;
        while (s) {
            struct stack *n = s->next;
            trim(s);
            s = n;
        }
        spin_lock(&S.lock);
        while (batch) {
            struct stack *n = batch->next;
            batch->next = p->clean;
            p->clean = batch;
            STORE_RELAXED(&p->nclean, p->nclean + 1);
            batch = n;
        }
        spin_unlock(&S.lock);
    }
    return budget <= 0;
}

static void pool_give(struct class_pool *p, struct stack *s)
{
    if (s->dirty) {
        s->next = p->dirty;
        p->dirty = s;
        STORE_RELAXED(&p->ndirty, p->ndirty + 1);
    } else {
        s->next = p->clean;
        p->clean = s;
        STORE_RELAXED(&p->nclean, p->nclean + 1);
    }
}

/* A stopping worker hands its cached stacks to the global pool. */
void stack_cache_flush(struct worker *w)
{
    spin_lock(&S.lock);
    for (int c = 0; c < STACK_CLASSES; c++) {
        struct stack_cache *sc = &w->stacks[c];
        for (uint32_t i = 0; i < sc->nhot; i++)
            pool_give(&S.cls[c], sc->hot[i]);
        struct stack *s = sc->cold;
        while (s) {
            struct stack *n = s->next;
            pool_give(&S.cls[c], s);
            s = n;
        }
        memset(sc, 0, sizeof *sc);
    }
    spin_unlock(&S.lock);
}

bool stack_bind(struct worker *w, fern_thread *t)
{
    struct stack *s = stack_get(w, t->stack_cls);
    if (!s) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "fern: out of stack memory or mappings; threads wait for a stack\n");
        spin_lock(&S.lock);
        t->link = S.starved;
        S.starved = t;
        STORE_RELAXED(&stack_starved, 1);
        spin_unlock(&S.lock);
        return false;
    }
#ifdef FERN_ASAN
    /* The previous thread's frames left their redzones poisoned. */
    ASAN_UNPOISON_MEMORY_REGION(s->lo, s->size - sizeof *s);
#endif
    STORE_RELAXED(&t->stack, s); /* fern_dump reads it from any thread */
    STORE_RELAXED(&t->sp, ctx_init((char *)s, t));
    return true;
}
