/* SPDX-License-Identifier: MIT */
/*
 * Clusters: starting and stopping a cluster's workers, its live-thread
 * count, and the fern_cluster_* calls.
 */
#include "sched/sched.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int cluster_start(struct fern_cluster **out, unsigned n)
{
    /* On a line of its own (aligned_alloc's size: a multiple of 64). */
    size_t size =
        (sizeof(struct fern_cluster) + (n + SPARES_MAX + RESCUE_SPARES_MAX) * sizeof(struct worker *) + 63) &
        ~(size_t)63;
    struct fern_cluster *c = aligned_alloc(64, size);
    if (!c)
        return ENOMEM;
    memset(c, 0, size);
    c->nworkers = n;
    c->nbase = n;
    for (unsigned i = 0; i < n; i++) {
        struct worker *w = worker_new(c, i, n == 1);
        if (!w) {
            for (unsigned j = 0; j < i; j++)
                worker_free(c->workers[j]);
            free(c);
            return ENOMEM;
        }
        c->workers[i] = w;
    }
    for (unsigned i = 0; i < n; i++) {
        int r = worker_launch(c->workers[i]);
        if (r) {
            STORE(&c->stopping, 1);
            cluster_wake_all(c);
            for (unsigned j = 0; j < i; j++)
                pthread_join(c->workers[j]->os, NULL);
            for (unsigned j = 0; j < n; j++)
                worker_free(c->workers[j]);
            free(c);
            return EAGAIN;
        }
    }
    plock_lock(&rt.boot_lock);
    c->next_cluster = rt.clusters;
    rt.clusters = c;
    rt.nclusters++;
    rt.nworkers += n;
    plock_unlock(&rt.boot_lock);
    *out = c;
    return 0;
}

/* Threads belonging to c: those gained from outside plus what each of its
 * workers gained (spawns) minus lost (exits, migrations away). Exact when no
 * thread of c is being spawned or migrated at the moment of the call. */
int64_t cluster_live(struct fern_cluster *c)
{
    int64_t n = LOAD_RELAXED(&c->live_ext);
    unsigned nw = LOAD(&c->nworkers);
    for (unsigned i = 0; i < nw; i++)
        n += LOAD_RELAXED(&c->workers[i]->live_delta);
    return n;
}


/* The poller may have no owner, while threads wait on descriptors, because
 * a worker that held it has stopped (cluster_stop, after joining them):
 * wake an idle worker of some cluster, which takes the role. rt.boot_lock
 * held (the clusters stay linked). With none idle, the awake workers poll
 * (and the monitor watches: watch_poller). */
void poll_rehome(void)
{
    full_fence();
    if (!io_active() || io_poll_owned())
        return;
    wake_an_idle_cluster();
}

/* Wake an idle worker of the first cluster that has one, to take the
 * poller; false if none is idle. rt.boot_lock held (the clusters stay
 * linked): poll_rehome and the monitor's watch_poller. */
bool wake_an_idle_cluster(void)
{
    for (struct fern_cluster *c = rt.clusters; c; c = c->next_cluster)
        if (LOAD_RELAXED(&c->nidle)) {
            cluster_wake(c);
            return true;
        }
    return false;
}

/* Stop and join c's workers and free it. Caller checked it is unused. */
/* Join w's kernel thread by `deadline` (fern_now_ns; FERN_FOREVER: wait).
 * False if it still runs then: it runs a green thread that neither leaves
 * the CPU nor can be preempted. */
static bool worker_join_by(struct worker *w, int64_t deadline)
{
    if (deadline == FERN_FOREVER)
        return pthread_join(w->os, NULL) == 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t left = deadline - fern_now_ns();
    if (left < 0)
        left = 0;
    int64_t ns = ts.tv_nsec + left % 1000000000;
    ts.tv_sec += left / 1000000000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    if (pthread_timedjoin_np(w->os, NULL, &ts) == 0)
        return true;
    fern_thread *t = LOAD_RELAXED(&w->cur);
    fprintf(stderr,
            "fern: shutdown: a worker still runs green thread %llu \"%.31s\", which neither "
            "leaves the CPU nor can be preempted (preemption off, or code that may not be "
            "preempted); it is left running and the runtime's memory is not released\n",
            t ? (unsigned long long)LOAD_RELAXED(&t->id) : 0ull, t ? t->name : "");
    pthread_detach(w->os);
    return false;
}

