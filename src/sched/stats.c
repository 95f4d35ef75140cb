/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's part of fern_stats and fern_dump (debug/debug.c).
 */
#include "sched/sched.h"

void sched_stats(struct fern_stats *s)
{
    uint64_t spawned, exited, bound, unbound;
    plock_lock(&rt.boot_lock);
    spawned = rt.retired_spawned + LOAD_RELAXED(&rt.spawned_ext);
    exited = rt.retired_exited;
    bound = rt.retired_bound;
    unbound = rt.retired_unbound;
    s->migrations = rt.migrations;
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster) {
        s->clusters++;
        for (unsigned i = 0; i < c->nworkers; i++) {
            struct worker *w = c->workers[i];
            s->workers += i < c->nbase || LOAD(&w->spare) == SPARE_RUNNING;
            s->preemptions += LOAD_RELAXED(&w->n_preempts);
            s->preemptions_deferred += LOAD_RELAXED(&w->n_preempts_deferred);
            s->switches += LOAD_RELAXED(&w->n_switches);
            s->steals += LOAD_RELAXED(&w->n_steals);
            s->worker_sleeps += LOAD_RELAXED(&w->n_sleeps);
            s->migrations += LOAD_RELAXED(&w->n_migrations);
            spawned += LOAD_RELAXED(&w->n_spawned);
            exited += LOAD_RELAXED(&w->n_exited);
            bound += LOAD_RELAXED(&w->n_bound);
            unbound += LOAD_RELAXED(&w->n_unbound);
        }
    }
    plock_unlock(&rt.boot_lock);
    s->threads_spawned = spawned;
    s->threads_live = spawned - exited;
    s->stacks_in_use = bound - unbound;
}

/* The workers of c that count (as in sched_stats and the lines below):
 * its base workers and the spares running now. c->nworkers counts slots,
 * which stay after their spares end. */
static bool worker_counts(struct fern_cluster *c, unsigned i, uint32_t *spare_state)
{
    *spare_state = i < c->nbase ? SPARE_RUNNING : LOAD(&c->workers[i]->spare);
    return *spare_state == SPARE_RUNNING;
}

void sched_dump_clusters(FILE *f)
{
    plock_lock(&rt.boot_lock);
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster) {
        /* Each spare's state is read once, for both the count and its
         * line: one that ends meanwhile is in neither or in both. */
        uint32_t state[FERN_WORKERS_MAX + SPARES_MAX + RESCUE_SPARES_MAX];
        unsigned nw = LOAD(&c->nworkers), live = 0, spares = 0;
        for (unsigned i = 0; i < nw; i++)
            if (worker_counts(c, i, &state[i])) {
                live++;
                spares += i >= c->nbase;
            }
        /* Idle counts listed workers, which are running ones; a spare that
         * has just been counted out may still be listed for a moment. */
        unsigned idle = LOAD_RELAXED(&c->nidle);
        if (idle > live)
            idle = live;
        fprintf(f, "cluster %p%s: %u workers", (void *)c, c == rt.dflt ? " (default)" : "", live);
        if (spares)
            fprintf(f, " (%u spare%s)", spares, spares == 1 ? "" : "s");
        fprintf(f, ", %u idle, %u spinning, %u threads, inbox %u\n", idle,
                LOAD_RELAXED(&c->nspinning), (unsigned)cluster_live(c), inbox_len(&c->inbox));
        for (unsigned i = 0; i < nw; i++) {
            struct worker *w = c->workers[i];
            uint32_t q = LOAD_RELAXED(&w->rq_tail) - LOAD_RELAXED(&w->rq_head);
            fern_thread *nx = LOAD_RELAXED(&w->next);
            if (state[i] != SPARE_RUNNING)
                continue;
            fprintf(f, "  worker %u%s: runq %u, next %llu, soon %u, pinned %u, timers %u, switches %llu, "
                       "steals %llu, sleeps %llu",
                    i, i >= c->nbase ? " (spare)" : "", q, nx ? (unsigned long long)nx->id : 0ull,
                    tqueue_len(&w->soon), tqueue_len(&w->pinned), LOAD_RELAXED(&w->timers.n),
                    (unsigned long long)LOAD_RELAXED(&w->n_switches),
                    (unsigned long long)LOAD_RELAXED(&w->n_steals),
                    (unsigned long long)LOAD_RELAXED(&w->n_sleeps));
            /* How long the running thread has run: since the monitor first
             * saw this worker's switch count (its tick is the resolution). */
            fern_thread *cur = LOAD_RELAXED(&w->cur);
            if (cur && cur != &w->g0 && !LOAD_RELAXED(&w->mon.idle)) {
                int64_t since = LOAD_RELAXED(&w->mon.since);
                bool same = LOAD_RELAXED(&w->mon.switches) == LOAD_RELAXED(&w->n_switches);
                if (same && since)
                    fprintf(f, ", running thread %llu for %lld ms", (unsigned long long)cur->id,
                            (long long)((fern_now_ns() - since) / 1000000));
                else
                    fprintf(f, ", running thread %llu for < 1 monitor tick",
                            (unsigned long long)cur->id);
            }
            fputc('\n', f);
        }
    }
    plock_unlock(&rt.boot_lock);
}
