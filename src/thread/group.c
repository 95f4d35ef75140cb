/* SPDX-License-Identifier: MIT */
/*
 * Groups: structured concurrency (fern_group_*, docs/cancellation.md).
 *
 * A group owns the green threads spawned into it (fern_group_spawn): they
 * run detached, each through group_entry, which on the way out takes the
 * thread off the group's list, keeps the first failure and wakes the
 * waiters when the last one is gone. Cancelling a group cancels every
 * member and every subgroup, and every member spawned into it later
 * (cancelled before it first runs). A group's deadline is a watcher green
 * thread (not a member) that sleeps until then and cancels the group
 * (members spawned later included); destroy cancels and joins it.
 *
 * How a member fails: its result (fn's return value, or fern_exit's) is
 * its error value, NULL (0) for success, as in Go's errgroup, where a
 * function returns an error. A FAILFAST group is cancelled by its first
 * failure, and fern_group_wait returns that failure's value.
 *
 * Locks. g->mu (a fern_mutex) guards the member and subgroup lists, the
 * counts and the first error. Nesting takes a child's mu, then its
 * parent's (a subgroup that gains its first member or loses its last one
 * counts in its parent), never the other way: cancel walks down by
 * collecting the children under the parent's mu and cancelling each after
 * dropping it. fern_cancel takes no lock a member holds (thread/cancel.c),
 * so it is called under mu: a member is on the list, and so alive, until
 * it takes mu on its way out.
 */
#include "thread/thread.h"

#include <stdlib.h>

struct member {
    struct member *next, *prev;
    fern_thread *t;
    fern_group *g;
    fern_fn fn;
    void *arg;
};

struct fern_group {
    fern_mutex mu;
    fern_cond idle;             /* broadcast when live falls to 0 */
    fern_group *parent;
    fern_group *kids, *sib;     /* subgroups (a list under mu), and this one's link */
    struct member *members;     /* running members */
    unsigned live;              /* running members + subgroups with live > 0 */
    unsigned flags;
    bool cancelled;             /* sticky: fern_group_cancel, its deadline, a parent's */
    bool dying;                 /* fern_group_destroy has begun */
    int err;                    /* first failure (FAILFAST), or ETIMEDOUT by the deadline */
    int64_t deadline;
    fern_thread *watcher;       /* the deadline's thread, joinable, or NULL */
    unsigned walkers;           /* group_cancels walking the subgroups */
};

/* Under g->mu: one more running member or live subgroup. */
static void live_inc(fern_group *g)
{
    if (g->live++ == 0 && g->parent) {
        fern_mutex_lock(&g->parent->mu);
        live_inc(g->parent);
        fern_mutex_unlock(&g->parent->mu);
    }
}

/* Under g->mu: one fewer; the waiters are told when none is left. */
static void live_dec(fern_group *g)
{
    if (--g->live)
        return;
    fern_cond_broadcast(&g->idle);
    if (g->parent) {
        fern_mutex_lock(&g->parent->mu);
        live_dec(g->parent);
        fern_mutex_unlock(&g->parent->mu);
    }
}

/* Cancel g, its members and its subgroups; `why` (0 or ETIMEDOUT) is kept
 * as g's error if it has none. The subgroups are collected under g->mu and
 * cancelled after it is dropped (their mu inside ours would invert the
 * order); g->walkers keeps a collected subgroup from being freed meanwhile
 * (fern_group_destroy waits for its parent's walkers). */
static void group_cancel(fern_group *g, int why)
{
    fern_mutex_lock(&g->mu);
    g->cancelled = true;
    if (why && !g->err)
        g->err = why;
    /* Every request, one barrier, then the waits (thread/cancel.c). */
    bool any = false;
    for (struct member *m = g->members; m; m = m->next)
        any |= cancel_request(m->t);
    if (any) {
        cancel_barrier();
        for (struct member *m = g->members; m; m = m->next)
            cancel_claim(m->t);
    }
    size_t n = 0, k = 0;
    for (fern_group *c = g->kids; c; c = c->sib)
        n++;
    fern_group *few[8], **ks = n <= 8 ? few : malloc(n * sizeof *ks);
    if (!ks) { /* no memory: the subgroups are cancelled under our mu */
        for (fern_group *c = g->kids; c; c = c->sib)
            STORE(&c->cancelled, true); /* their new members start cancelled */
        n = 0;
    }
    for (fern_group *c = g->kids; c && k < n; c = c->sib)
        ks[k++] = c;
    g->walkers++;
    fern_mutex_unlock(&g->mu);
    for (size_t i = 0; i < k; i++)
        group_cancel(ks[i], 0);
    if (ks != few)
        free(ks);
    fern_mutex_lock(&g->mu);
    g->walkers--;
    fern_mutex_unlock(&g->mu);
}

static void *group_entry(void *arg)
{
    struct member *m = arg;
    void *r = m->fn(m->arg);
    fern_group *g = m->g;
    int err = (int)(intptr_t)r;
    int was = fern_cancel_shield(1); /* the way out must not fail */
    fern_mutex_lock(&g->mu);
    if (m->prev)
        m->prev->next = m->next;
    else
        g->members = m->next;
    if (m->next)
        m->next->prev = m->prev;
    bool first = err && !g->err && (g->flags & FERN_GROUP_FAILFAST) && !g->cancelled;
    if (first)
        g->err = err;
    fern_mutex_unlock(&g->mu);
    free(m);
    if (first)
        group_cancel(g, 0);
    fern_mutex_lock(&g->mu);
    live_dec(g);
    fern_mutex_unlock(&g->mu);
    fern_cancel_shield(was);
    return r;
}