void cluster_stop(struct fern_cluster *c) { cluster_stop_by(c, FERN_FOREVER); }

unsigned cluster_stop_by(struct fern_cluster *c, int64_t deadline)
{
    unsigned stuck = cluster_halt_by(c, deadline);
    cluster_retire(c, stuck != 0);
    return stuck;
}

unsigned cluster_halt_by(struct fern_cluster *c, int64_t deadline)
{
    STORE(&c->stopping, 1);
    /* No spare starts after this: spare_start runs under boot_lock and
     * checks `stopping`. */
    plock_lock(&rt.boot_lock);
    plock_unlock(&rt.boot_lock);
    cluster_wake_all(c);
    unsigned stuck = 0;
    for (unsigned i = 0; i < c->nbase; i++)
        stuck += !worker_join_by(c->workers[i], deadline);
    plock_lock(&rt.boot_lock);
    for (unsigned i = c->nbase; i < c->nworkers; i++) {
        struct worker *w = c->workers[i];
        if (LOAD(&w->spare) != SPARE_DORMANT) {
            if (worker_join_by(w, deadline))
                STORE(&w->spare, SPARE_DORMANT);
            else
                stuck++;
        }
    }
    plock_unlock(&rt.boot_lock);
    return stuck;
}

void cluster_retire(struct fern_cluster *c, bool keep)
{
    if (keep) {
        /* Off the list, never freed: a stuck worker still uses it. */
        plock_lock(&rt.boot_lock);
        for (struct fern_cluster **p = &rt.clusters; *p; p = &(*p)->next_cluster)
            if (*p == c) {
                *p = c->next_cluster;
                break;
            }
        rt.nclusters--;
        rt.nworkers -= c->nbase;
        plock_unlock(&rt.boot_lock);
        return;
    }
    while (LOAD(&c->wakers))
        sched_yield(); /* a waker is still inside cluster_wake(c) */
    plock_lock(&rt.boot_lock);
    for (struct fern_cluster **p = &rt.clusters; *p; p = &(*p)->next_cluster)
        if (*p == c) {
            *p = c->next_cluster;
            break;
        }
    rt.nclusters--;
    rt.nworkers -= c->nbase;
    poll_rehome();
    for (unsigned i = 0; i < c->nworkers; i++) {
        struct worker *w = c->workers[i];
        rt.retired_spawned += w->n_spawned;
        rt.retired_exited += w->n_exited;
        rt.retired_bound += w->n_bound;
        rt.retired_unbound += w->n_unbound;
        rt.migrations += w->n_migrations;
    }
    plock_unlock(&rt.boot_lock);
    for (unsigned i = 0; i < c->nworkers; i++)
        worker_free(c->workers[i]);
    free(c->inbox.slot);
    free(c);
}

int fern_cluster_create(fern_cluster **c, unsigned workers)
{
    if (!c || workers == 0 || workers > FERN_WORKERS_MAX)
        return EINVAL;
    int r = runtime_start("fern_cluster_create");
    if (r)
        return r;
    return cluster_start(c, workers);
}

int fern_cluster_destroy(fern_cluster *c)
{
    if (!c || c == rt.dflt)
        return EINVAL;
    struct worker *w = worker_self();
    if (w && w->cluster == c)
        return EBUSY;
    if (cluster_live(c) != 0)
        return EBUSY;
    cluster_stop(c);
    return 0;
}

fern_cluster *fern_cluster_default(void) { return LOAD(&rt.running) ? rt.dflt : NULL; }

fern_cluster *fern_current_cluster(void)
{
    fern_thread *t = thread_current();
    return t ? t->cluster : NULL;
}

/* The workers asked for; compensation workers come and go (fern_stats). */
unsigned fern_cluster_workers(const fern_cluster *c) { return c ? c->nbase : 0; }
