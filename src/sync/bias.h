/* SPDX-License-Identifier: MIT */
/*
 * Biased objects (bias.c explains the protocol): a mutex, condition
 * variable or channel used only by one worker's green threads is worked on
 * with plain loads and stores. Also the caller of an operation (struct
 * caller) and the ownership token, which those operations read once.
 */
#ifndef FERN_SYNC_BIAS_H
#define FERN_SYNC_BIAS_H

#include "sched/sched.h"

#define BIAS_NONE 0u
#define BIAS_SHARED 1u
#define BIAS_REVOKING 2u

/* bias_slot_take and bias_slot_give (for sched/worker.c) are declared in
 * sched/sched.h. */
/* Settle *bias for a caller whose own objects carry `tag` (0 if it can own
 * none): claim an untouched object, or make it shared, revoking another
 * worker's bias. The caller's busy must be clear and it must hold no spin
 * lock. Returns once *bias is tag (nonzero) or BIAS_SHARED. */
void bias_settle(uint32_t *bias, uint32_t tag);
uint64_t bias_revocations(void);

extern __thread char fern_plain_token_ __attribute__((tls_model("initial-exec"), visibility("hidden")));
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

#endif