int fern_group_create(fern_group **gp, fern_group *parent, unsigned flags)
{
    if (!gp || (flags & ~(unsigned)FERN_GROUP_FAILFAST))
        return EINVAL;
    fern_group *g = calloc(1, sizeof *g);
    if (!g)
        return ENOMEM;
    fern_mutex_init(&g->mu);
    fern_cond_init(&g->idle);
    g->flags = flags;
    g->deadline = FERN_FOREVER;
    if (parent) {
        fern_mutex_lock(&parent->mu);
        if (parent->dying) {
            fern_mutex_unlock(&parent->mu);
            free(g);
            return EINVAL;
        }
        g->parent = parent;
        g->sib = parent->kids;
        parent->kids = g;
        g->cancelled = parent->cancelled;
        fern_mutex_unlock(&parent->mu);
    }
    *gp = g;
    return 0;
}

int fern_group_spawn(fern_group *g, fern_thread **t, const fern_attr *attr, fern_fn fn, void *arg)
{
    if (!g || !fn)
        return EINVAL;
    struct member *m = malloc(sizeof *m);
    if (!m)
        return ENOMEM;
    m->g = g;
    m->fn = fn;
    m->arg = arg;
    m->prev = NULL;
    fern_attr a = attr ? *attr : (fern_attr){0};
    a.detached = true;
    fern_mutex_lock(&g->mu);
    if (g->dying) {
        fern_mutex_unlock(&g->mu);
        free(m);
        return EINVAL;
    }
    /* Under mu: the member cannot take itself off the list before it is
     * on it, and a cancel finds it there. */
    fern_thread *th;
    int r = fern_spawn(&th, &a, group_entry, m);
    if (r) {
        fern_mutex_unlock(&g->mu);
        free(m);
        return r;
    }
    m->t = th;
    m->next = g->members;
    if (g->members)
        g->members->prev = m;
    g->members = m;
    live_inc(g);
    if (g->cancelled)
        fern_cancel(th); /* before it first runs: its first wait fails */
    fern_mutex_unlock(&g->mu);
    if (t)
        *t = th;
    return 0;
}

int fern_group_cancel(fern_group *g)
{
    if (!g)
        return EINVAL;
    group_cancel(g, 0);
    return 0;
}

struct watch {
    fern_group *g;
    int64_t deadline;
};

static void *deadline_watch(void *arg)
{
    struct watch w = *(struct watch *)arg;
    free(arg);
    /* Cancelled by fern_group_destroy. */
    if (fern_sleep_until(w.deadline) == 0)
        group_cancel(w.g, ETIMEDOUT);
    return NULL;
}

int fern_group_set_deadline(fern_group *g, int64_t deadline_ns)
{
    if (!g || deadline_ns < 0)
        return EINVAL;
    fern_mutex_lock(&g->mu);
    if (g->watcher || g->dying) {
        fern_mutex_unlock(&g->mu);
        return EBUSY;
    }
    g->deadline = deadline_ns;
    struct watch *w = malloc(sizeof *w);
    int r = w ? 0 : ENOMEM;
    if (w) {
        w->g = g;
        w->deadline = deadline_ns;
        fern_attr a = {.name = "group deadline"};
        r = fern_spawn(&g->watcher, &a, deadline_watch, w);
        if (r) {
            g->watcher = NULL;
            free(w);
        }
    }
    fern_mutex_unlock(&g->mu);
    return r;
}

int fern_group_wait(fern_group *g)
{
    if (!g)
        return EINVAL;
    fern_mutex_lock(&g->mu);
    int cancelled = 0;
    int was = 0;
    while (g->live) {
        int r = fern_cond_wait(&g->idle, &g->mu);
        if (r == ECANCELED) {
            /* The waiter itself was cancelled: its threads stop with it,
             * and it still waits for them (they must not outlive it). */
            cancelled = ECANCELED;
            fern_mutex_unlock(&g->mu);
            group_cancel(g, 0);
            was = fern_cancel_shield(1);
            fern_mutex_lock(&g->mu);
        }
    }
    int err = g->err;
    fern_mutex_unlock(&g->mu);
    if (cancelled) {
        fern_cancel_shield(was);
        return ECANCELED;
    }
    return err;
}

int fern_group_destroy(fern_group *g)
{
    if (!g)
        return EINVAL;
    fern_mutex_lock(&g->mu);
    if (g->live || g->kids) {
        fern_mutex_unlock(&g->mu);
        return EBUSY;
    }
    g->dying = true;
    fern_thread *w = g->watcher;
    g->watcher = NULL;
    fern_mutex_unlock(&g->mu);
    if (w) {
        int was = fern_cancel_shield(1);
        fern_cancel(w);
        fern_join(w, NULL);
        fern_cancel_shield(was);
    }
    if (g->parent) {
        fern_group *p = g->parent;
        fern_mutex_lock(&p->mu);
        for (fern_group **k = &p->kids; *k; k = &(*k)->sib)
            if (*k == g) {
                *k = g->sib;
                break;
            }
        /* A cancel of p that collected g before we unlinked it. */
        while (p->walkers) {
            fern_mutex_unlock(&p->mu);
            fern_yield();
            fern_mutex_lock(&p->mu);
        }
        fern_mutex_unlock(&p->mu);
    }
    /* The last member may still be on its way out of live_dec's unlock. */
    int r;
    while ((r = fern_cond_destroy(&g->idle)) == EBUSY)
        fern_yield();
    while ((r = fern_mutex_destroy(&g->mu)) == EBUSY)
        fern_yield();
    free(g);
    return 0;
}
